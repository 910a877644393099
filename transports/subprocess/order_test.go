package subprocess

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kernelhost/kernelhost/core"
	"github.com/kernelhost/kernelhost/internal/testkit"
	tt "github.com/kernelhost/kernelhost/transports/transporttest"
)

// trace renders an execution's outputs in arrival order, one item a line:
// "stdout:x" and "stderr:x" per line of stream text (merged chunks split
// again), "display:<text/plain>" and "result:<text/plain>".
func trace(e *tt.Execution) string {
	var b strings.Builder
	for _, m := range e.Msgs {
		switch m.Type {
		case core.MsgStream:
			for _, line := range strings.SplitAfter(m.Text, "\n") {
				if line != "" {
					fmt.Fprintf(&b, "%s:%s", m.Name, line)
				}
			}
		case core.MsgDisplayData:
			fmt.Fprintf(&b, "display:%s\n", tt.TextPlain(m.Message))
		case core.MsgExecuteResult:
			fmt.Fprintf(&b, "result:%s\n", tt.TextPlain(m.Message))
		}
	}
	return b.String()
}

// firstDiff shows where got leaves want, for a readable failure.
func firstDiff(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := range min(len(g), len(w)) {
		if g[i] != w[i] {
			return fmt.Sprintf("line %d: got %q, want %q", i+1, g[i], w[i])
		}
	}
	return fmt.Sprintf("got %d lines, want %d", len(g), len(w))
}

func checkTrace(t *testing.T, e *tt.Execution, want string) {
	t.Helper()
	if got := trace(e); got != want {
		t.Fatalf("outputs out of order: %s", firstDiff(got, want))
	}
	if r := e.Reply(); r.Status != core.ReplyOK {
		t.Fatalf("reply %+v", r)
	}
}

// print to stdout and to stderr, alternating without pause, arrives in the
// order it was printed (two pipes read by two goroutines would not keep it).
func TestPythonStdoutStderrInterleaved(t *testing.T) {
	t.Parallel()
	k := startKernel(t, "python", t.TempDir())
	var want strings.Builder
	for i := range 200 {
		fmt.Fprintf(&want, "stdout:o%d\nstderr:e%d\n", i, i)
	}
	for range 3 {
		e := tt.Exec(t, k, "import sys\nfor i in range(200):\n    print('o%d' % i)\n    print('e%d' % i, file=sys.stderr)", false)
		checkTrace(t, e, want.String())
	}
}

// The hostcmd streaming-order case, many times over: stdout, then stderr,
// then the result.
func TestPythonPrintThenStderrThenResult(t *testing.T) {
	t.Parallel()
	k := startKernel(t, "python", t.TempDir())
	for range 50 {
		e := tt.Exec(t, k, "print('a'); import sys; print('b', file=sys.stderr); 1+1", false)
		checkTrace(t, e, "stdout:a\nstderr:b\nresult:2\n")
	}
}

// Output of a child process written to fd 1 or 2 comes after the prints
// before it and before the prints after it, stdout against stderr included.
func TestPythonChildOutputBetweenPrints(t *testing.T) {
	t.Parallel()
	k := startKernel(t, "python", t.TempDir())
	code := `import os, sys, subprocess
for i in range(50):
    os.system('echo c%d' % i)
    print('p%d' % i)
    os.system('echo E%d >&2' % i)
    print('q%d' % i)
    subprocess.run(['echo', 's%d' % i])
    print('r%d' % i, file=sys.stderr)`
	var want strings.Builder
	for i := range 50 {
		fmt.Fprintf(&want, "stdout:c%d\nstdout:p%d\nstderr:E%d\nstdout:q%d\nstdout:s%d\nstderr:r%d\n", i, i, i, i, i, i)
	}
	checkTrace(t, tt.Exec(t, k, code, false), want.String())
}

