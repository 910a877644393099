package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kernelhost/kernelhost/core"
)

// A client whose connection was cut re-attaches after the last output it
// saw and gets exactly the rest, live, with no output lost or repeated.
func TestResumeAfterACutGetsExactlyTheRest(t *testing.T) {
	// Under DisconnectContinue the code runs on after the cut (under
	// DisconnectInterrupt the rest would be its interruption).
	e, ft := newTestEngine(t, Config{DisconnectPolicy: DisconnectContinue})
	client, cut := context.WithCancel(context.Background())
	x := execute(t, e, client, ExecRequest{Code: "many 50\nblock\nmany 50"})
	k := ft.kernel(0)
	awaitStart(t, k, "many 50\nblock\nmany 50")

	// The first client reads part of the first 50 lines, then loses the rest.
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	var seen []Output
	for len(seen) < 20 {
		var err error
		if seen, err = x.Next(ctx, seen); err != nil {
			t.Fatal(err)
		}
	}
	seen = seen[:20] // say outputs 21… were written to a socket that died
	cut()

	s := attach(t, x, seen[len(seen)-1].Seq)
	releaseBlock(t, k) // the second half is produced while the new stream reads
	rest := collectStream(t, s)
	assertEnded(t, rest)
	all := append(seen, rest...)
	for i, o := range all {
		if o.Seq != uint64(i+1) {
			t.Fatalf("output %d has seq %d: lost or repeated around it", i+1, o.Seq)
		}
	}
	var want strings.Builder
	for range 2 {
		for i := range 50 {
			fmt.Fprintf(&want, "%d\n", i)
		}
	}
	if got := stdout(all); got != want.String() {
		t.Fatalf("stdout over both streams:\n%q\nwant\n%q", got, want.String())
	}
}

func TestAttachTakesOverAndRefusesWhatItCannotGive(t *testing.T) {
	e, ft := newTestEngine(t, Config{ReplayBytes: 2048})
	x := execute(t, e, context.Background(), ExecRequest{Code: "print a\nblock\nmany 200"})
	k := ft.kernel(0)
	awaitStart(t, k, "print a\nblock\nmany 200")

	s1 := attach(t, x, 0)
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	if _, err := x.Next(ctx, nil); !errors.Is(err, ErrDetached) {
		t.Fatalf("the first stream after a takeover: err = %v, want ErrDetached", err)
	}
	if _, err := x.Attach(99); core.KindOf(err) != core.KindInvalid {
		t.Fatalf("attach after an output that does not exist yet: err = %v, want KindInvalid", err)
	}
	s2 := attach(t, x, 0)
	if _, err := s1.Next(ctx, nil); !errors.Is(err, ErrDetached) {
		t.Fatalf("s1 after s2 attached: err = %v, want ErrDetached", err)
	}
	s2.Close() // nobody attached: the 200 lines are kept within 2 KiB, newest first
	releaseBlock(t, k)
	collect(t, execute(t, e, context.Background(), ExecRequest{Code: "print sync"}))

	_, err := x.Attach(0)
	if core.KindOf(err) != core.KindGone || !errors.Is(err, errReplayGone) {
		t.Fatalf("attach from the start after the buffer overflowed: err = %v, want KindGone", err)
	}
	st := x.State()
	if st.Status != StatusFinished || st.Outcome != OutcomeOK || st.FirstSeq <= 1 || st.Attached {
		t.Fatalf("state = %+v", st)
	}
	outs := collectStream(t, attach(t, x, st.FirstSeq-1))
	if uint64(len(outs)) != st.LastSeq-st.FirstSeq+1 || outs[len(outs)-1].Type != OutEndOfExecution {
		t.Fatalf("from the oldest kept (%d) to the last (%d): got %d outputs", st.FirstSeq, st.LastSeq, len(outs))
	}
}

