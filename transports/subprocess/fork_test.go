package subprocess

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kernelhost/kernelhost/core"
	"github.com/kernelhost/kernelhost/transports/testkit"
	tt "github.com/kernelhost/kernelhost/transports/transporttest"
)

// forkTransport is a Transport with Debian's python, whose fork server
// preloads preload and serves kernels in the directory it returns, without
// a sandbox (the fork server is off in one); closed with the test.
func forkTransport(t *testing.T, preload []string, env ...string) (*Transport, string) {
	t.Helper()
	testkit.NeedPythonModules(t, testkit.DebianPython, "numpy", "pandas", "matplotlib", "IPython")
	dir := t.TempDir()
	tr := New(Options{Python: testkit.DebianPython, Preload: preload, PoolCwd: dir, Env: env, Sandbox: SandboxOptions{Mode: SandboxOff}})
	t.Cleanup(func() { _ = tr.Close() })
	return tr, dir
}

// readyTemplate waits (bounded) until the python fork server's template is
// ready and returns its pid.
func readyTemplate(t testing.TB, tr *Transport) int {
	t.Helper()
	fs := tr.forks["python"]
	if fs == nil {
		t.Fatal("no python fork server")
	}
	deadline := time.Now().Add(2 * tt.StartTimeout) // it imports pandas and matplotlib: seconds on a loaded machine
	for {
		if p := fs.template(); p != nil {
			pid, _, _ := p.ids()
			return pid
		}
		if time.Now().After(deadline) {
			t.Fatalf("no fork template ready after %v", 2*tt.StartTimeout)
		}
		time.Sleep(20 * time.Millisecond) // the template's start is not awaitable from here
	}
}

// A context from the fork server is a child of the template's, a child of
// this process (so reaped and killed as any interpreter), has the preloaded
// modules loaded, and works as a python context: prints, results, errors,
// interrupts, restart and shutdown.
func TestForkServerContextIsAChildWithModulesLoaded(t *testing.T) {
	tr, dir := forkTransport(t, DefaultPreload)
	tmpl := readyTemplate(t, tr)
	k := startIn(t, tr, "python", dir)
	pid := k.Pid()
	if pid == tmpl {
		t.Fatalf("the kernel runs the template itself (pid %d)", pid)
	}
	if got := parentOf(pid); got != os.Getpid() {
		t.Fatalf("the forked interpreter's parent is %d, want this process (%d)", got, os.Getpid())
	}
	if got := tt.Exec(t, k, "import sys, os\nprint('pandas' in sys.modules, os.getpid() == "+strconv.Itoa(pid)+", os.getcwd())", false).Stream("stdout"); got != "True True "+dir+"\n" {
		t.Fatalf("got %q", got)
	}
	if e := tt.Exec(t, k, "1/0", false); e.Reply().Status != "error" || e.Reply().EName != "ZeroDivisionError" {
		t.Fatalf("1/0:%s", e)
	}
	// An interrupt reaches the forked interpreter's group.
	e := tt.Send(t, k, "import time\nprint('sleeping', flush=True)\ntime.sleep(60)", false)
	tt.Collect(t, k, e, tt.ExecTimeout, func(r tt.Received) bool { return r.Type == core.MsgStream })
	if err := k.Interrupt(context.Background()); err != nil {
		t.Fatal(err)
	}
	tt.Collect(t, k, e, tt.ExecTimeout, nil)
	if e.Reply().EName != "KeyboardInterrupt" {
		t.Fatalf("interrupted sleep:%s", e)
	}
	// A restart forks a new one; the old one is gone.
	if err := k.Restart(context.Background()); err != nil {
		t.Fatal(err)
	}
	if k.Pid() == pid {
		t.Fatal("restart kept the interpreter")
	}
	if err := syscall0(pid); err == nil {
		t.Fatalf("pid %d still runs after the restart", pid)
	}
	if got := tt.Exec(t, k, "print(1+1)", false).Stream("stdout"); got != "2\n" {
		t.Fatalf("after restart: %q", got)
	}
}

// syscall0 reports whether pid exists (signal 0), a zombie not counted.
func syscall0(pid int) error {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return err
	}
	if f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:])); f[0] == "Z" {
		return os.ErrProcessDone
	}
	return nil
}

var _ = filepath.Join