// display() and the result keep their place between prints.
func TestPythonDisplayBetweenPrints(t *testing.T) {
	t.Parallel()
	k := startKernel(t, "python", t.TempDir())
	var want strings.Builder
	for i := range 100 {
		fmt.Fprintf(&want, "stdout:a%d\ndisplay:%d\nstderr:b%d\n", i, i, i)
	}
	want.WriteString("stdout:end\nresult:'done'\n")
	e := tt.Exec(t, k, "import sys\nfor i in range(100):\n    print('a%d' % i)\n    display(i)\n    print('b%d' % i, file=sys.stderr)\nprint('end')\n'done'", false)
	checkTrace(t, e, want.String())
}

// A print longer than a pipe's atomic write, interrupted over and over,
// never leaves half a message: no "bad driver message", and the kernel goes
// on.
func TestPythonInterruptLongPrint(t *testing.T) {
	t.Parallel()
	k := startKernel(t, "python", t.TempDir())
	for range 5 {
		e := tt.Send(t, k, "print('start')\nwhile True:\n    print('x' * 100000)", false)
		tt.Collect(t, k, e, tt.ExecTimeout, func(tt.Received) bool { return strings.Contains(e.Stream("stdout"), "xxx") })
		if err := k.Interrupt(context.Background()); err != nil {
			t.Fatal(err)
		}
		tt.Collect(t, k, e, tt.InterruptTimeout, nil)
		if r := e.Reply(); r.EName != "KeyboardInterrupt" {
			t.Fatalf("reply %+v, want KeyboardInterrupt", r)
		}
		if s := e.Stream("stderr"); strings.Contains(s, "bad driver message") {
			t.Fatalf("stderr: %.300s", s)
		}
		if strings.Trim(e.Stream("stdout"), "startx\n") != "" {
			t.Fatalf("stdout holds more than the prints")
		}
	}
	if got := tt.Exec(t, k, "print('ok')", false).Stream("stdout"); got != "ok\n" {
		t.Fatalf("after the interrupts stdout = %q", got)
	}
}

// console.log, console.error and process.stdout/stderr.write keep their
// order, stdout against stderr included.
func TestNodeStreamsInOrder(t *testing.T) {
	t.Parallel()
	testkit.NeedCommand(t, "node", "nodejs")
	k := startKernel(t, "javascript", t.TempDir())
	var want strings.Builder
	for i := range 100 {
		fmt.Fprintf(&want, "stdout:o%d\nstderr:e%d\nstdout:w%d\nstderr:x%d\n", i, i, i, i)
	}
	code := "for (let i = 0; i < 100; i++) { console.log('o' + i); console.error('e' + i); process.stdout.write('w' + i + '\\n'); process.stderr.write('x' + i + '\\n') }; void 0"
	for range 3 {
		checkTrace(t, tt.Exec(t, k, code, false), want.String())
	}
	// A child's output comes before node's next write. (The other way
	// round is ordered by the host's reads only: see the package doc.)
	// One child per cell: node has no hook to order a child after an
	// earlier write, nor one child's stdout after another's stderr.
	for range 20 {
		code = "require('child_process').execSync('echo c', {stdio: 'inherit'}); console.error('p')"
		checkTrace(t, tt.Exec(t, k, code, false), "stdout:c\nstderr:p\n")
		code = "require('child_process').execSync('echo d >&2', {stdio: 'inherit'}); console.log('q')"
		checkTrace(t, tt.Exec(t, k, code, false), "stderr:d\nstdout:q\n")
	}
}

// An interrupt sent right after the request, whatever phase the request is
// in when it lands (not read yet, compiling, running, awaiting), ends it.
func TestNodeInterruptAnyPhase(t *testing.T) {
	t.Parallel()
	testkit.NeedCommand(t, "node", "nodejs")
	k := startKernel(t, "javascript", t.TempDir())
	for range 20 {
		e := tt.Send(t, k, "await new Promise(r => setTimeout(r, 60000))", false)
		if err := k.Interrupt(context.Background()); err != nil {
			t.Fatal(err)
		}
		tt.Collect(t, k, e, tt.InterruptTimeout, nil)
		if r := e.Reply(); r.Status != core.ReplyError {
			t.Fatalf("reply %+v, want an error", r)
		}
	}
	if e := tt.Exec(t, k, "1+1", false); e.Reply().Status != core.ReplyOK {
		t.Fatalf("after the interrupts:%s", e)
	}
}