func TestExecutionStateAndRetention(t *testing.T) {
	// An execution is finished, and retained, once its stream has ended
	// (TestStreamEndIsTheFinishedState): no wait is needed after collect.
	e, ft := newTestEngine(t, Config{ReplayTTL: time.Minute})
	var mu sync.Mutex
	now := time.Now()
	e.clock = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }

	running := execute(t, e, context.Background(), ExecRequest{Code: "block"})
	awaitStart(t, ft.kernel(0), "block")
	queued := execute(t, e, context.Background(), ExecRequest{Code: "raise"})
	if st := running.State(); st.Status != StatusRunning || st.StartedAt == nil || st.FinishedAt != nil {
		t.Fatalf("running: %+v", st)
	}
	if st := queued.State(); st.Status != StatusQueued || st.StartedAt != nil || st.LastSeq != 0 {
		t.Fatalf("queued: %+v", st)
	}
	releaseBlock(t, ft.kernel(0))
	collect(t, running)
	collect(t, queued)
	if st := queued.State(); st.Status != StatusFinished || st.Outcome != OutcomeError || st.FinishedAt == nil {
		t.Fatalf("finished: %+v", st)
	}
	if got, err := e.Execution(queued.ID()); err != nil || got != queued {
		t.Fatalf("lookup of a finished execution: %v, %v", got, err)
	}
	advance(time.Minute)
	if _, err := e.Execution(queued.ID()); core.KindOf(err) != core.KindNotFound {
		t.Fatalf("lookup after the TTL: err = %v, want KindNotFound", err)
	}
	if _, err := e.Execution("no-such-id"); core.KindOf(err) != core.KindNotFound {
		t.Fatalf("unknown id: err = %v", err)
	}

	// At most maxRetainedExecutions finished ones are kept, the newest.
	var ids []string
	for i := range maxRetainedExecutions + 2 {
		x := execute(t, e, context.Background(), ExecRequest{Code: "print " + strconv.Itoa(i)})
		collect(t, x)
		ids = append(ids, x.ID())
	}
	for i, id := range ids {
		_, err := e.Execution(id)
		if gone := i < 2; gone != (core.KindOf(err) == core.KindNotFound) {
			t.Fatalf("execution %d of %d: err = %v", i, len(ids), err)
		}
	}
}

// The end of an execution's stream and its finished state are one step: a
// client that has read end_of_execution finds the execution finished, with
// its outcome, and retained, while the context still resets the execution's
// env vars (held here until the test lets it go). The context stays busy
// until then: the observer hears of the end, and the next execution's code
// runs, only after the reset.
func TestStreamEndIsTheFinishedState(t *testing.T) {
	obs := newRecordingObserver()
	e, ft := newTestEngine(t, Config{Observer: obs})
	collect(t, execute(t, e, context.Background(), ExecRequest{Code: "print warm"}))
	obs.awaitFinished(t, 1)
	k := ft.kernel(0)
	gate := make(chan struct{})
	release := sync.OnceFunc(func() { close(gate) })
	t.Cleanup(release) // before the engine closes, should the test fail
	k.mu.Lock()
	k.resetGate = gate
	k.mu.Unlock()

	x := execute(t, e, context.Background(), ExecRequest{Code: "raise", EnvVars: map[string]string{"A": "1"}})
	assertEnded(t, collect(t, x))
	if st := x.State(); st.Status != StatusFinished || st.Outcome != OutcomeError || st.FinishedAt == nil {
		t.Fatalf("state right after the stream's end: %+v", st)
	}
	if got, err := e.Execution(x.ID()); err != nil || got != x {
		t.Fatalf("lookup right after the stream's end: %v, %v", got, err)
	}
	next := execute(t, e, context.Background(), ExecRequest{Code: "getenv A"})
	select {
	case <-obs.finished:
		t.Fatal("ExecutionFinished was reported before the env reset")
	default:
	}
	release()
	if outs := collect(t, next); stdout(outs) != "A unset" {
		t.Fatalf("the next execution saw %q, want the env var reset first", stdout(outs))
	}
	if outcomes := obs.awaitFinished(t, 2); !slices.Equal(outcomes, []Outcome{OutcomeOK, OutcomeError, OutcomeOK}) {
		t.Fatalf("outcomes %v", outcomes)
	}
}

