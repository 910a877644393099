package subprocess

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kernelhost/kernelhost/core/engine"
	"github.com/kernelhost/kernelhost/internal/testkit"
)

// limitedEngine is an engine on a transport with lim, sandboxed, with a
// python pool (pooled interpreters get the limits too).
func limitedEngine(t *testing.T, lim Limits) (*engine.Engine, *Transport) {
	t.Helper()
	needSandbox(t)
	dir := t.TempDir()
	tr := New(Options{Limits: lim, PoolSizes: map[string]int{"python": 1}, PoolCwd: dir, Sandbox: SandboxOptions{Mode: SandboxOn, Writable: []string{dir}}})
	if err := tr.Limited(); err != nil {
		tr.Close()
		testkit.Missingf(t, "no cgroup controller for the limits here: %v", err)
	}
	t.Cleanup(func() { _ = tr.Close() }) // after the engine's (the caller owns the transport)
	e, err := engine.NewEngine(engine.Config{Transport: tr, DefaultCwd: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close(context.Background()) })
	return e, tr
}

// runAll runs code and returns all its outputs.
func runAll(t *testing.T, ctx context.Context, e *engine.Engine, id, code string) []engine.Output {
	t.Helper()
	x, err := e.Execute(ctx, engine.ExecRequest{ContextID: id, Code: code})
	if err != nil {
		t.Fatal(err)
	}
	var outs []engine.Output
	for err == nil {
		outs, err = x.Next(ctx, outs)
	}
	return outs
}

// A context past its memory limit is killed by the kernel with a clear
// error naming the limit and the setting; its next execution runs in a
// fresh interpreter, with the notice; its neighbour keeps its state.
func TestMemoryLimitEndsOnlyItsContext(t *testing.T) {
	t.Parallel()
	e, _ := limitedEngine(t, Limits{MemoryBytes: 256 << 20})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	hog, err := e.CreateContext(ctx, "python", "")
	if err != nil {
		t.Fatal(err)
	}
	neighbour, err := e.CreateContext(ctx, "python", "")
	if err != nil {
		t.Fatal(err)
	}
	runStdout(t, ctx, e, neighbour.ID, "keep = 42")
	runStdout(t, ctx, e, hog.ID, "small = bytearray(64 << 20)\nprint('under the limit')")
	var errs []engine.Output
	for _, o := range runAll(t, ctx, e, hog.ID, "b = bytearray(600 << 20)\nprint('not reached')") {
		if o.Type == engine.OutError {
			errs = append(errs, o)
		}
		if o.Type == engine.OutStdout {
			t.Errorf("stdout %q: the allocation past the limit succeeded", o.Text)
		}
	}
	if len(errs) != 1 || errs[0].ErrName != "MemoryLimitExceeded" ||
		!strings.Contains(errs[0].ErrValue, "256 MiB") || !strings.Contains(errs[0].ErrValue, "-context-memory") {
		t.Fatalf("errors %+v, want one MemoryLimitExceeded naming 256 MiB and -context-memory", errs)
	}
	var stdout, stderr string
	for _, o := range runAll(t, ctx, e, hog.ID, "print('b' in globals(), 1+1)") {
		switch o.Type {
		case engine.OutStdout:
			stdout += o.Text
		case engine.OutStderr:
			stderr += o.Text
		case engine.OutError:
			t.Fatalf("next execution: %s: %s", o.ErrName, o.ErrValue)
		}
	}
	if stdout != "False 2\n" || !strings.Contains(stderr, "replaced") {
		t.Errorf("next execution: stdout %q, stderr %q; want a fresh interpreter and the notice", stdout, stderr)
	}
	if got := runStdout(t, ctx, e, neighbour.ID, "print(keep)"); got != "42\n" {
		t.Errorf("the neighbour's variable: %q", got)
	}
}

// A fork loop stops at the pids limit: fork fails (EAGAIN), the context
// lives on.
func TestPidsLimitStopsAForkLoop(t *testing.T) {
	t.Parallel()
	const limit = 40
	e, _ := limitedEngine(t, Limits{Pids: limit})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := e.CreateContext(ctx, "python", "")
	if err != nil {
		t.Fatal(err)
	}
	got := runStdout(t, ctx, e, c.ID, `import os, signal
children, failure = [], None
try:
    for _ in range(500):
        pid = os.fork()
        if pid == 0:
            signal.pause()
            os._exit(0)
        children.append(pid)
except OSError as e:
    failure = type(e).__name__
for pid in children:
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
print(len(children), failure)`)
	f := strings.Fields(got)
	if len(f) != 2 {
		t.Fatalf("stdout %q", got)
	}
	if n, _ := strconv.Atoi(f[0]); n == 0 || n >= limit || f[1] != "BlockingIOError" {
		t.Errorf("forked %s children before %s; want fewer than %d, then BlockingIOError", f[0], f[1], limit)
	}
	if got := runStdout(t, ctx, e, c.ID, "print(len(children))"); got != f[0]+"\n" {
		t.Errorf("the context after the fork loop: %q", got)
	}
}

// The CPU weight is in the interpreter's cgroup: cpu.weight on cgroup v2,
// cpu.shares (weight*1024/100) on v1.
func TestCPUWeightApplied(t *testing.T) {
	t.Parallel()
	_, tr := limitedEngine(t, Limits{CPUWeight: 50})
	k := startIn(t, tr, "python", t.TempDir())
	file, want := "", ""
	if tr.limits.InV2("cpu") {
		file, want = filepath.Join(cgroupOf(k.Pid()), "cpu.weight"), "50"
	} else {
		ctls, dir, _ := tr.limits.V1("cpu")
		file, want = filepath.Join(v1CgroupOf(t, k.Pid(), ctls, dir), "cpu.shares"), "512"
	}
	got, err := os.ReadFile(file)
	if err != nil || strings.TrimSpace(string(got)) != want {
		t.Errorf("%s = %q (%v), want %s", file, got, err, want)
	}
}

// v1CgroupOf is the directory of pid's own kernelhost cgroup in the v1
// hierarchy of controllers ctls whose cgroup of this process is dir.
func v1CgroupOf(t *testing.T, pid int, ctls, dir string) string {
	t.Helper()
	self, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(self), "\n") {
		if f := strings.SplitN(line, ":", 3); len(f) == 3 && f[1] == ctls && strings.HasPrefix(filepath.Base(f[2]), "kernelhost-") {
			return filepath.Join(dir, filepath.Base(f[2]))
		}
	}
	t.Fatalf("pid %d is in no kernelhost cgroup of %s: %s", pid, ctls, self)
	return ""
}