// writeSigintRecord writes on k's fd 3 what the host writes after a SIGINT
// it sent for request id.
func writeSigintRecord(k *Kernel, id string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	_ = procSignaller{k, k.p}.send(context.Background(), k.lang.drv.(sigintRecorder).sigintRecord(id))
}

// A SIGINT that lands as one of node's breakOnSigint runs ends is kept by
// node's watchdog and terminates the next run, which can be the next
// request's (node's own race, see drainSigint in driver.js). Here the cell
// sends itself the signal at the end of its run, where an interrupt's late
// SIGINT lands, and the test writes the record the host writes after each
// SIGINT it sends; the next request must run untouched. (Without the
// record, the first such request was terminated.)
func TestNodeSigintDoesNotReachTheNextRequest(t *testing.T) {
	t.Parallel()
	testkit.NeedCommand(t, "node", "nodejs")
	k := startKernel(t, "javascript", t.TempDir())
	for range 20 {
		e := tt.Exec(t, k, "process.kill(process.pid, 'SIGINT'); 1", false)
		writeSigintRecord(k, e.MsgID)
		// Busy long enough for the watchdog's thread to wake: a stale
		// signal outlasts shorter runs and stops the first longer one.
		next := tt.Exec(t, k, "{ const end = Date.now() + 10; while (Date.now() < end); } 1+1", false)
		if next.Reply().Status != core.ReplyOK {
			t.Fatalf("the request after a SIGINT was stopped by it:%s%s", e, next)
		}
	}
}

// An interrupted python cell's SIGINT never reaches the cell after it: the
// driver's output thread resends a SIGINT it saw in the wakeup pipe and the
// handler has not run for, and a thread switch inside the handler once made
// a handled one look lost, so that the resend interrupted the next cell
// (CI: TestExecutionTimeoutHostDefault). Each next cell runs long enough for
// the output thread's checks (every flush, ~2 ms) to run several times.
func TestPythonSigintDoesNotReachTheNextCell(t *testing.T) {
	t.Parallel()
	k := startKernel(t, "python", t.TempDir())
	for range 30 {
		e := tt.Send(t, k, "print('start', flush=True)\nwhile True: pass", false)
		tt.Collect(t, k, e, tt.ExecTimeout, func(tt.Received) bool { return e.Stream("stdout") == "start\n" })
		if err := k.Interrupt(context.Background()); err != nil {
			t.Fatal(err)
		}
		tt.Collect(t, k, e, tt.InterruptTimeout, nil)
		if r := e.Reply(); r.Status != core.ReplyError {
			t.Fatalf("the interrupted cell did not fail:%s", e)
		}
		next := tt.Exec(t, k, "import time\nend = time.monotonic() + 0.02\nwhile time.monotonic() < end: pass\n1+1", false)
		if next.Reply().Status != core.ReplyOK {
			t.Fatalf("the cell after an interrupt was stopped by it:%s%s", e, next)
		}
	}
}

// printedWhileRunning sends code, which prints "start" and then waits far
// longer than any test would, and checks that the line reaches the host
// while the cell still runs: the drivers coalesce writes, and must still
// send a lone print within milliseconds, not when the cell ends. The wait
// for the line is bounded by ExecTimeout, which is shorter than the cell.
func printedWhileRunning(t *testing.T, k *Kernel, code string) {
	t.Helper()
	writtenWhileRunning(t, k, "stdout", code)
}

// writtenWhileRunning is printedWhileRunning for the line "start" on stream.
func writtenWhileRunning(t *testing.T, k *Kernel, stream, code string) {
	t.Helper()
	e := tt.Send(t, k, code, false)
	tt.Collect(t, k, e, tt.ExecTimeout, func(tt.Received) bool { return e.Stream(stream) == "start\n" })
	if r := e.Reply(); r.Type != "" {
		t.Fatalf("the cell ended (%+v) before its %s line arrived:%s", r, stream, e)
	}
	if err := k.Interrupt(context.Background()); err != nil {
		t.Fatal(err)
	}
	tt.Collect(t, k, e, tt.InterruptTimeout, nil)
}

