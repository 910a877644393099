package subprocess

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/kernelhost/kernelhost/internal/testkit"
	tt "github.com/kernelhost/kernelhost/transports/transporttest"
)

// sandboxedForkTransport is forkTransport with interpreters sandboxed as
// -sandbox=auto sandboxes them where bwrap works (a failure, not a skip,
// under CI where it does not).
func sandboxedForkTransport(t *testing.T, preload []string, env ...string) (*Transport, string) {
	t.Helper()
	needSandbox(t)
	testkit.NeedPythonModules(t, testkit.DebianPython, "numpy", "pandas", "matplotlib", "IPython")
	dir := t.TempDir()
	tr := New(Options{Python: testkit.DebianPython, Preload: preload, PoolCwd: dir, Env: env, Sandbox: SandboxOptions{Mode: SandboxAuto, Writable: []string{dir}}})
	t.Cleanup(func() { _ = tr.Close() })
	if on, why, err := tr.Sandboxed(); !on || err != nil {
		t.Fatalf("interpreters are not sandboxed: %s %v", why, err)
	}
	return tr, dir
}

// Under -sandbox=auto where bwrap works (the default of `make run`), the
// fork server runs, and a new context is forked from its template.
func TestForkServerRunsSandboxed(t *testing.T) {
	tr, dir := sandboxedForkTransport(t, DefaultPreload)
	tmpl := readyTemplate(t, tr)
	k := startIn(t, tr, "python", dir)
	mustBeForkedFrom(t, k, tmpl)
	got := stdoutOf(t, k, "import sys, os\nprint('pandas' in sys.modules, 'matplotlib.pyplot' in sys.modules, os.getcwd())")
	if got != "True True "+dir+"\n" {
		t.Fatalf("the context is not a fork of the template that preloaded pandas and pyplot: %q", got)
	}
}

// A context forked from the sandboxed template is behind the walls bwrap
// gives an interpreter it starts (TestSandbox*): its own PID namespace and
// /proc, its own /tmp, no capability, no_new_privs, the host's files
// read-only, the workspace writable, nothing of the host's environment.
func TestForkedContextHasTheSandboxWalls(t *testing.T) {
	t.Setenv("KERNELHOST_ACCESS_TOKEN", "host-secret-28")
	tr, dir := sandboxedForkTransport(t, []string{"json"})
	tmpl := readyTemplate(t, tr)
	a := startIn(t, tr, "python", dir)
	b := startIn(t, tr, "python", dir)
	for _, k := range []*Kernel{a, b} {
		mustBeForkedFrom(t, k, tmpl)
	}
	exe, _ := os.Executable()
	probe := `import os, glob, tempfile
def status(key):
    return [l.split()[1] for l in open('/proc/self/status') if l.startswith(key + ':')][0]
def write(path):
    try:
        with open(path, 'w') as f:
            f.write('x')
        return 'wrote'
    except OSError as e:
        return type(e).__name__
secret = [k for k, v in os.environ.items() if 'host-secret-28' in v]
for path in glob.glob('/proc/*/environ'):
    try:
        if b'host-secret-28' in open(path, 'rb').read():
            secret.append(path)
    except OSError:
        pass
print(sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))
print(status('CapEff'), status('CapBnd'), status('NoNewPrivs'), secret)
print(write('/usr/kh-fork-probe'), write(` + pythonLiteral(filepath.Join(filepath.Dir(exe), "kh-fork-probe")) + `), write('/proc/sys/kernel/hostname'), write('shared.txt'))
d = tempfile.mkdtemp()
open(os.path.join(d, 'mine'), 'w').close()
print(d)`
	lines := strings.Split(strings.TrimSpace(stdoutOf(t, a, probe)), "\n")
	if len(lines) != 4 {
		t.Fatalf("probe printed %q", lines)
	}
	if lines[0] != "[1, 2]" {
		t.Errorf("the forked context's /proc lists %s, want its init and itself", lines[0])
	}
	if lines[1] != "0000000000000000 0000000000000000 1 []" {
		t.Errorf("CapEff, CapBnd, NoNewPrivs, host secret: %s", lines[1])
	}
	if f := strings.Fields(lines[2]); len(f) != 4 || f[0] == "wrote" || f[1] == "wrote" || f[2] == "wrote" || f[3] != "wrote" {
		t.Errorf("writes to a host file, a file beside this program, a sysctl, the workspace: %s", lines[2])
	}
	for _, path := range []string{"/usr/kh-fork-probe", filepath.Join(filepath.Dir(exe), "kh-fork-probe")} {
		if _, err := os.Stat(path); err == nil {
			os.Remove(path)
			t.Errorf("the forked context wrote %s on the host", path)
		}
	}
	if got := stdoutOf(t, b, "print(open('shared.txt').read())"); got != "x\n" {
		t.Errorf("the neighbour reads %q from the shared workspace", got)
	}
	tmp := lines[3]
	if got := stdoutOf(t, b, "import os; print(os.path.exists("+pythonLiteral(tmp)+"))"); got != "False\n" {
		t.Errorf("another forked context sees the temporary directory %s: %q", tmp, got)
	}
	if _, err := os.Stat(tmp); err == nil {
		t.Errorf("the forked context's temporary directory %s is on the host's /tmp", tmp)
	}
	// Neither sees the other, the template or the host by pid.
	for _, pid := range []int{b.Pid(), tmpl, os.Getpid()} {
		got := stdoutOf(t, a, "import os; print(os.path.exists('/proc/"+strconv.Itoa(pid)+"/environ'))")
		if got != "False\n" && pid > 2 {
			t.Errorf("pid %d is visible in the forked context's /proc", pid)
		}
	}
	tt.ShutdownAndDrain(t, a)
	if err := syscall0(b.Pid()); err != nil {
		t.Errorf("deleting one forked context ended another: %v", err)
	}
}

// mustBeForkedFrom fails unless k's interpreter is a context forked from
// the sandboxed template tmpl: pid 2 of its own PID namespace, whose init's
// parent is the template.
func mustBeForkedFrom(t *testing.T, k *Kernel, tmpl int) {
	t.Helper()
	pid := k.Pid()
	if init := parentOf(pid); pid == tmpl || nsPid(pid) != 2 || parentOf(init) != tmpl || nsPid(init) != 1 {
		t.Fatalf("kernel pid %d (%d in its namespace, its parent %d) is not a context forked from the template (pid %d)", pid, nsPid(pid), init, tmpl)
	}
}
