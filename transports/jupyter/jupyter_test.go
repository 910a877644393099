package jupyter

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kernelhost/kernelhost/core"
	"github.com/kernelhost/kernelhost/transports/jupyter/jupytertest"
)

// kernelCheck is a check that runs on a kernel that other checks used
// before it (TestOneKernel): it neither restarts, interrupts, kills nor
// shuts the kernel down, and its assertions hold on a kernel that ran other
// code. A check that changes the kernel's transport (the lose hook) undoes
// that in its cleanup.
type kernelCheck struct {
	name string
	run  func(t *testing.T, k core.Kernel)
}

// TestOneKernel runs the checks of a kernel's messages that need no kernel
// of their own on one kernel per websocket protocol, one after the other
// (each started a kernel of its own before, about a CPU-second in CI).
// jupyter-server 1.23 picks the binary v1 subprotocol when offered, so
// ProtocolJSON proves the JSON frames of older servers and ProtocolAuto the
// binary ones; the checks of the frames' contents run on both, the others
// on the default (v1) only. A check that fails leaves its kernel to no
// other: the next starts a kernel of its own.
func TestOneKernel(t *testing.T) {
	t.Parallel()
	srv := jupytertest.Shared(t)
	framing := []kernelCheck{
		{"StateStreamingAndReply", checkStateStreamingAndReply},
		{"MIMEBundles", checkMIMEBundles},
	}
	for _, tc := range []struct {
		name   string
		p      Protocol
		checks []kernelCheck
	}{
		{"json", ProtocolJSON, framing},
		{"v1", ProtocolAuto, append(framing,
			kernelCheck{"StartsWithoutDebuggerAndJedi", checkStartsWithoutDebuggerAndJedi},
			kernelCheck{"BufferedOutputComesBeforeTheResult", checkBufferedOutputComesBeforeTheResult},
			kernelCheck{"SilentRequestsAreNotCounted", checkSilentRequestsAreNotCounted},
			kernelCheck{"ErrorReply", checkErrorReply},
			kernelCheck{"UpdateDisplayData", checkUpdateDisplayData},
			kernelCheck{"CounterGapIsAnnounced", checkCounterGapIsAnnounced},
			kernelCheck{"LostIdleIsDetected", checkLostIdleIsDetected},
			kernelCheck{"TooLarge", checkTooLarge},
		)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tr := newTransport(t, srv, func(c *Config) { c.Protocol = tc.p })
			var k core.Kernel
			for _, c := range tc.checks {
				if k == nil {
					k = startKernel(t, tr) // shut down at the end of tc
				}
				if !t.Run(c.name, func(t *testing.T) { c.run(t, k) }) {
					k = nil
				}
			}
		})
	}
}