// A print followed by a long sleep arrives long before the sleep ends, the
// first print of a context (whose flusher thread starts then) and a later one.
func TestPythonPrintArrivesDuringSleep(t *testing.T) {
	t.Parallel()
	k := startKernel(t, "python", t.TempDir())
	for range 2 {
		printedWhileRunning(t, k, "import time\nprint('start')\ntime.sleep(120)")
	}
}

// The output thread outlives idleness: a cell that comes after a pause
// finds the thread the last cell had (a new one's start would be in its
// time), and its print arrives while it runs.
func TestPythonOutputThreadOutlivesAPause(t *testing.T) {
	t.Parallel()
	k := startKernel(t, "python", t.TempDir())
	const outputThread = "import threading\nprint([t.native_id for t in threading.enumerate() if t.name == 'kernelhost-output'])"
	before := stdoutOf(t, k, outputThread)
	time.Sleep(2500 * time.Millisecond) // the pause is the test: longer than the 1-2 s after which the thread used to end
	if after := stdoutOf(t, k, outputThread); after != before || strings.Count(before, ",") != 0 || before == "[]\n" {
		t.Errorf("the output thread before a pause %q, after it %q: want one, the same", before, after)
	}
	printedWhileRunning(t, k, "import time\nprint('start')\ntime.sleep(120)")
}

// So does a write to stderr (queued apart from stdout's buffer, see driver.py).
func TestPythonStderrArrivesDuringSleep(t *testing.T) {
	t.Parallel()
	k := startKernel(t, "python", t.TempDir())
	writtenWhileRunning(t, k, "stderr", "import sys, time\nsys.stderr.write('start\\n')\ntime.sleep(120)")
}

// stderr text that does not end a line is held for the "\n" a print
// writes after it, but not for long: it arrives while the cell sleeps, and
// before a print written after it.
func TestPythonHeldStderrArrivesDuringSleepBeforeLaterPrints(t *testing.T) {
	t.Parallel()
	k := startKernel(t, "python", t.TempDir())
	e := tt.Send(t, k, "import sys, time\nsys.stderr.write('held')\nprint('after')\ntime.sleep(120)", false)
	tt.Collect(t, k, e, tt.ExecTimeout, func(tt.Received) bool { return e.Stream("stdout") == "after\n" })
	if got, want := trace(e), "stderr:heldstdout:after\n"; got != want {
		t.Fatalf("outputs while the cell runs: got %q, want %q", got, want)
	}
	if err := k.Interrupt(context.Background()); err != nil {
		t.Fatal(err)
	}
	tt.Collect(t, k, e, tt.InterruptTimeout, nil)
}

// A print that comes after the cell has run for a while, past the
// driver's first flush (its timer fired with nothing to send), arrives too:
// the timer is armed again while the cell runs.
func TestPythonLatePrintArrivesDuringSleep(t *testing.T) {
	t.Parallel()
	k := startKernel(t, "python", t.TempDir())
	printedWhileRunning(t, k, "import time\nend = time.monotonic() + 0.05\nwhile time.monotonic() < end: pass\nprint('start')\ntime.sleep(120)")
}

// A cell that ends sooner than the flush delay (1+1) does not wake the
// driver's output thread: its start arms a timer that its end disarms.
// The thread still wakes about once a second to see whether to end, and a
// 1+1 preempted on a loaded machine may outlast the delay: so the bound is
// one switch per five cells, where a wake per cell makes one or two per
// cell.
func TestPythonShortCellsDoNotWakeTheOutputThread(t *testing.T) {
	t.Parallel()
	k := startKernel(t, "python", t.TempDir())
	tt.Exec(t, k, "1+1", false)
	const cells = 300
	before := otherThreadSwitches(t, k.Pid())
	for range cells {
		if e := tt.Exec(t, k, "1+1", false); e.Reply().Status != core.ReplyOK {
			t.Fatalf("1+1:%s", e)
		}
	}
	after := otherThreadSwitches(t, k.Pid())
	woke := 0
	for tid, n := range after {
		woke += n - before[tid]
	}
	if woke > cells/5 {
		t.Fatalf("the interpreter's other threads switched %d times in %d cells of 1+1 (threads before %v, after %v)", woke, cells, before, after)
	}
}

