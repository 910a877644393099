package subprocess

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kernelhost/kernelhost/core"
	"github.com/kernelhost/kernelhost/core/engine"
	"github.com/kernelhost/kernelhost/internal/testkit"
	"github.com/kernelhost/kernelhost/transports/subprocess/internal/sandbox"
	tt "github.com/kernelhost/kernelhost/transports/transporttest"
)

// familyTransport is a sandboxed transport whose fork server preloads
// json (quick to start), and its ready template's pid.
func familyTransport(t *testing.T) (*Transport, string, int) {
	t.Helper()
	tr, dir := sandboxedForkTransport(t, []string{"json"})
	return tr, dir, readyTemplate(t, tr)
}

// mustBeInFamilyOf fails unless copy is a member of src's family: its
// interpreter a child of src's sandbox's init, in its PID namespace, with
// the same family id.
func mustBeInFamilyOf(t *testing.T, cp *Kernel, init int, family string) {
	t.Helper()
	pid := cp.Pid()
	if got := parentOf(pid); got != init || sandbox.NsPid(pid) <= 2 {
		t.Fatalf("the copy (pid %d, %d in its namespace) is the child of %d, want the family's init %d", pid, sandbox.NsPid(pid), got, init)
	}
	if got := cp.Family(); got != family || got == "" {
		t.Fatalf("the copy's family is %q, want %q", got, family)
	}
}

// A copy of a sandboxed context is a fork of its interpreter in its
// sandbox: it has the source's variables, imports and cwd, and a new
// context's process environment, not what the source's cells made of it; a write in one
// is not seen in the other; it outlives its source (deleted) and keeps its
// state; a copy of the copy joins the same family; and once the last member
// is deleted, no process of the family is left, its init included.
func TestFamilyCopyOutlivesItsSource(t *testing.T) {
	tr, dir, tmpl := familyTransport(t)
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	src := startIn(t, tr, "python", dir)
	mustBeForkedFrom(t, src, tmpl)
	init, family := parentOf(src.Pid()), src.Family()
	if family == "" {
		t.Fatal("a context forked from the sandboxed template has no family")
	}
	if got := stdoutOf(t, src, "import os, json\nx = 41\ndef f(): return x + 1\nos.chdir('sub')\nprint('set')"); got != "set\n" {
		t.Fatalf("setup: %q", got)
	}
	if got := stdoutOf(t, src, dirtyEnv); got != "dirty\n" {
		t.Fatalf("env change: %q", got)
	}
	cp := liveFork(t, tr, src)
	mustBeInFamilyOf(t, cp, init, family)
	if got := stdoutOf(t, cp, "print(f(), json.dumps([x]), os.getcwd())\nx = 1"); got != "42 [41] "+filepath.Join(dir, "sub")+"\n" {
		t.Fatalf("the copy: %q", got)
	}
	mustHaveStartEnv(t, tr, dir, src, cp, filepath.Join(dir, "sub"))
	if got := stdoutOf(t, src, "print(f())"); got != "42\n" {
		t.Fatalf("the source after the copy's write: %q", got)
	}
	// Each has its own execution counter from the fork on: one cell
	// more in each is one more than the other's count.
	if a, b := tt.Exec(t, cp, "1", false).ExecutionCount(), tt.Exec(t, src, "1", false).ExecutionCount(); a != b || a < 2 {
		t.Fatalf("execution counts after one more cell in each: copy %d, source %d, want the same", a, b)
	}
	if got := stdoutOf(t, src, "print(sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))"); got != "[1, 2, "+strconv.Itoa(sandbox.NsPid(cp.Pid()))+"]\n" {
		t.Fatalf("the family's /proc as the source sees it: %q", got)
	}
	tt.ShutdownAndDrain(t, src)
	if got := stdoutOf(t, cp, "print(f())"); got != "2\n" {
		t.Fatalf("the copy after its source's delete: %q", got)
	}
	cc := liveFork(t, tr, cp)
	mustBeInFamilyOf(t, cc, init, family)
	if got := stdoutOf(t, cc, "print(f())"); got != "2\n" {
		t.Fatalf("the copy of the copy: %q", got)
	}
	tt.ShutdownAndDrain(t, cp)
	if got := stdoutOf(t, cc, "print(x * 21)"); got != "21\n" {
		t.Fatalf("the copy of the copy after the copy's delete: %q", got)
	}
	if err := syscall0(init); err != nil {
		t.Fatalf("the family's init ended while a member lives: %v", err)
	}
	tt.ShutdownAndDrain(t, cc)
	awaitExit(t, init, killWait)
	for _, pid := range descendants(tmpl) {
		t.Errorf("pid %d is left of the template's contexts after the last member's delete", pid)
	}
}

