package subprocess

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/kernelhost/kernelhost/core"
	"github.com/kernelhost/kernelhost/internal/testkit"
	tt "github.com/kernelhost/kernelhost/transports/transporttest"
)

// Contexts forked ahead of need (pool.go with a fork server): the
// guarantees of a fork made when asked for are the fork tests' ready
// modes (forEachReadyMode); these are the pool's own.

// forEachReadyOnly runs test in each of forkModes with a pool of ready
// forks.
func forEachReadyOnly(t *testing.T, test func(t *testing.T, mode forkMode)) {
	for _, sandbox := range forkModes {
		mode := forkMode{sandbox: sandbox, ready: true}
		t.Run(mode.String(), func(t *testing.T) {
			if sandbox != SandboxOff {
				needSandbox(t)
			}
			test(t, mode)
		})
	}
}

// A ready context that dies while it waits is dropped and replaced by
// another fork of the template, which a kernel then gets.
func TestReadyContextKilledWhileIdleIsReplaced(t *testing.T) {
	t.Parallel()
	forEachReadyOnly(t, func(t *testing.T, mode forkMode) {
		tr, dir := forkTransport(t, mode, []string{"wave"}, nil)
		tmpl := readyTemplate(t, tr)
		before := awaitReadyForks(t, tr)
		if err := syscall.Kill(before[0], syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		testkit.AwaitGone(t, "the killed ready context", tt.StartTimeout, before[0])
		// Until the pool saw the death, the dead one may still be
		// counted: its replacement is a pid not seen before.
		deadline := time.Now().Add(tt.StartTimeout)
		for slices.Contains(awaitReadyForks(t, tr), before[0]) {
			if time.Now().After(deadline) {
				t.Fatalf("the killed ready context (pid %d) is still counted ready after %v", before[0], tt.StartTimeout)
			}
			time.Sleep(10 * time.Millisecond) // the pool's watcher is not awaitable from here
		}
		k := startForked(t, tr, mode, dir)
		mustBeForkedFrom(t, k, tmpl)
		if got := stdoutOf(t, k, "import sys\nprint('wave' in sys.modules, 1+1)"); got != "True 2\n" {
			t.Errorf("the replacement prints %q", got)
		}
	})
}

// More contexts at once than the pool holds: those past the pool are
// forked when asked for, not started cold; every one has the preloaded
// module.
func TestReadyPoolDrainedByABurstForks(t *testing.T) {
	t.Parallel()
	forEachReadyOnly(t, func(t *testing.T, mode forkMode) {
		tr, dir := forkTransport(t, mode, []string{"wave"}, nil)
		tmpl := readyTemplate(t, tr)
		ready := awaitReadyForks(t, tr)
		ks := make([]*Kernel, readySize+3)
		if err := testkit.Concurrently(len(ks), func(i int) error {
			ctx, cancel := context.WithTimeout(context.Background(), tt.StartTimeout)
			defer cancel()
			k, err := tr.StartKernel(ctx, core.KernelSpec{Language: "python", Cwd: dir})
			if err == nil {
				ks[i] = k.(*Kernel)
			}
			return err
		}); err != nil {
			t.Fatal(err)
		}
		fromPool := 0
		for _, k := range ks {
			t.Cleanup(func() { k.Shutdown(context.Background()) })
			mustBeForkedFrom(t, k, tmpl)
			if slices.Contains(ready, k.Pid()) {
				fromPool++
			}
			if got := stdoutOf(t, k, "import sys\nprint('wave' in sys.modules)"); got != "True\n" {
				t.Errorf("kernel %d prints %q: not forked from the template", k.Pid(), got)
			}
		}
		if fromPool != readySize {
			t.Errorf("%d of %d kernels came from the pool of %d ready forks", fromPool, len(ks), readySize)
		}
	})
}

// While a kernel waits for an interpreter, the pool's refill waits too
// (pool.awaitQuiet): the contexts of a burst past the pool are forked
// first, the ready ones after, so each ready context's pid is above every
// pid of the burst (pids grow; a wrap of pid_max within the test aside).
func TestReadyPoolRefillsAfterTheBurst(t *testing.T) {
	t.Parallel()
	forEachReadyOnly(t, func(t *testing.T, mode forkMode) {
		tr, dir := forkTransport(t, mode, []string{"wave"}, nil)
		readyTemplate(t, tr)
		awaitReadyForks(t, tr)
		// A kernel that waits throughout: the burst's own kernels could
		// all have returned before the last of them asked.
		done := tr.pools["python"].ask()
		ks := make([]*Kernel, readySize+3)
		if err := testkit.Concurrently(len(ks), func(i int) error {
			ctx, cancel := context.WithTimeout(context.Background(), tt.StartTimeout)
			defer cancel()
			k, err := tr.StartKernel(ctx, core.KernelSpec{Language: "python", Cwd: dir})
			if err == nil {
				ks[i] = k.(*Kernel)
				t.Cleanup(func() { k.Shutdown(context.Background()) })
			}
			return err
		}); err != nil {
			done()
			t.Fatal(err)
		}
		burst := 0
		for _, k := range ks {
			burst = max(burst, k.Pid())
		}
		done()
		for _, pid := range awaitReadyForks(t, tr) {
			if pid <= burst {
				t.Errorf("ready context %d was forked during the burst (its last pid %d)", pid, burst)
			}
		}
	})
}

// While a context runs a cell, the pool's refill waits for the cells to
// pause (cells.go: the new fork's warm-up would take the cell's CPU): a
// context taken from the pool during a cell is replaced after the cell
// ended.
func TestReadyPoolRefillWaitsForTheCellsToPause(t *testing.T) {
	t.Parallel()
	forEachReadyOnly(t, func(t *testing.T, mode forkMode) {
		tr, dir := forkTransport(t, mode, []string{"wave"}, nil)
		readyTemplate(t, tr)
		awaitReadyForks(t, tr)
		busy := startForked(t, tr, mode, dir)
		before := awaitReadyForks(t, tr)
		endCell := cellUntilReleased(t, busy, dir)
		took := time.Now()
		startForked(t, tr, mode, dir) // takes a ready context: the pool refills
		noForkDuringTheCell(t, tr, before, took, endCell)
	})
}

// A context just handed out runs its first cell within milliseconds: the
// refill waits for that cell too (cellActivity.handedOut), though no cell
// ran when the context was taken.
func TestReadyPoolRefillWaitsForTheNewContextsFirstCell(t *testing.T) {
	t.Parallel()
	forEachReadyOnly(t, func(t *testing.T, mode forkMode) {
		tr, dir := forkTransport(t, mode, []string{"wave"}, nil)
		readyTemplate(t, tr)
		before := awaitReadyForks(t, tr)
		took := time.Now()
		k := startForked(t, tr, mode, dir)
		endCell := cellUntilReleased(t, k, dir)
		if began := time.Since(took); began >= cellPause {
			t.Skipf("the first cell ran %v after the take, past cellPause (%v): a loaded machine; nothing to tell", began, cellPause)
		}
		noForkDuringTheCell(t, tr, before, took, endCell)
	})
}

// cellUntilReleased starts in k a cell that runs until the returned
// function is called, which returns once the cell ended.
func cellUntilReleased(t *testing.T, k *Kernel, dir string) (end func()) {
	t.Helper()
	release := filepath.Join(dir, "release")
	e := tt.Send(t, k, "import os, time\nprint('running', flush=True)\nend = time.monotonic() + 60\n"+
		"while not os.path.exists("+pythonLiteral(release)+") and time.monotonic() < end: time.sleep(0.01)", false)
	tt.Collect(t, k, e, tt.ExecTimeout, func(tt.Received) bool { return e.Stream("stdout") == "running\n" })
	return func() {
		t.Helper()
		if err := os.WriteFile(release, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		tt.Collect(t, k, e, tt.ExecTimeout, nil)
	}
}

// noForkDuringTheCell gives a refill that did not wait time to fork, ends
// the cell, and checks that the contexts the pool holds besides before
// were forked after the cell ended: their pids are above that of a
// process started then (pids grow; a wrap of pid_max within the test
// aside).
func noForkDuringTheCell(t *testing.T, tr *Transport, before []int, took time.Time, endCell func()) {
	t.Helper()
	time.Sleep(300 * time.Millisecond) // a refill that does not wait is not awaitable
	endCell()
	marker := exec.Command("true")
	if err := marker.Run(); err != nil {
		t.Fatal(err)
	}
	if held := time.Since(took); held >= maxHold {
		t.Skipf("the cell ran %v after the take, past maxHold (%v): a loaded machine; nothing to tell", held, maxHold)
	}
	for _, pid := range awaitReadyForks(t, tr) {
		if !slices.Contains(before, pid) && pid <= marker.Process.Pid {
			t.Errorf("ready context %d was forked while a cell ran (a process started as it ended: pid %d)", pid, marker.Process.Pid)
		}
	}
}

// A context forked ahead of need used the preloaded data stack once before
// it said ready (forkserver.py's _warm_up): its first cell sees what the
// first cell of a context forked when asked for sees: no figure, none
// queued for the inline backend, no result history, no input history, no
// name of its own, execution count 1.
func TestReadyContextShowsNoTraceOfItsWarmUp(t *testing.T) {
	t.Parallel()
	forEachReadyOnly(t, func(t *testing.T, mode forkMode) {
		const probe = "import sys\nip = sys.modules['IPython'].get_ipython()\nshow = sys.modules['matplotlib_inline.backend_inline'].show\n" +
			"print(sys.modules['matplotlib.pyplot'].get_fignums(), show._to_draw, show._draw_called, sorted(globals()), ip.execution_count, dict(ip.user_ns['Out']), ip.user_ns['In'], ip.displayhook.prompt_count)"
		first := func(mode forkMode) (string, int) {
			tr, dir := forkTransport(t, mode, DefaultPreload(), nil)
			readyTemplate(t, tr)
			e := tt.Exec(t, startForked(t, tr, mode, dir), probe, false)
			if e.Reply().Status != "ok" {
				t.Fatalf("%s:%s", mode, e)
			}
			return e.Stream("stdout"), e.ExecutionCount()
		}
		warmed, count := first(mode)
		asked, _ := first(forkMode{sandbox: mode.sandbox})
		if warmed != asked || count != 1 {
			t.Errorf("the first cell of a ready context prints\n%s(execution count %d); of a context forked when asked for\n%s", warmed, count, asked)
		}
	})
}