// otherThreadSwitches gives the context switches of each thread of pid
// but its main thread, by thread id.
func otherThreadSwitches(t *testing.T, pid int) map[string]int {
	t.Helper()
	dir := filepath.Join("/proc", strconv.Itoa(pid), "task")
	tasks, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, task := range tasks {
		if task.Name() == strconv.Itoa(pid) {
			continue
		}
		status, err := os.ReadFile(filepath.Join(dir, task.Name(), "status"))
		if err != nil {
			continue // ended meanwhile
		}
		for _, line := range strings.Split(string(status), "\n") {
			if name, value, ok := strings.Cut(line, ":"); ok && strings.HasSuffix(name, "ctxt_switches") {
				n, _ := strconv.Atoi(strings.TrimSpace(value))
				out[task.Name()] += n
			}
		}
	}
	return out
}

// Each context made by a fork has an output thread and a timer of its own:
// a print during a sleep arrives in a context forked from the template,
// and in a copy of a live context whose thread had flushed (copied while
// its timer was open).
func TestForkedPythonPrintArrivesDuringSleep(t *testing.T) {
	t.Parallel()
	forEachForkMode(t, func(t *testing.T, mode forkMode) {
		tr, dir := forkTransport(t, mode, []string{"json"}, nil)
		tmpl := readyTemplate(t, tr)
		k := startIn(t, tr, "python", dir)
		mustBeForkedFrom(t, k, tmpl)
		if mode.sandbox != SandboxOff {
			printedWhileRunning(t, k, "import time\nprint('start')\ntime.sleep(120)")
			return // no live fork of a sandboxed context
		}
		if got := tt.Exec(t, k, "import time\nprint('a')\ntime.sleep(0.05)\nprint('b')", false).Stream("stdout"); got != "a\nb\n" {
			t.Fatalf("got %q", got)
		}
		fk := liveFork(t, tr, k)
		if got := tt.Exec(t, fk, "print(1)", false).Stream("stdout"); got != "1\n" {
			t.Fatalf("fork: %q", got)
		}
		printedWhileRunning(t, fk, "import time\nprint('start')\ntime.sleep(120)")
	})
}

// A pooled interpreter's print arrives during a sleep too.
func TestPooledPythonPrintArrivesDuringSleep(t *testing.T) {
	t.Parallel()
	tr, dir := pooledTransport(t, "python")
	pooled := readyPid(t, tr, "python")
	ctx, cancel := context.WithTimeout(context.Background(), tt.StartTimeout)
	defer cancel()
	k, err := tr.StartKernel(ctx, core.KernelSpec{Language: "python", Cwd: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { k.Shutdown(context.Background()) })
	if pid := k.(*Kernel).Pid(); pid != pooled {
		t.Fatalf("kernel runs pid %d, not the pooled %d", pid, pooled)
	}
	printedWhileRunning(t, k.(*Kernel), "import time\nprint('start')\ntime.sleep(120)")
}

// A console.log followed by a long wait arrives long before the wait ends,
// whether the cell awaits or computes without yielding.
func TestNodeLogArrivesDuringWait(t *testing.T) {
	t.Parallel()
	testkit.NeedCommand(t, "node", "nodejs")
	k := startKernel(t, "javascript", t.TempDir())
	printedWhileRunning(t, k, "console.log('start'); await new Promise(r => setTimeout(r, 120000))")
	printedWhileRunning(t, k, "process.stdout.write('start\\n'); const end = Date.now() + 120000; while (Date.now() < end) {}")
}
