package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/kernelhost/kernelhost/core"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// bound is how long any single wait in these tests may take. Nothing here
// needs more than milliseconds; the bound only turns a hang into a failure.
const bound = 10 * time.Second

func newTestEngine(t *testing.T, cfg Config) (*Engine, *fakeTransport) {
	t.Helper()
	ft := &fakeTransport{}
	cfg.Transport = ft
	if cfg.DefaultCwd == "" {
		cfg.DefaultCwd = "/home/user"
	}
	e, err := NewEngine(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), bound)
		defer cancel()
		if err := e.Close(ctx); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return e, ft
}

func execute(t *testing.T, e *Engine, ctx context.Context, req ExecRequest) *Execution {
	t.Helper()
	x, err := e.Execute(ctx, req)
	if err != nil {
		t.Fatalf("execute %q: %v", req.Code, err)
	}
	return x
}

// collect reads x to its end.
func collect(t *testing.T, x *Execution) []Output {
	t.Helper()
	return readAll(t, x.Next)
}

// collectStream reads s to its end.
func collectStream(t *testing.T, s *Stream) []Output {
	t.Helper()
	return readAll(t, s.Next)
}

func attach(t *testing.T, x *Execution, after uint64) *Stream {
	t.Helper()
	s, err := x.Attach(after)
	if err != nil {
		t.Fatalf("attach after %d: %v", after, err)
	}
	return s
}

// awaitDetached waits until x's log has no stream attached: a client's
// leaving detaches its stream from a context.AfterFunc, i.e. a moment later.
func awaitDetached(t *testing.T, x *Execution) {
	t.Helper()
	timeout := time.After(bound)
	for {
		l := x.out
		l.mu.Lock()
		if l.attached == 0 {
			l.mu.Unlock()
			return
		}
		changed := l.changedLocked()
		l.mu.Unlock()
		select {
		case <-changed:
		case <-timeout:
			t.Fatal("the stream of a client that left is still attached")
		}
	}
}

func readAll(t *testing.T, next func(context.Context, []Output) ([]Output, error)) []Output {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	var outs []Output
	for {
		var err error
		outs, err = next(ctx, outs)
		if errors.Is(err, io.EOF) {
			return outs
		}
		if err != nil {
			t.Fatalf("execution did not end within %s; got so far: %+v", bound, outs)
		}
	}
}

func stdout(outs []Output) string {
	var b strings.Builder
	for _, o := range outs {
		if o.Type == OutStdout {
			b.WriteString(o.Text)
		}
	}
	return b.String()
}

func errorsOf(outs []Output) []Output {
	var errs []Output
	for _, o := range outs {
		if o.Type == OutError {
			errs = append(errs, o)
		}
	}
	return errs
}

func assertEnded(t *testing.T, outs []Output) {
	t.Helper()
	if len(outs) == 0 || outs[len(outs)-1].Type != OutEndOfExecution {
		t.Fatalf("stream does not end with end_of_execution: %+v", outs)
	}
}

// awaitStart waits until the kernel starts running user code.
func awaitStart(t *testing.T, k *fakeKernel, code string) {
	t.Helper()
	timeout := time.After(bound)
	for {
		select {
		case got := <-k.started:
			if got == code {
				return
			}
		case <-timeout:
			t.Fatalf("kernel never started %q", code)
		}
	}
}

func releaseBlock(t *testing.T, k *fakeKernel) {
	t.Helper()
	select {
	case k.release <- struct{}{}:
	case <-time.After(bound):
		t.Fatal("nothing was blocked to release")
	}
}