// The log's bounds and numbering under a random mix of pushes, reads,
// attaches and detaches.
func TestOutputLogBoundsAndNumbering(t *testing.T) {
	const unreadMax, replayMax = 4000, 2000
	const maxEntry = entryOverhead + 100 // the newest output is never forgotten
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 200 {
		l := newOutputLog(unreadMax, replayMax, nil)
		gen, _ := l.attach(0)
		var lastRead uint64
		ctx, cancel := context.WithCancel(context.Background())
		cancel() // next never waits here
		for range 300 {
			switch op := rng.IntN(10); {
			case op < 6:
				l.push(Output{Type: OutStdout, Text: strings.Repeat("x", rng.IntN(100))})
			case op < 8 && gen != 0:
				outs, err := l.next(ctx, gen, nil)
				if err != nil && !errors.Is(err, context.Canceled) {
					t.Fatalf("round %d: next: %v", round, err)
				}
				for _, o := range outs {
					if o.Type == OutStdout && !strings.HasPrefix(o.Text, "[kernelhost]") && o.Seq != lastRead+1 && lastRead != 0 {
						t.Fatalf("round %d: read seq %d after %d", round, o.Seq, lastRead)
					}
					lastRead = o.Seq
				}
			case op == 8 && gen != 0:
				l.detach(gen)
				gen = 0
			default:
				first, last, _ := l.state()
				after := first - 1 + uint64(rng.IntN(int(last-first+2)))
				g, err := l.attach(after)
				if err != nil {
					t.Fatalf("round %d: attach after %d (kept %d..%d): %v", round, after, first, last, err)
				}
				gen, lastRead = g, after
			}
			l.mu.Lock()
			read, unread, attached := l.readBytes, l.unread, l.attached != 0
			l.mu.Unlock()
			if read > replayMax+maxEntry || (!attached && read+unread > replayMax+maxEntry) || unread > unreadMax+replayMax+maxEntry {
				t.Fatalf("round %d: %d read + %d unread bytes kept (attached %v)", round, read, unread, attached)
			}
		}
		l.close()
		if gen != 0 {
			ctx, cancel := context.WithTimeout(context.Background(), bound)
			for {
				_, err := l.next(ctx, gen, nil)
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			cancel()
		}
	}
}

// The engine-wide budget of buffered output: a stream that lets its unread
// output pass it is cut (ErrSlowReader) and its log shrinks to the replay
// bound, releasing the budget; other streams go on; the cut stream's
// execution can be attached again after what it read.
func TestOutputLogBudgetCutsTheSlowStream(t *testing.T) {
	const unreadMax, replayMax, budgetMax = 1 << 20, 4000, 20000
	b := &budget{max: budgetMax}
	slow, fast := newOutputLog(unreadMax, replayMax, b), newOutputLog(unreadMax, replayMax, b)
	slowGen, _ := slow.attach(0)
	fastGen, _ := fast.attach(0)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	line := Output{Type: OutStdout, Text: strings.Repeat("x", 800)}
	first, _ := slow.next(ctx, slowGen, nil) // nothing yet
	_ = first
	slow.push(line)
	read, err := slow.next(ctx, slowGen, nil)
	if err != nil || len(read) != 1 {
		t.Fatalf("first read: %v %v", read, err)
	}
	for range 100 { // 100 KB, never read
		slow.push(line)
		fast.push(line)
		if _, err := fast.next(ctx, fastGen, nil); err != nil {
			t.Fatalf("the fast stream: %v", err)
		}
		if used := b.used.Load(); used > budgetMax {
			t.Fatalf("%d bytes buffered, over the budget %d", used, budgetMax)
		}
	}
	if _, err := slow.next(ctx, slowGen, nil); !errors.Is(err, ErrSlowReader) {
		t.Fatalf("the slow stream's next: %v, want ErrSlowReader", err)
	}
	if used := b.used.Load(); used != 0 {
		t.Fatalf("%d bytes still charged with both streams read or cut", used)
	}
	slow.mu.Lock()
	kept := slow.readBytes + slow.unread
	slow.mu.Unlock()
	if kept > replayMax+entryOverhead+len(line.Text) {
		t.Fatalf("the cut stream's log keeps %d bytes, want at most the replay bound", kept)
	}
	// Re-attach: from the oldest kept output on, numbered without gaps.
	firstKept, last, attached := slow.state()
	if attached || last != 101 {
		t.Fatalf("state after the cut: first %d last %d attached %v", firstKept, last, attached)
	}
	gen, err := slow.attach(firstKept - 1)
	if err != nil {
		t.Fatal(err)
	}
	outs, err := slow.next(ctx, gen, nil)
	if err != nil || outs[0].Seq != firstKept || outs[len(outs)-1].Seq != last {
		t.Fatalf("re-attached: %d outputs %v", len(outs), err)
	}
	if _, err := slow.attach(0); !errors.Is(err, errReplayGone) {
		t.Fatalf("attach from the start after the cut: %v, want errReplayGone", err)
	}
}