func TestInfo(t *testing.T) {
	t.Parallel()
	srv := jupytertest.Shared(t)
	tr := newTransport(t, srv, nil)
	info := tr.Info()
	if info.Name != "jupyter" || !strings.HasPrefix(info.Version, "jupyter-server ") {
		t.Errorf("info = %+v", info)
	}
	if !slices.Contains(info.Languages, "python") {
		t.Errorf("languages %v lack python", info.Languages)
	}
	// The test server's own spec (deploy/jupyter: unbounded IOPub queues) shadows the system's.
	if name := tr.specs.Kernelspecs["python3"].Spec.DisplayName; !strings.Contains(name, "unbounded IOPub") {
		t.Errorf("python3 kernel spec %q is not jupytertest's", name)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := tr.StartKernel(ctx, core.KernelSpec{Language: "cobol"})
	if err == nil || !strings.Contains(err.Error(), `"cobol"`) {
		t.Errorf("start cobol kernel: err = %v, want one that names the language", err)
	}
}

func TestWrongToken(t *testing.T) {
	t.Parallel()
	srv := jupytertest.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tr, err := New(ctx, Config{URL: srv.URL, Token: "wrong"})
	if err == nil {
		tr.Close()
		t.Fatal("New with a wrong token succeeded")
	}
	if !strings.Contains(err.Error(), "403") {
		t.Errorf("err = %v, want a 403", err)
	}
}

func checkStateStreamingAndReply(t *testing.T, k core.Kernel) {
	{
		run(t, k, "x = 41")
		r := run(t, k, "print('a'); import sys; print('b', file=sys.stderr, flush=True); x + 1")
		if got := r.stdout.String(); got != "a\n" {
			t.Errorf("stdout = %q", got)
		}
		if got := r.stderr.String(); got != "b\n" {
			t.Errorf("stderr = %q", got)
		}
		if r.reply.Status != core.ReplyOK {
			t.Errorf("reply = %+v", r.reply)
		}
		var types []core.MessageType
		for _, m := range r.msgs {
			if m.Timestamp == "" {
				t.Errorf("message without timestamp: %+v", m)
			}
			// The reply comes on the shell channel, which is not ordered
			// with IOPub: it may arrive before or after the output.
			if m.Type != core.MsgExecuteReply {
				types = append(types, m.Type)
			}
		}
		// IOPub order: busy, execute_input, output, idle.
		if types[0] != core.MsgStatus || types[1] != core.MsgExecuteInput || types[len(types)-1] != core.MsgStatus {
			t.Errorf("message order %v", types)
		}
		var res *core.Message
		for i := range r.msgs {
			if r.msgs[i].Type == core.MsgExecuteResult {
				res = &r.msgs[i]
			}
		}
		if res == nil || string(res.Data["text/plain"]) != `"42"` || res.ExecutionCount != r.reply.ExecutionCount {
			t.Errorf("execute_result = %+v, reply = %+v", res, r.reply)
		}
	}
}

// checkStartsWithoutDebuggerAndJedi: the kernel spec of deploy/jupyter
// starts ipykernel without debugpy and IPython without jedi, over a third
// of a kernel's start (launch.py), and a cell can still import both where
// they are installed.
func checkStartsWithoutDebuggerAndJedi(t *testing.T, k core.Kernel) {
	r := run(t, k, "import sys\nprint(sorted(m for m in ('debugpy', 'pydevd', 'jedi', 'parso') if m in sys.modules))")
	if got := r.stdout.String(); got != "[]\n" {
		t.Errorf("modules loaded at the kernel's start: stdout %q, stderr %q", got, r.stderr.String())
	}
	r = run(t, k, "import importlib, importlib.util\nfor m in ('debugpy', 'jedi'):\n    print(importlib.import_module(m).__name__ if importlib.util.find_spec(m) else m)")
	if got := r.stdout.String(); got != "debugpy\njedi\n" {
		t.Errorf("import debugpy and jedi in a cell: stdout %q, stderr %q", got, r.stderr.String())
	}
}

// checkBufferedOutputComesBeforeTheResult: output a cell leaves in
// ipykernel's buffers (no newline, no flush of its own) goes out before the
// cell's result and its idle, with flushes of nothing in between. The
// kernel spec of deploy/jupyter skips the round trip to the IOPub thread for
// a flush with nothing buffered (launch.py): this is the order that must
// survive it.
func checkBufferedOutputComesBeforeTheResult(t *testing.T, k core.Kernel) {
	const code = "import sys\nsys.stdout.flush(); sys.stderr.flush()\n" +
		"print('a', end=''); sys.stderr.write('e')\nsys.stdout.flush(); sys.stdout.flush()\n" +
		"print('b', end='')\n7 * 6"
	for i := range 20 {
		r := run(t, k, code)
		if got, got2 := r.stdout.String(), r.stderr.String(); got != "ab" || got2 != "e" {
			t.Fatalf("run %d: stdout %q, stderr %q; want \"ab\", \"e\"", i, got, got2)
		}
		result, idle := -1, -1
		for j, m := range r.msgs {
			switch {
			case m.Type == core.MsgExecuteResult:
				result = j
			case m.Type == core.MsgStatus && m.State == core.StateIdle:
				idle = j
			case m.Type == core.MsgStream && (result >= 0 || idle >= 0):
				t.Fatalf("run %d: stream output after the result or the idle: %+v", i, r.msgs)
			}
		}
		if result < 0 || idle < result || string(r.msgs[result].Data["text/plain"]) != `"42"` {
			t.Fatalf("run %d: result at %d, idle at %d: %+v", i, result, idle, r.msgs)
		}
	}
}

func checkSilentRequestsAreNotCounted(t *testing.T, k core.Kernel) {
	first := run(t, k, "1").reply.ExecutionCount
	id := "silent-" + t.Name()
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	if err := k.Execute(ctx, core.ExecuteRequest{MsgID: id, Code: "y = 5", Silent: true}); err != nil {
		t.Fatal(err)
	}
	collect(t, k, id)
	r := run(t, k, "y")
	if r.reply.ExecutionCount != first+1 {
		t.Errorf("execution count %d after a silent request, want %d", r.reply.ExecutionCount, first+1)
	}
}

func checkErrorReply(t *testing.T, k core.Kernel) {
	r := run(t, k, "1/0")
	if r.reply.Status != core.ReplyError || r.reply.EName != "ZeroDivisionError" {
		t.Errorf("reply = %+v", r.reply)
	}
	var sawError bool
	for _, m := range r.msgs {
		if m.Type == core.MsgError && m.EName == "ZeroDivisionError" && len(m.Traceback) > 0 {
			sawError = true
			// The kernel spec of deploy/jupyter sets NoColor, as upstream's
			// kernels do: a client shows the traceback as text.
			if tb := strings.Join(m.Traceback, "\n"); strings.Contains(tb, "\x1b[") {
				t.Errorf("the traceback has ANSI colour codes: %q", tb)
			}
		}
	}
	if !sawError {
		t.Errorf("no error message in %+v", r.msgs)
	}
	// stop_on_error is false: a request right behind a failing one runs.
	// b's first messages (IOPub) may come before a's reply (shell): the two
	// are collected together.
	a := send(t, k, "raise ValueError('boom')")
	b := send(t, k, "print('still here')")
	rs := collectEach(t, k, a, b)
	if r := rs[a]; r.reply.Status != core.ReplyError {
		t.Errorf("a: %+v", r.reply)
	}
	if r := rs[b]; r.reply.Status != core.ReplyOK || r.stdout.String() != "still here\n" {
		t.Errorf("b was aborted behind a failing request: %+v %q", r.reply, r.stdout.String())
	}
}

// collectEach reads messages until each request of ids has sent its
// execute_reply and its status idle; a message of no request among them
// fails the test.
func collectEach(tb testing.TB, k core.Kernel, ids ...string) map[string]*result {
	tb.Helper()
	rs, done := map[string]*result{}, map[string]int{}
	for _, id := range ids {
		rs[id] = &result{}
	}
	timeout := time.After(runTimeout)
	for len(done) < len(ids) || !allTwo(done) {
		select {
		case m, ok := <-k.Messages():
			if !ok {
				tb.Fatalf("messages closed while waiting for %v", ids)
			}
			r := rs[m.ParentID]
			if r == nil {
				tb.Fatalf("message for %q while waiting for %v: %+v", m.ParentID, ids, m)
			}
			r.msgs = append(r.msgs, m)
			switch {
			case m.Type == core.MsgStream && m.Name == "stdout":
				r.stdout.WriteString(m.Text)
			case m.Type == core.MsgExecuteReply:
				r.reply = m
				done[m.ParentID]++
			case m.Type == core.MsgStatus && m.State == core.StateIdle:
				done[m.ParentID]++
			}
		case <-timeout:
			tb.Fatalf("requests %v not finished after %v", ids, runTimeout)
		}
	}
	return rs
}

// allTwo says whether every request counted its reply and its idle.
func allTwo(done map[string]int) bool {
	for _, n := range done {
		if n < 2 {
			return false
		}
	}
	return true
}

func checkMIMEBundles(t *testing.T, k core.Kernel) {
	{
		// A 1×1 PNG, so the test needs no matplotlib.
		r := run(t, k, `
import base64
from IPython.display import HTML, Image, display
png = base64.b64decode('iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==')
display(HTML('<b>hi</b>'))
display(Image(data=png, format='png'))
display({'application/json': {'n': 12345678901234567890, 'f': 1.25, 'z': None}}, raw=True)
`)
		var data []map[string]json.RawMessage
		for _, m := range r.msgs {
			if m.Type == core.MsgDisplayData {
				data = append(data, m.Data)
			}
		}
		if len(data) != 3 {
			t.Fatalf("%d display_data messages, want 3: %+v", len(data), r.msgs)
		}
		if got := string(data[0]["text/html"]); got != `"<b>hi</b>"` {
			t.Errorf("html = %s", got)
		}
		if got := string(data[1]["image/png"]); !strings.HasPrefix(got, `"iVBORw0KGgo`) {
			t.Errorf("png = %s", got)
		}
		// Raw values: the big integer keeps every digit, null stays null.
		j := strings.ReplaceAll(string(data[2]["application/json"]), " ", "")
		if !strings.Contains(j, `"n":12345678901234567890`) || !strings.Contains(j, `"z":null`) || !strings.Contains(j, `"f":1.25`) {
			t.Errorf("application/json = %s", j)
		}
	}
}

func checkUpdateDisplayData(t *testing.T, k core.Kernel) {
	r := run(t, k, "from IPython.display import display\nh = display('one', display_id=True)\nh.update('two')")
	var got []string
	for _, m := range r.msgs {
		if m.Type == core.MsgDisplayData || m.Type == core.MsgUpdateDisplayData {
			got = append(got, string(m.Type)+":"+string(m.Data["text/plain"]))
		}
	}
	want := []string{`display_data:"'one'"`, `update_display_data:"'two'"`}
	if !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

// testInterruptOf interrupts a cell of k that sleeps: it ends with
// KeyboardInterrupt, and k runs the next cell. TestInterruptOfAnIdleKernel-
// SendsNothing runs it on the shared server (through a proxy that counts the
// interrupt requests), TestShippedKernelSpecIsSandboxed on the shipped
// spec's sandbox.
func testInterruptOf(t *testing.T, k core.Kernel) {
	t.Helper()
	id := send(t, k, "import time\nprint('sleeping', flush=True)\ntime.sleep(60)")
	waitStream(t, k, id, "sleeping")
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := k.Interrupt(ctx); err != nil {
		t.Fatal(err)
	}
	r := collect(t, k, id)
	if r.reply.Status != core.ReplyError || r.reply.EName != "KeyboardInterrupt" {
		t.Errorf("reply = %+v", r.reply)
	}
	if d := time.Since(start); d > 30*time.Second { // the cell sleeps 60 s
		t.Errorf("interrupt took %v", d)
	}
	if r := run(t, k, "print('next')"); r.stdout.String() != "next\n" {
		t.Errorf("after interrupt: %q", r.stdout.String())
	}
}

func TestRestart(t *testing.T) {
	t.Parallel()
	srv := jupytertest.Shared(t)
	k := startKernel(t, newTransport(t, srv, nil))
	run(t, k, "x = 1")
	id := send(t, k, "import time\nprint('sleeping', flush=True)\ntime.sleep(60)")
	waitStream(t, k, id, "sleeping")
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	if err := k.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	// The restarting status came before Restart returned, and nothing of
	// the sleeping request follows it.
	waitKernelWide(t, k, core.StateRestarting, time.Second)
	r := run(t, k, "print('x' in globals())")
	if got := r.stdout.String(); got != "False\n" {
		t.Errorf("state survived the restart: %q", got)
	}
	// Twice, to catch a late restarting status from the server.
	if r := run(t, k, "print(2)"); r.stdout.String() != "2\n" {
		t.Errorf("after restart: %q", r.stdout.String())
	}
}

func TestKernelDeathAutoRestarts(t *testing.T) {
	t.Parallel()
	srv := jupytertest.Shared(t)
	k := startKernel(t, newTransport(t, srv, nil))
	run(t, k, "x = 1")
	send(t, k, "import os; os._exit(1)")
	// The server's restarter notices within a few seconds and restarts it:
	// the kernel reports that it died, then that it was replaced.
	waitKernelWide(t, k, core.StateDead, 30*time.Second)
	waitKernelWide(t, k, core.StateRestarting, time.Second)
	r := run(t, k, "print('x' in globals())")
	if got := r.stdout.String(); got != "False\n" {
		t.Errorf("after death: %q", got)
	}
}

// A kernel that dies natively (a segfault) mid-execution is reported within
// a second: the test servers' restarter polls the kernel process four times
// a second (jupytertest.Args), then the server reports restarting.
func TestKernelSegfaultReportedWithinASecond(t *testing.T) {
	srv := jupytertest.Shared(t)
	k := startKernel(t, newTransport(t, srv, nil))
	run(t, k, "x = 1")
	id := send(t, k, "import os, time; print('dying', flush=True); time.sleep(0.1); os.kill(os.getpid(), 11)")
	waitStream(t, k, id, "dying")
	began := time.Now()
	waitKernelWide(t, k, core.StateDead, 30*time.Second)
	took := time.Since(began)
	t.Logf("FIGURE segfault reported after %v", took)
	// 100 ms of the sleep, at most 250 ms to the restarter's next poll:
	// about a second, and ten for CI's load (the server's own dead-kernel
	// check, which would report it otherwise, comes after 30 s).
	if took > 10*time.Second {
		t.Errorf("the death was reported after %v, want within a second or so", took)
	}
	waitKernelWide(t, k, core.StateRestarting, time.Second)
	if r := run(t, k, "print('x' in globals())"); r.stdout.String() != "False\n" {
		t.Errorf("after death: %q", r.stdout.String())
	}
}

func checkTooLarge(t *testing.T, k core.Kernel) {
	code := "x = '" + strings.Repeat("a", 11<<20) + "'"
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	err := k.Execute(ctx, core.ExecuteRequest{MsgID: "big", Code: code})
	var ce *core.Error
	if !errors.As(err, &ce) || ce.Kind != core.KindTooLarge {
		t.Fatalf("err = %v, want a core.KindTooLarge error", err)
	}
	// Just below the limit still works, and the connection is intact.
	code = "x = '" + strings.Repeat("a", 9<<20) + "'; print(len(x))"
	if r := run(t, k, code); r.stdout.String() != "9437184\n" {
		t.Errorf("9 MiB request: %q %+v", r.stdout.String(), r.reply)
	}
}

// A large request to a server that reads it slowly (stopped here, for
// longer than the connection may be silent: PingInterval+PongTimeout)
// keeps the connection: the server's silence counts from when it has had
// time to read and parse the request (serverReadRate), and the pings that
// waited behind it go on. (In CI a loaded server took that long to read
// TestOneKernel/v1/TooLarge's 9 MiB, and ~30 s after the write to answer.)
func TestLargeRequestToAStalledServer(t *testing.T) {
	t.Parallel()
	srv := jupytertest.Start(t)
	k := startKernel(t, newTransport(t, srv, func(c *Config) { c.PingInterval, c.PongTimeout = 10*time.Second, 10*time.Second }))
	if r := run(t, k, "1+1"); r.reply.Status != "ok" {
		t.Fatalf("1+1: %+v", r.reply)
	}
	if err := syscall.Kill(srv.Pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// Stopped past the 20 s allowance; once it runs again, a loaded server
	// took ~30 s in CI to read the rest and answer.
	resume := time.AfterFunc(25*time.Second, func() { _ = syscall.Kill(srv.Pid, syscall.SIGCONT) })
	t.Cleanup(func() {
		resume.Stop()
		_ = syscall.Kill(srv.Pid, syscall.SIGCONT)
	})
	code := "x = '" + strings.Repeat("a", 9<<20) + "'; print(len(x))"
	if r := run(t, k, code); r.stdout.String() != "9437184\n" {
		t.Errorf("9 MiB request: %q %+v", r.stdout.String(), r.reply)
	}
}

// Not in parallel: its bound is a throughput, and a neighbour's output
// through the same server (or CPU) slowed it past the bound.
func TestManyLinesArrive(t *testing.T) {
	srv := jupytertest.Shared(t)
	k := startKernel(t, newTransport(t, srv, nil))
	start := time.Now()
	// ipykernel's flush waits for its IOPub thread, about 1 ms a line (more
	// on a loaded machine): this takes ~20 s of the kernel's own time.
	id := send(t, k, "for i in range(20000):\n    print(i, flush=True)")
	r := collectWithin(t, k, id, 5*time.Minute)
	t.Logf("20,000 flushed lines in %v", time.Since(start))
	lines := strings.Split(strings.TrimSuffix(r.stdout.String(), "\n"), "\n")
	if len(lines) != 20000 || lines[0] != "0" || lines[19999] != "19999" {
		// The rate limits are off, so a loss here happened in ZeroMQ's
		// queues between kernel and server: the server fell behind.
		t.Fatalf("got %d lines (first %q, last %q), want 20000", len(lines), lines[0], lines[len(lines)-1])
	}
}

// A server that does drop output (its rate limit on) must say so clearly.
// 5,000 lines go out far above the limit of 100 a second even on a loaded
// machine, so it runs beside the parallel tests, waiting for the lines as
// long as TestManyLinesArrive does.
func TestDroppedOutputIsReported(t *testing.T) {
	t.Parallel()
	srv := jupytertest.Start(t, "--ServerApp.limit_rate=True", "--ServerApp.iopub_msg_rate_limit=100", "--ServerApp.rate_limit_window=1.0")
	k := startKernel(t, newTransport(t, srv, nil))
	r := collectWithin(t, k, send(t, k, "for i in range(5000):\n    print(i, flush=True)"), 5*time.Minute)
	if !strings.Contains(r.stderr.String(), "kernelhost: the Jupyter server dropped output") {
		t.Errorf("no dropped-output line; stderr = %q", r.stderr.String())
	}
}

func TestShutdownClosesMessages(t *testing.T) {
	t.Parallel()
	srv := jupytertest.Shared(t)
	tr := newTransport(t, srv, nil)
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	k, err := tr.StartKernel(ctx, core.KernelSpec{Language: "python"})
	if err != nil {
		t.Fatal(err)
	}
	if err := k.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if err := k.Shutdown(ctx); err != nil {
		t.Fatalf("second shutdown: %v", err)
	}
	for range k.Messages() {
	}
	if err := k.Execute(ctx, core.ExecuteRequest{MsgID: "late", Code: "1"}); err == nil {
		t.Error("execute after shutdown succeeded")
	}
}

// A lost idle (a full ZeroMQ queue drops messages silently) must not leave
// the request unfinished: the idle probe notices, and the client is told.
func checkLostIdleIsDetected(t *testing.T, k core.Kernel) {
	lossy := "lossy-" + t.Name()
	lose := func(m core.Message) bool {
		return m.ParentID == lossy && m.Type == core.MsgStatus && m.State == core.StateIdle
	}
	k.(*kernel).lose.Store(&lose)
	t.Cleanup(func() { k.(*kernel).lose.Store(nil) })
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	if err := k.Execute(ctx, core.ExecuteRequest{MsgID: lossy, Code: "print('hi')"}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	r := collect(t, k, lossy)
	if r.stdout.String() != "hi\n" || r.reply.Status != core.ReplyOK {
		t.Errorf("stdout %q, reply %+v", r.stdout.String(), r.reply)
	}
	if !strings.Contains(r.stderr.String(), "kernelhost: messages of this execution were lost") {
		t.Errorf("no lost-messages line; stderr = %q", r.stderr.String())
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("took %v to notice the lost idle", d)
	}
	// The next request is unaffected (its own probe traffic is dropped).
	if r := run(t, k, "print('next')"); r.stdout.String() != "next\n" || r.stderr.String() != "" {
		t.Errorf("next: stdout %q stderr %q", r.stdout.String(), r.stderr.String())
	}
}