// The fake kernel's stop_on_error, which TestInvariant3 relies on to catch
// an engine that pipelines: a request queued while another fails is
// aborted; one sent after the failure's reply and idle is not.
func TestFakeKernelStopOnError(t *testing.T) {
	var ft fakeTransport
	kern, err := ft.StartKernel(context.Background(), core.KernelSpec{Language: "python"})
	if err != nil {
		t.Fatal(err)
	}
	k := kern.(*fakeKernel)
	t.Cleanup(k.lose)
	ctx := context.Background()
	waitIdle := func(id string) (aborted bool) {
		t.Helper()
		timeout := time.After(bound)
		for {
			select {
			case m := <-k.Messages():
				if m.ParentID == id && m.Type == core.MsgExecuteReply {
					aborted = m.Status == core.ReplyAborted
				}
				if m.ParentID == id && m.Type == core.MsgStatus && m.State == core.StateIdle {
					return aborted
				}
			case <-timeout:
				t.Fatalf("no idle for %s", id)
			}
		}
	}
	for _, req := range []core.ExecuteRequest{{MsgID: "a", Code: "block\nraise"}, {MsgID: "queued", Code: "print q"}} {
		if err := k.Execute(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	awaitStart(t, k, "block\nraise")
	releaseBlock(t, k)
	if waitIdle("a") {
		t.Fatal("the failing request itself was aborted")
	}
	// At once, as the engine sends its env reset after an idle.
	if err := k.Execute(ctx, core.ExecuteRequest{MsgID: "after", Code: "print after"}); err != nil {
		t.Fatal(err)
	}
	if !waitIdle("queued") {
		t.Fatal("the request queued behind the failure was not aborted")
	}
	if waitIdle("after") {
		t.Fatal("a request sent after the failure's idle was aborted")
	}
	if maxOut, aborted := k.stats(); maxOut != 2 || aborted != 1 {
		t.Fatalf("stats: up to %d outstanding, %d aborted; want 2 and 1", maxOut, aborted)
	}
}

func TestExecuteStreamsOutputsInOrder(t *testing.T) {
	e, _ := newTestEngine(t, Config{})
	outs := collect(t, execute(t, e, context.Background(), ExecRequest{Code: "print hi\neprint oops\nresult 2"}))
	want := []OutputType{OutNumberOfExecutions, OutStdout, OutStderr, OutResult, OutEndOfExecution}
	if len(outs) != len(want) {
		t.Fatalf("got %d outputs %+v, want types %v", len(outs), outs, want)
	}
	for i, o := range outs {
		if o.Type != want[i] {
			t.Errorf("output %d: type %s, want %s", i, o.Type, want[i])
		}
	}
	if outs[0].ExecutionCount != 1 {
		t.Errorf("first user execution has count %d, want 1 (helpers must not count)", outs[0].ExecutionCount)
	}
	if !outs[3].IsMainResult || string(outs[3].Bundle["text/plain"]) != `"2"` {
		t.Errorf("result = %+v", outs[3])
	}
	if outs[1].Timestamp == "" {
		t.Error("stdout line has no timestamp")
	}
	second := collect(t, execute(t, e, context.Background(), ExecRequest{Code: "print again", Language: "python"}))
	if second[0].ExecutionCount != 2 {
		t.Errorf("second execution count = %d, want 2 (language python shares the default context)", second[0].ExecutionCount)
	}
}

// Invariant 1: admission follows the kernel, never the client.
func TestInvariant1ClientGoneDoesNotHoldTheSlot(t *testing.T) {
	t.Run("continue policy: next runs as soon as the kernel finishes", func(t *testing.T) {
		e, ft := newTestEngine(t, Config{DisconnectPolicy: DisconnectContinue})
		clientA, leaveA := context.WithCancel(context.Background())
		execute(t, e, clientA, ExecRequest{Code: "block\nprint late"})
		k := ft.kernel(0)
		awaitStart(t, k, "block\nprint late")
		leaveA()
		b := execute(t, e, context.Background(), ExecRequest{Code: "print b"})
		releaseBlock(t, k) // the kernel finishes A; nobody reads A's stream
		outs := collect(t, b)
		if got := stdout(outs); got != "b\n" {
			t.Fatalf("B saw stdout %q, want only its own", got)
		}
	})
	t.Run("continue policy, a request that asks to be interrupted when its client leaves", func(t *testing.T) {
		e, ft := newTestEngine(t, Config{DisconnectPolicy: DisconnectContinue})
		clientA, leaveA := context.WithCancel(context.Background())
		execute(t, e, clientA, ExecRequest{Code: "block", InterruptWhenClientLeaves: true})
		k := ft.kernel(0)
		awaitStart(t, k, "block")
		b := execute(t, e, context.Background(), ExecRequest{Code: "print b"})
		leaveA() // no release: only the interrupt can end A
		if got := stdout(collect(t, b)); got != "b\n" {
			t.Fatalf("B stdout = %q", got)
		}
	})
	t.Run("interrupt policy: the kernel is interrupted and next runs", func(t *testing.T) {
		e, ft := newTestEngine(t, Config{})
		clientA, leaveA := context.WithCancel(context.Background())
		execute(t, e, clientA, ExecRequest{Code: "block"})
		k := ft.kernel(0)
		awaitStart(t, k, "block")
		b := execute(t, e, context.Background(), ExecRequest{Code: "print b"})
		leaveA() // no release: only the interrupt can end A
		if got := stdout(collect(t, b)); got != "b\n" {
			t.Fatalf("B stdout = %q", got)
		}
	})
	t.Run("ignored interrupt escalates to a restart", func(t *testing.T) {
		e, ft := newTestEngine(t, Config{InterruptGrace: 50 * time.Millisecond})
		clientA, leaveA := context.WithCancel(context.Background())
		execute(t, e, clientA, ExecRequest{Code: "ignoreint"})
		k := ft.kernel(0)
		awaitStart(t, k, "ignoreint")
		b := execute(t, e, context.Background(), ExecRequest{Code: "print b"})
		leaveA()
		outs := collect(t, b)
		if got := stdout(outs); got != "b\n" {
			t.Fatalf("B stdout = %q", got)
		}
		if outs[0].ExecutionCount != 1 {
			t.Errorf("B count = %d, want 1 after the restart", outs[0].ExecutionCount)
		}
	})
	t.Run("a reader that never reads does not delay the next execution", func(t *testing.T) {
		e, _ := newTestEngine(t, Config{MaxOutputBytes: 4096})
		execute(t, e, context.Background(), ExecRequest{Code: "many 5000"}) // never read
		if got := stdout(collect(t, execute(t, e, context.Background(), ExecRequest{Code: "print b"}))); got != "b\n" {
			t.Fatalf("B stdout = %q", got)
		}
	})
}

func TestSlowReaderIsToldWhatWasDropped(t *testing.T) {
	e, _ := newTestEngine(t, Config{MaxOutputBytes: 4096})
	x := execute(t, e, context.Background(), ExecRequest{Code: "many 1000\nprint last"})
	// Let the kernel finish before reading anything.
	if got := stdout(collect(t, execute(t, e, context.Background(), ExecRequest{Code: "print sync"}))); got != "sync\n" {
		t.Fatal(got)
	}
	outs := collect(t, x)
	assertEnded(t, outs)
	var notice bool
	for _, o := range outs {
		if o.Type == OutStderr && strings.Contains(o.Text, "dropped") {
			notice = true
		}
	}
	if !notice {
		t.Fatalf("no drop notice in %d outputs", len(outs))
	}
}

// Invariant 2: a request's env vars are reset before any later code runs,
// however the request ended.
func TestInvariant2EnvVarsNeverLeak(t *testing.T) {
	endings := map[string]struct {
		code  string
		leave bool // the client disconnects mid-execution
	}{
		"success":         {code: "print done"},
		"error":           {code: "raise"},
		"client gone":     {code: "block", leave: true},
		"blocked then ok": {code: "block\nprint done"},
	}
	for name, ending := range endings {
		t.Run(name, func(t *testing.T) {
			e, ft := newTestEngine(t, Config{GlobalEnv: func(context.Context) (map[string]string, error) {
				return map[string]string{"SHARED": "global"}, nil
			}})
			secret := "it's \"a\" \\secret\n$(rm -rf /) ünï 😀\t"
			clientA, leaveA := context.WithCancel(context.Background())
			defer leaveA()
			codeA := "getenv SECRET\ngetenv SHARED\n" + ending.code
			a := execute(t, e, clientA, ExecRequest{Code: codeA, EnvVars: map[string]string{"SECRET": secret, "SHARED": "mine"}})
			k := ft.kernel(0)
			awaitStart(t, k, codeA)
			// B is queued while A runs: it overlaps A in time.
			b := execute(t, e, context.Background(), ExecRequest{Code: "getenv SECRET\ngetenv SHARED"})
			switch {
			case ending.leave:
				leaveA()
			case strings.HasPrefix(ending.code, "block"):
				releaseBlock(t, k)
			}
			if !ending.leave {
				if got, want := stdout(collect(t, a)), "SECRET="+secret+"SHARED=mine"; !strings.HasPrefix(got, want) {
					t.Errorf("A saw %q, want prefix %q", got, want)
				}
			}
			if got, want := stdout(collect(t, b)), "SECRET unsetSHARED=global"; got != want {
				t.Fatalf("B saw %q, want %q", got, want)
			}
		})
	}
}

// Invariant 3: an error in one execution never aborts another's.
func TestInvariant3ErrorsDoNotCascade(t *testing.T) {
	e, ft := newTestEngine(t, Config{})
	collect(t, execute(t, e, context.Background(), ExecRequest{Code: "print warm"}))
	k := ft.kernel(0)
	for i := range 20 {
		a := execute(t, e, context.Background(), ExecRequest{Code: "block\nraise", EnvVars: map[string]string{"A": "1"}})
		awaitStart(t, k, "block\nraise")
		b := execute(t, e, context.Background(), ExecRequest{Code: fmt.Sprintf("print b%d", i)})
		releaseBlock(t, k)
		if errs := errorsOf(collect(t, a)); len(errs) != 1 || errs[0].ErrName != "NameError" {
			t.Fatalf("A errors = %+v, want exactly one NameError", errs)
		}
		outs := collect(t, b)
		if errs := errorsOf(outs); len(errs) != 0 {
			t.Fatalf("B was hit by A's error: %+v", errs)
		}
		if got := stdout(outs); got != fmt.Sprintf("b%d\n", i) {
			t.Fatalf("B stdout = %q", got)
		}
	}
	if maxOut, aborted := k.stats(); maxOut != 1 || aborted != 0 {
		t.Fatalf("kernel saw up to %d requests queued and aborted %d: the engine pipelined", maxOut, aborted)
	}
}

// Invariant 4: messages reach only their own execution; kernel-wide events end
// what is in flight with a clear error.
func TestInvariant4Routing(t *testing.T) {
	t.Run("stray and late messages are dropped", func(t *testing.T) {
		e, ft := newTestEngine(t, Config{DisconnectPolicy: DisconnectContinue})
		if got := stdout(collect(t, execute(t, e, context.Background(), ExecRequest{Code: "stray\nprint mine"}))); got != "mine\n" {
			t.Fatalf("stdout = %q", got)
		}
		clientA, leaveA := context.WithCancel(context.Background())
		execute(t, e, clientA, ExecRequest{Code: "block\nprint late-from-A"})
		k := ft.kernel(0)
		awaitStart(t, k, "block\nprint late-from-A")
		leaveA()
		b := execute(t, e, context.Background(), ExecRequest{Code: "print b"})
		releaseBlock(t, k)
		if got := stdout(collect(t, b)); got != "b\n" {
			t.Fatalf("B stdout = %q", got)
		}
	})
	t.Run("restart ends the running execution", func(t *testing.T) {
		e, ft := newTestEngine(t, Config{})
		a := execute(t, e, context.Background(), ExecRequest{Code: "block"})
		k := ft.kernel(0)
		awaitStart(t, k, "block")
		if err := e.Restart(context.Background(), a.ContextID()); err != nil {
			t.Fatal(err)
		}
		outs := collect(t, a)
		assertEnded(t, outs)
		if errs := errorsOf(outs); len(errs) != 1 || errs[0].ErrName != errNameUnexpectedEnd {
			t.Fatalf("errors = %+v", errs)
		}
		next := collect(t, execute(t, e, context.Background(), ExecRequest{Code: "cwd"}))
		if next[0].ExecutionCount != 1 || stdout(next) != "/home/user" {
			t.Fatalf("after restart: %+v (want count 1 and the cwd applied again)", next)
		}
	})
	t.Run("a kernel that dies ends the execution and comes back", func(t *testing.T) {
		e, _ := newTestEngine(t, Config{})
		outs := collect(t, execute(t, e, context.Background(), ExecRequest{Code: "die"}))
		if errs := errorsOf(outs); len(errs) != 1 || errs[0].ErrName != errNameKernelDied {
			t.Fatalf("errors = %+v", errs)
		}
		if got := stdout(collect(t, execute(t, e, context.Background(), ExecRequest{Code: "print back"}))); got != "back\n" {
			t.Fatalf("after death: %q", got)
		}
	})
	t.Run("a lost kernel ends the execution; the next one gets a new kernel", func(t *testing.T) {
		e, ft := newTestEngine(t, Config{})
		a := execute(t, e, context.Background(), ExecRequest{Code: "block"})
		awaitStart(t, ft.kernel(0), "block")
		ft.kernel(0).lose()
		outs := collect(t, a)
		if errs := errorsOf(outs); len(errs) != 1 || errs[0].ErrName != errNameUnexpectedEnd {
			t.Fatalf("errors = %+v", errs)
		}
		if got := stdout(collect(t, execute(t, e, context.Background(), ExecRequest{Code: "cwd"}))); got != "/home/user" {
			t.Fatalf("new kernel: %q", got)
		}
	})
}

// Invariant 5: shutting down ends every stream and leaves nothing behind
// (TestMain checks goroutines).
func TestInvariant5CloseEndsEverything(t *testing.T) {
	ft := &fakeTransport{}
	e, err := NewEngine(Config{Transport: ft})
	if err != nil {
		t.Fatal(err)
	}
	running := execute(t, e, context.Background(), ExecRequest{Code: "block"})
	awaitStart(t, ft.kernel(0), "block")
	queued := execute(t, e, context.Background(), ExecRequest{Code: "print never"})
	other, err := e.CreateContext(context.Background(), "python", "/tmp")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	if err := e.Close(ctx); err != nil {
		t.Fatal(err)
	}
	for _, x := range []*Execution{running, queued} {
		outs := collect(t, x)
		assertEnded(t, outs)
		if len(errorsOf(outs)) != 1 {
			t.Errorf("%s: want one error line, got %+v", x.code, outs)
		}
	}
	for i := range 2 {
		if k := ft.kernel(i); !k.shut {
			t.Errorf("kernel %d not shut down", i)
		}
	}
	if _, err := e.Execute(context.Background(), ExecRequest{Code: "x", ContextID: other.ID}); core.KindOf(err) != core.KindNotFound {
		t.Errorf("execute after close: %v", err)
	}
}

func TestQueueIsBoundedAndLeavable(t *testing.T) {
	e, ft := newTestEngine(t, Config{QueueDepth: 2})
	a := execute(t, e, context.Background(), ExecRequest{Code: "block"})
	k := ft.kernel(0)
	awaitStart(t, k, "block")
	leaving, leave := context.WithCancel(context.Background())
	gone := execute(t, e, leaving, ExecRequest{Code: "print never-sent"})
	c := execute(t, e, context.Background(), ExecRequest{Code: "print c"})
	if _, err := e.Execute(context.Background(), ExecRequest{Code: "print d"}); core.KindOf(err) != core.KindQueueFull {
		t.Fatalf("third queued execution: err = %v, want KindQueueFull", err)
	}
	leave()
	// Its stream says so, to anyone who re-attaches.
	if errs := errorsOf(collectStream(t, attach(t, gone, 0))); len(errs) != 1 || errs[0].ErrName != errNameCancelled {
		t.Fatalf("a client that left the queue: errors %+v, want one %s", errs, errNameCancelled)
	}
	// Its place is free again.
	d := execute(t, e, context.Background(), ExecRequest{Code: "print d"})
	releaseBlock(t, k)
	collect(t, a)
	if got := stdout(collect(t, c)) + stdout(collect(t, d)); got != "c\nd\n" {
		t.Fatalf("got %q", got)
	}
	for {
		select {
		case code := <-k.started:
			if code == "print never-sent" {
				t.Fatal("the code of a client that left the queue reached the kernel")
			}
			continue
		default:
		}
		break
	}
}

func TestBadInputIsRefusedBeforeAnythingRuns(t *testing.T) {
	e, ft := newTestEngine(t, Config{})
	ctx := context.Background()
	info, err := e.CreateContext(ctx, "", "")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		req  ExecRequest
		kind core.ErrorKind
		msg  string
	}{
		{"both context and language", ExecRequest{Code: "x", ContextID: info.ID, Language: "python"}, core.KindInvalid, "Only one of context_id or language can be provided"},
		{"unknown context", ExecRequest{Code: "x", ContextID: "nope"}, core.KindNotFound, "Context nope not found"},
		{"invalid key", ExecRequest{Code: "x", EnvVars: map[string]string{"MY-VAR": "1"}}, core.KindInvalid, `invalid env var name "MY-VAR"`},
		{"key injection", ExecRequest{Code: "x", EnvVars: map[string]string{"A']=1;import os#": "1"}}, core.KindInvalid, "invalid env var name"},
		{"NUL in value", ExecRequest{Code: "x", EnvVars: map[string]string{"A": "a\x00b"}}, core.KindInvalid, "NUL"},
		{"unknown language", ExecRequest{Code: "x", Language: "cobol"}, core.KindInternal, `no kernel for language "cobol"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.Execute(ctx, tc.req)
			if core.KindOf(err) != tc.kind || err == nil || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("err = %v (kind %d), want kind %d containing %q", err, core.KindOf(err), tc.kind, tc.msg)
			}
		})
	}
	if _, err := e.CreateContext(ctx, "python", "/missing/dir"); core.KindOf(err) != core.KindInvalid {
		t.Fatalf("bad cwd: %v", err)
	}
	ft.mu.Lock()
	last := ft.kernels[len(ft.kernels)-1]
	ft.mu.Unlock()
	if !last.shut {
		t.Error("the kernel started for a bad cwd was left running")
	}
	if len(e.Contexts()) != 1 {
		t.Errorf("contexts = %+v, want only the good one", e.Contexts())
	}
	// Nothing else was disturbed.
	if got := stdout(collect(t, execute(t, e, ctx, ExecRequest{Code: "print ok", ContextID: info.ID}))); got != "ok\n" {
		t.Fatalf("context after bad input: %q", got)
	}
}

// A transport's start failure keeps its kind when the client can act on it:
// unavailable (a transport plugin that is restarting: try again, HTTP 503)
// and invalid; any other is the host's own failure.
func TestStartFailureKinds(t *testing.T) {
	e, ft := newTestEngine(t, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	for _, tc := range []struct {
		err  error
		want core.ErrorKind
	}{
		{&core.Error{Kind: core.KindUnavailable, Msg: "transport plugin x is restarting and was not back in time"}, core.KindUnavailable},
		{&core.Error{Kind: core.KindInvalid, Msg: "no such directory"}, core.KindInvalid},
		{&core.Error{Kind: core.KindNotFound, Msg: "not a context"}, core.KindInternal},
		{errors.New("boom"), core.KindInternal},
	} {
		ft.mu.Lock()
		ft.startErr = fmt.Errorf("start python kernel: %w", tc.err)
		ft.mu.Unlock()
		_, err := e.CreateContext(ctx, "python", "")
		if core.KindOf(err) != tc.want || !strings.Contains(err.Error(), tc.err.Error()) {
			t.Errorf("start failing with %v: %v (kind %v), want kind %v", tc.err, err, core.KindOf(err), tc.want)
		}
	}
}

// A restart's setup request is sent once the context has seen the kernel's
// restarting status; it must not be handed that same status, which would
// fail the restart ("Failed to set up the context ...: the kernel reported
// restarting"). router.broadcast records the event and lists the requests
// to tell in one step for this reason: a setup request registering between
// two such steps would be told. Many restarts in a row give any such gap
// many chances to show.
func TestRestartSetupIsNotToldOfItsOwnRestart(t *testing.T) {
	e, _ := newTestEngine(t, Config{})
	ctx := context.Background()
	info, err := e.CreateContext(ctx, "python", "/tmp")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 300 {
		if err := e.Restart(ctx, info.ID); err != nil {
			t.Fatalf("restart %d: %v", i, err)
		}
	}
	if got := stdout(collect(t, execute(t, e, ctx, ExecRequest{Code: "cwd", ContextID: info.ID}))); got != "/tmp" {
		t.Fatalf("cwd after the restarts: %q", got)
	}
}

// An execution's env vars are reset on the interpreter that got them, never
// on one that replaced it: when the restart after an ignored interrupt fails,
// the context starts a new kernel, which never had them, and a reset there
// would take away the global value its setup gave it.
func TestNoEnvResetOnAKernelThatNeverHadTheEnvVars(t *testing.T) {
	globals := func(context.Context) (map[string]string, error) { return map[string]string{"A": "global"}, nil }
	e, ft := newTestEngine(t, Config{GlobalEnv: globals, InterruptGrace: 10 * time.Millisecond})
	collect(t, execute(t, e, context.Background(), ExecRequest{Code: "print warm"}))
	k := ft.kernel(0)
	k.mu.Lock()
	k.failRestart = true
	k.mu.Unlock()

	x := execute(t, e, context.Background(), ExecRequest{Code: "ignoreint", EnvVars: map[string]string{"A": "1"}, Timeout: 10 * time.Millisecond})
	assertEnded(t, collect(t, x))
	outs := collect(t, execute(t, e, context.Background(), ExecRequest{Code: "getenv A"}))
	if got := stdout(outs); got != "A=global" {
		t.Fatalf("after a new kernel replaced the one that had A=1: %q, want A=global", got)
	}
	ft.mu.Lock()
	n := len(ft.kernels)
	ft.mu.Unlock()
	if n != 2 {
		t.Fatalf("%d kernels started, want 2 (the restart failed)", n)
	}
}

func TestContextsListingAndDefaults(t *testing.T) {
	e, _ := newTestEngine(t, Config{})
	ctx := context.Background()
	extra, err := e.CreateContext(ctx, " Python ", "/tmp")
	if err != nil {
		t.Fatal(err)
	}
	def, err := e.DefaultContext(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	list := e.Contexts()
	if len(list) != 2 || list[0] != def.Info() || list[1] != extra {
		t.Fatalf("listing = %+v, want the default first, then %+v", list, extra)
	}
	if err := e.Restart(ctx, extra.ID); err != nil {
		t.Fatal(err)
	}
	if list2 := e.Contexts(); list2[1] != extra {
		t.Fatalf("restart moved the entry: %+v", list2)
	}
	if err := e.Delete(ctx, def.Info().ID); err != nil {
		t.Fatal(err)
	}
	if err := e.Delete(ctx, def.Info().ID); core.KindOf(err) != core.KindNotFound {
		t.Fatalf("second delete: %v", err)
	}
	again, err := e.DefaultContext(ctx, "python")
	if err != nil || again.Info().ID == def.Info().ID {
		t.Fatalf("deleted default was not recreated: %v", err)
	}
}

func TestConcurrentFirstUseStartsOneDefaultKernel(t *testing.T) {
	e, ft := newTestEngine(t, Config{})
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			x, err := e.Execute(context.Background(), ExecRequest{Code: "print x"})
			if err != nil {
				t.Error(err)
				return
			}
			collect(t, x)
		})
	}
	wg.Wait()
	ft.mu.Lock()
	defer ft.mu.Unlock()
	if len(ft.kernels) != 1 {
		t.Fatalf("%d kernels started for one default context", len(ft.kernels))
	}
}

type testPolicy struct{}

func (testPolicy) Evaluate(_ context.Context, in PolicyInput) (PolicyDecision, error) {
	if _, ok := in.EnvVars["LD_PRELOAD"]; ok {
		return PolicyDecision{Rejections: []Rejection{{Key: "LD_PRELOAD", Reason: "denied"}}}, nil
	}
	if v, ok := in.EnvVars["CRASH"]; ok {
		return PolicyDecision{}, errors.New("module trapped: " + v)
	}
	out := map[string]string{}
	for k, v := range in.EnvVars {
		out[k] = strings.ToUpper(v)
	}
	return PolicyDecision{EnvVars: out}, nil
}

func TestPolicyDecidesBeforeAnythingRuns(t *testing.T) {
	e, ft := newTestEngine(t, Config{Policy: testPolicy{}})
	ctx := context.Background()
	for _, env := range []map[string]string{{"LD_PRELOAD": "/x.so"}, {"CRASH": "boom"}} {
		if _, err := e.Execute(ctx, ExecRequest{Code: "print no", EnvVars: env}); core.KindOf(err) != core.KindRejected {
			t.Fatalf("env %v: err = %v, want KindRejected", env, err)
		}
	}
	if got := stdout(collect(t, execute(t, e, ctx, ExecRequest{Code: "getenv A", EnvVars: map[string]string{"A": "rewritten"}}))); got != "A=REWRITTEN" {
		t.Fatalf("rewritten value: %q", got)
	}
	if _, aborted := ft.kernel(0).stats(); aborted != 0 {
		t.Fatal("aborts")
	}
}

// A hammer test: many clients on a few contexts at once. Every execution sees
// only its own output and env, in FIFO order per context.
func TestHammerManyClientsFewContexts(t *testing.T) {
	e, _ := newTestEngine(t, Config{QueueDepth: 1000})
	ctx := context.Background()
	ids := make([]string, 4)
	for i := range ids {
		info, err := e.CreateContext(ctx, "python", "")
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = info.ID
	}
	var wg sync.WaitGroup
	for c := range 16 {
		wg.Go(func() {
			for i := range 25 {
				tag := fmt.Sprintf("c%d-%d", c, i)
				x, err := e.Execute(ctx, ExecRequest{Code: "getenv TAG\nprint " + tag, ContextID: ids[(c+i)%len(ids)], EnvVars: map[string]string{"TAG": tag}})
				if err != nil {
					t.Error(err)
					return
				}
				if got, want := stdout(collect(t, x)), "TAG="+tag+tag+"\n"; got != want {
					t.Errorf("got %q, want %q", got, want)
				}
			}
		})
	}
	wg.Wait()
}

// TestHammerRouterAndLoopEndTheSameExecution drives an execution's two
// writers at once: the router, which puts each message's output on the
// stream and ends it when the kernel reports the request finished, and the
// context's loop, which ends it on a timeout, an error, a restart. Every
// stream must still be whole: numbered without gaps, its stdout in kernel
// order, at most one error line, one end, and an outcome that agrees with
// what the stream said.
func TestHammerRouterAndLoopEndTheSameExecution(t *testing.T) {
	e, _ := newTestEngine(t, Config{QueueDepth: 1000, InterruptGrace: time.Second})
	ctx := context.Background()
	info, err := e.CreateContext(ctx, "python", "")
	if err != nil {
		t.Fatal(err)
	}
	var want strings.Builder
	for i := range 200 {
		fmt.Fprintf(&want, "%d\n", i)
	}
	var wg sync.WaitGroup
	for c := range 8 {
		wg.Go(func() {
			for i := range 12 {
				req := ExecRequest{Code: "many 200", ContextID: info.ID}
				switch (c + i) % 4 {
				case 0:
					req.Timeout = time.Duration(1+i%5) * 50 * time.Microsecond
				case 1:
					req.Code += "\nraise"
				case 2:
					if i%3 == 0 {
						go func() { _ = e.Restart(ctx, info.ID) }()
					}
				}
				x, err := e.Execute(ctx, req)
				if err != nil {
					t.Error(err)
					return
				}
				checkWhole(t, x, collect(t, x), want.String())
			}
		})
	}
	wg.Wait()
	if got := stdout(collect(t, execute(t, e, ctx, ExecRequest{Code: "print after", ContextID: info.ID}))); got != "after\n" {
		t.Fatalf("after the hammer: %q", got)
	}
}

// checkWhole checks one stream of TestHammerRouterAndLoopEndTheSameExecution.
func checkWhole(t *testing.T, x *Execution, outs []Output, allStdout string) {
	t.Helper()
	assertEnded(t, outs)
	for i, o := range outs {
		if o.Seq != uint64(i+1) {
			t.Errorf("output %d has seq %d", i, o.Seq)
			return
		}
		if o.Type == OutEndOfExecution && i != len(outs)-1 {
			t.Errorf("an end before the last output: %+v", outs)
			return
		}
	}
	if got := stdout(outs); !strings.HasPrefix(allStdout, got) {
		t.Errorf("stdout out of order: %q", got)
	}
	errs := errorsOf(outs)
	outcome := x.State().Outcome
	switch {
	case len(errs) > 1:
		t.Errorf("%d error lines: %+v", len(errs), errs)
	case len(errs) == 0 && outcome != OutcomeOK:
		t.Errorf("no error line, outcome %q", outcome)
	case len(errs) == 1 && errs[0].ErrName == errNameTimeout && outcome != OutcomeTimeout:
		t.Errorf("a timeout line, outcome %q", outcome)
	}
}

func TestExecutionTimeoutEndsTheStreamAndFreesTheContext(t *testing.T) {
	e, _ := newTestEngine(t, Config{ExecutionTimeout: time.Hour})
	a := execute(t, e, context.Background(), ExecRequest{Code: "block", Timeout: 20 * time.Millisecond})
	outs := collect(t, a)
	assertEnded(t, outs)
	if errs := errorsOf(outs); len(errs) != 1 || errs[0].ErrName != errNameTimeout {
		t.Fatalf("errors = %+v, want one %s", errs, errNameTimeout)
	}
	// The interrupt stopped the code, so the next execution runs on the same kernel.
	next := collect(t, execute(t, e, context.Background(), ExecRequest{Code: "print next"}))
	if stdout(next) != "next\n" || next[0].ExecutionCount != 2 {
		t.Fatalf("next = %+v", next)
	}
	t.Run("ignored by the code: the kernel is restarted", func(t *testing.T) {
		e, _ := newTestEngine(t, Config{ExecutionTimeout: 20 * time.Millisecond, InterruptGrace: 20 * time.Millisecond})
		outs := collect(t, execute(t, e, context.Background(), ExecRequest{Code: "ignoreint"}))
		if errs := errorsOf(outs); len(errs) != 1 || errs[0].ErrName != errNameTimeout {
			t.Fatalf("errors = %+v", errs)
		}
		next := collect(t, execute(t, e, context.Background(), ExecRequest{Code: "print next"}))
		if stdout(next) != "next\n" || next[0].ExecutionCount != 1 {
			t.Fatalf("after restart: %+v", next)
		}
	})
}

func TestMaxContexts(t *testing.T) {
	e, _ := newTestEngine(t, Config{MaxContexts: 2})
	ctx := context.Background()
	a, err := e.CreateContext(ctx, "python", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.CreateContext(ctx, "python", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := e.CreateContext(ctx, "python", ""); core.KindOf(err) != core.KindQueueFull {
		t.Fatalf("third context: %v, want KindQueueFull", err)
	}
	if _, err := e.CreateContext(ctx, "python", "/missing"); core.KindOf(err) != core.KindQueueFull {
		t.Fatalf("the limit applies before any kernel starts: %v", err)
	}
	if err := e.Delete(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.CreateContext(ctx, "python", "/missing/x"); core.KindOf(err) != core.KindInvalid {
		t.Fatalf("bad cwd: %v", err)
	}
	if _, err := e.CreateContext(ctx, "python", ""); err != nil {
		t.Fatalf("after a delete: %v", err)
	}
}

func TestOutputOfAGoneClientIsBoundedByTheReplayBuffer(t *testing.T) {
	const replay = 4096
	e, ft := newTestEngine(t, Config{DisconnectPolicy: DisconnectContinue, ReplayBytes: replay})
	client, leave := context.WithCancel(context.Background())
	a := execute(t, e, client, ExecRequest{Code: "block\nmany 1000"})
	k := ft.kernel(0)
	awaitStart(t, k, "block\nmany 1000")
	leave()
	// From when the engine has seen the client go, the 1,000 outputs still
	// to come are bounded by the replay buffer.
	awaitDetached(t, a)
	b := execute(t, e, context.Background(), ExecRequest{Code: "print b"})
	releaseBlock(t, k)
	collect(t, b) // A has finished on the kernel
	a.out.mu.Lock()
	kept := a.out.readBytes + a.out.unread
	a.out.mu.Unlock()
	if kept > replay {
		t.Fatalf("%d bytes kept for a client that left, more than the replay buffer's %d", kept, replay)
	}
	// What is kept is the newest: a client that re-attaches from the oldest
	// kept output gets the end of the run, and the end line.
	first, last, _ := a.out.state()
	s, err := a.Attach(first - 1)
	if err != nil {
		t.Fatal(err)
	}
	outs := collectStream(t, s)
	assertEnded(t, outs)
	if !strings.HasSuffix(stdout(outs), "998\n999\n") || outs[len(outs)-1].Seq != last {
		t.Fatalf("re-attached from %d: got %d outputs ending %+v, want the newest up to %d", first, len(outs), outs[len(outs)-1], last)
	}
}

// Config.KernelSetup's code runs on every new kernel of its language, as a
// silent request of its own, and again after a restart (a new interpreter),
// before the global env vars: a global of the same name wins.
func TestKernelSetupRunsOnStartAndRestart(t *testing.T) {
	var languages []string
	var mu sync.Mutex
	e, _ := newTestEngine(t, Config{
		KernelSetup: func(language string) KernelSetup {
			mu.Lock()
			languages = append(languages, language)
			mu.Unlock()
			return KernelSetup{Check: "__import__('os').environ.__setitem__('KH_SETUP', 'setup')\n__import__('os').environ.__setitem__('KH_BOTH', 'setup')"}
		},
		GlobalEnv: func(context.Context) (map[string]string, error) { return map[string]string{"KH_BOTH": "global"}, nil },
	})
	ctx := context.Background()
	info, err := e.CreateContext(ctx, "python", "/tmp")
	if err != nil {
		t.Fatal(err)
	}
	check := func(when string) {
		t.Helper()
		got := stdout(collect(t, execute(t, e, ctx, ExecRequest{Code: "getenv KH_SETUP\ngetenv KH_BOTH", ContextID: info.ID})))
		if want := "KH_SETUP=setupKH_BOTH=global"; got != want {
			t.Fatalf("%s: the kernel has %q, want %q", when, got, want)
		}
	}
	check("after start")
	if err := e.Restart(ctx, info.ID); err != nil {
		t.Fatal(err)
	}
	check("after restart")
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(languages, " ") != "python python" {
		t.Fatalf("KernelSetup called for %q, want python on start and on restart", languages)
	}
}

// A kernel setup that fails is the server's fault, not the cwd's: the
// context is not created, with an internal error that says so.
func TestKernelSetupFailureIsInternal(t *testing.T) {
	e, _ := newTestEngine(t, Config{KernelSetup: func(string) KernelSetup { return KernelSetup{Check: "not a snippet"} }})
	_, err := e.CreateContext(context.Background(), "python", "/tmp")
	if err == nil || core.KindOf(err) != core.KindInternal || !strings.Contains(err.Error(), "kernel setup") || strings.Contains(err.Error(), "working directory") {
		t.Fatalf("CreateContext: %v (kind %v), want an internal error naming the kernel setup", err, core.KindOf(err))
	}
}
