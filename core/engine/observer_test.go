package engine

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"
)

// recordingObserver keeps what the engine reported.
type recordingObserver struct {
	mu       sync.Mutex
	depths   []int
	started  int
	outcomes []Outcome
	removed  []string
	finished chan struct{} // one send per ExecutionFinished
}

func newRecordingObserver() *recordingObserver {
	return &recordingObserver{finished: make(chan struct{}, 100)}
}

func (o *recordingObserver) QueueDepth(_ string, depth int) {
	o.mu.Lock()
	o.depths = append(o.depths, depth)
	o.mu.Unlock()
}

func (o *recordingObserver) ExecutionStarted(string, time.Duration) {
	o.mu.Lock()
	o.started++
	o.mu.Unlock()
}

func (o *recordingObserver) ExecutionFinished(_ string, outcome Outcome, ran time.Duration) {
	o.mu.Lock()
	o.outcomes = append(o.outcomes, outcome)
	o.mu.Unlock()
	o.finished <- struct{}{}
}

func (o *recordingObserver) ContextRemoved(id string) {
	o.mu.Lock()
	o.removed = append(o.removed, id)
	o.mu.Unlock()
}

func (o *recordingObserver) MessagesLost(string, int) {}

func (o *recordingObserver) KernelReplaced(string, string) {}

// awaitFinished waits for n more ExecutionFinished reports and returns all outcomes so far.
func (o *recordingObserver) awaitFinished(t *testing.T, n int) []Outcome {
	t.Helper()
	for range n {
		select {
		case <-o.finished:
		case <-time.After(bound):
			t.Fatalf("ExecutionFinished was not reported within %s", bound)
		}
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]Outcome(nil), o.outcomes...)
}

func TestObserverSeesEveryOutcomeOnce(t *testing.T) {
	obs := newRecordingObserver()
	e, ft := newTestEngine(t, Config{Observer: obs})

	collect(t, execute(t, e, context.Background(), ExecRequest{Code: "print ok"}))
	collect(t, execute(t, e, context.Background(), ExecRequest{Code: "raise"}))
	collect(t, execute(t, e, context.Background(), ExecRequest{Code: "block", Timeout: 10 * time.Millisecond}))
	got := obs.awaitFinished(t, 3)
	want := []Outcome{OutcomeOK, OutcomeError, OutcomeTimeout}
	if !slices.Equal(got, want) {
		t.Fatalf("outcomes = %v, want %v", got, want)
	}

	// One running, one queued whose client leaves, one queued behind it.
	running := execute(t, e, context.Background(), ExecRequest{Code: "block\nprint running"})
	awaitStart(t, ft.kernel(0), "block\nprint running")
	leaving, leave := context.WithCancel(context.Background())
	execute(t, e, leaving, ExecRequest{Code: "print never"})
	behind := execute(t, e, context.Background(), ExecRequest{Code: "print behind"})
	leave()
	got = obs.awaitFinished(t, 1)
	if last := got[len(got)-1]; last != OutcomeClientGone {
		t.Fatalf("a client that left the queue: outcome %s, want %s", last, OutcomeClientGone)
	}
	releaseBlock(t, ft.kernel(0))
	collect(t, running)
	collect(t, behind)
	got = obs.awaitFinished(t, 2)
	if !slices.Equal(got[4:], []Outcome{OutcomeOK, OutcomeOK}) {
		t.Fatalf("outcomes = %v", got)
	}

	// Running and the client leaves: interrupted.
	runCtx, cancelRun := context.WithCancel(context.Background())
	execute(t, e, runCtx, ExecRequest{Code: "block\nprint interrupted"})
	awaitStart(t, ft.kernel(0), "block\nprint interrupted")
	cancelRun()
	got = obs.awaitFinished(t, 1)
	if last := got[len(got)-1]; last != OutcomeClientGone {
		t.Fatalf("a client that left mid-run: outcome %s, want %s", last, OutcomeClientGone)
	}

	// The kernel dies: aborted.
	collect(t, execute(t, e, context.Background(), ExecRequest{Code: "die"}))
	got = obs.awaitFinished(t, 1)
	if last := got[len(got)-1]; last != OutcomeAborted {
		t.Fatalf("kernel died: outcome %s, want %s", last, OutcomeAborted)
	}

	obs.mu.Lock()
	started, depths := obs.started, append([]int(nil), obs.depths...)
	obs.mu.Unlock()
	if started != 7 { // every execution but the one that left the queue
		t.Errorf("ExecutionStarted reported %d times, want 7", started)
	}
	if peak := slices.Max(depths); peak != 2 || depths[len(depths)-1] != 0 {
		t.Errorf("queue depths %v: want a peak of 2 and 0 at the end", depths)
	}

	id := e.Contexts()[0].ID
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	if err := e.Delete(ctx, id); err != nil {
		t.Fatal(err)
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if len(obs.removed) != 1 || obs.removed[0] != id {
		t.Errorf("ContextRemoved = %v, want [%s]", obs.removed, id)
	}
}