// A member killed (kill -9 of the source's interpreter) is reported dead
// alone: its copy answers on with its state. Restarted, it gets a fresh
// interpreter in a sandbox of its own (it leaves the family).
func TestFamilyMemberKilledAlone(t *testing.T) {
	tr, dir, tmpl := familyTransport(t)
	src := startIn(t, tr, "python", dir)
	family := src.Family()
	stdoutOf(t, src, "kept = 'state'")
	cp := liveFork(t, tr, src)
	if err := syscall.Kill(src.Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	awaitDead(t, src)
	if got := stdoutOf(t, cp, "print(kept)"); got != "state\n" {
		t.Fatalf("the copy after its source's kill: %q", got)
	}
	if err := src.Restart(context.Background()); err != nil {
		t.Fatal(err)
	}
	mustBeForkedFrom(t, src, tmpl)
	if got := src.Family(); got == family || got == "" {
		t.Fatalf("the restarted source's family is %q, want a new one (its copy's is %q)", got, family)
	}
	if got := stdoutOf(t, src, "print('kept' in dir())"); got != "False\n" {
		t.Fatalf("the restarted source: %q", got)
	}
	if got := stdoutOf(t, cp, "print(kept)"); got != "state\n" {
		t.Fatalf("the copy after its source's restart: %q", got)
	}
}

// awaitDead waits (bounded) for k's status dead.
func awaitDead(t *testing.T, k *Kernel) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), tt.ExecTimeout)
	defer cancel()
	for {
		select {
		case m := <-k.Messages():
			if m.Type == core.MsgStatus && m.State == core.StateDead {
				return
			}
		case <-ctx.Done():
			t.Fatal("no status dead after the interpreter's kill")
		}
	}
}

// A context of another family sees no member in its /proc and cannot
// signal one: neither the members' pids on the host nor those in their
// namespace (2, 3, ...) name a process there, but its own. The copy has
// its source's walls: no capability, no_new_privs.
func TestFamilyIsWalledFromOthers(t *testing.T) {
	tr, dir, _ := familyTransport(t)
	src := startIn(t, tr, "python", dir)
	cp := liveFork(t, tr, src)
	other := startIn(t, tr, "python", dir)
	probe := fmt.Sprintf(`import os
seen = sorted(int(p) for p in os.listdir('/proc') if p.isdigit())
own = {int(t) for t in os.listdir('/proc/self/task')}  # its own threads answer kill too
hit = []
for pid in sorted({3, 4, 5, %d, %d} - own):
    try:
        os.kill(pid, 0)
        hit.append(pid)
    except ProcessLookupError:
        pass
print(seen, hit)`, src.Pid(), cp.Pid())
	got := stdoutOf(t, other, probe)
	if got != "[1, 2] []\n" {
		t.Fatalf("another family's /proc and kill: %q, want only itself and its init", got)
	}
	caps := "print(*[l.split()[1] for l in open('/proc/self/status') if l.split(':')[0] in ('CapEff', 'CapBnd', 'NoNewPrivs')])"
	if got := stdoutOf(t, cp, caps); got != "0000000000000000 0000000000000000 1\n" {
		t.Errorf("the copy's CapEff, CapBnd, NoNewPrivs: %q, want its source's walls", got)
	}
}

// A member over its memory limit is ended alone, with the error naming
// the limit (each member has its own cgroup and limits): its source keeps
// its state, and the copy's next cell runs in a fresh interpreter.
func TestFamilyMemberOverItsMemoryLimit(t *testing.T) {
	needSandbox(t)
	dir := t.TempDir()
	tr := New(Options{Interpreters: map[string]string{"python": testkit.DebianPython}, Preload: []string{"json"}, PoolCwd: dir, Limits: Limits{MemoryBytes: 256 << 20}, Sandbox: SandboxOptions{Mode: SandboxAuto, Writable: []string{dir}}})
	if err := tr.Limited(); err != nil {
		tr.Close()
		testkit.Missingf(t, "no cgroup controller for the limits here: %v", err)
	}
	t.Cleanup(func() { _ = tr.Close() })
	readyTemplate(t, tr)
	e, err := engine.NewEngine(engine.Config{Transport: tr, DefaultCwd: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close(context.Background()) })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	src, err := e.CreateContext(ctx, "python", "")
	if err != nil {
		t.Fatal(err)
	}
	runStdout(t, ctx, e, src.ID, "keep = 42\nimport json")
	cp, err := e.Fork(ctx, src.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got := runStdout(t, ctx, e, cp.ID, "print(keep)"); got != "42\n" {
		t.Fatalf("the copy: %q", got)
	}
	var errs []engine.Output
	for _, o := range runAll(t, ctx, e, cp.ID, "b = bytearray(600 << 20)\nprint('not reached')") {
		if o.Type == engine.OutError {
			errs = append(errs, o)
		}
	}
	if len(errs) != 1 || errs[0].ErrName != "MemoryLimitExceeded" || !strings.Contains(errs[0].ErrValue, "256 MiB") {
		t.Fatalf("errors %+v, want one MemoryLimitExceeded naming 256 MiB", errs)
	}
	if got := runStdout(t, ctx, e, src.ID, "print(keep)"); got != "42\n" {
		t.Errorf("the source after its copy's kill: %q", got)
	}
	if got := runStdout(t, ctx, e, cp.ID, "print('keep' in dir())"); got != "False\n" {
		t.Errorf("the copy's next cell: %q, want a fresh interpreter", got)
	}
}

// A family has one network stack (its namespace's): it outlives the
// source's delete, the copy downloads through it, and it ends with the
// last member.
func TestFamilyNetworkOutlivesItsSource(t *testing.T) {
	url := testkit.Internet(t) + "/bytes/100000"
	tr, src, _ := netContext(t, true, NetworkIsolated)
	cp := liveFork(t, tr, src)
	stacks := pastaChildren()
	if len(stacks) != 1 {
		t.Fatalf("%d pasta processes run for one family, want 1: %v", len(stacks), stacks)
	}
	tt.ShutdownAndDrain(t, src)
	if got := strings.TrimSpace(stdoutOf(t, cp, fmt.Sprintf(downloadCode, url))); got != "100000" {
		t.Fatalf("a download in the copy after its source's delete: %s", got)
	}
	if err := syscall0(stacks[0]); err != nil {
		t.Fatalf("the family's pasta ended with the source: %v", err)
	}
	tt.ShutdownAndDrain(t, cp)
	testkit.AwaitGone(t, "the family's pasta after its last member's delete", 30*time.Second, stacks...)
}

// The first python context of a transport whose template is still
// importing the data stack (a host's default context, made as it starts)
// waits for the template and is forked from it: it has the preloaded
// modules and can be copied into its family, which a cold start made
// meanwhile never could.
func TestFirstContextIsForkedFromTheTemplate(t *testing.T) {
	tr, dir := sandboxedForkTransport(t, DefaultPreload())
	k := startIn(t, tr, "python", dir) // at once: the template is not ready yet
	mustBeForkedFrom(t, k, readyTemplate(t, tr))
	if got := stdoutOf(t, k, "import sys\nprint('pandas' in sys.modules)"); got != "True\n" {
		t.Fatalf("the first context has not the preloaded modules: %q", got)
	}
	cp := liveFork(t, tr, k)
	if cp.Family() == "" || cp.Family() != k.Family() {
		t.Fatalf("the copy's family %q, its source's %q: want the same", cp.Family(), k.Family())
	}
}
