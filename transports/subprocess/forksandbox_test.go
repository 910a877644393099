package subprocess

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kernelhost/kernelhost/internal/testkit"
	"github.com/kernelhost/kernelhost/transports/subprocess/internal/sandbox"
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
	tr := New(Options{Interpreters: map[string]string{"python": testkit.DebianPython}, Preload: preload, PoolCwd: dir, Env: env, Sandbox: SandboxOptions{Mode: SandboxAuto, Writable: []string{dir}}})
	t.Cleanup(func() { _ = tr.Close() })
	if on, why, err := tr.Sandboxed(); !on || err != nil {
		t.Fatalf("interpreters are not sandboxed: %s %v", why, err)
	}
	return tr, dir
}

// Under -sandbox=auto where bwrap works (the default of `make run`), the
// fork server runs, and a new context is forked from its template.
func TestForkServerRunsSandboxed(t *testing.T) {
	tr, dir := sandboxedForkTransport(t, DefaultPreload())
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
// /proc, its own /tmp and /dev (/dev/shm), no capability, no_new_privs, the host's files
// read-only, the workspace writable, nothing of the host's environment.
func TestForkedContextHasTheSandboxWalls(t *testing.T) {
	t.Setenv("KERNELHOST_ACCESS_TOKEN", "host-secret-28")
	for _, ready := range []bool{false, true} {
		mode := forkMode{sandbox: SandboxAuto, ready: ready}
		t.Run(mode.String(), func(t *testing.T) { testForkedContextHasTheSandboxWalls(t, mode) })
	}
}

func testForkedContextHasTheSandboxWalls(t *testing.T, mode forkMode) {
	needSandbox(t)
	tr, dir := forkTransport(t, mode, []string{"json"}, nil)
	tmpl := readyTemplate(t, tr)
	a := startForked(t, tr, mode, dir)
	b := startForked(t, tr, mode, dir)
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
open('/dev/shm/kh-fork-shm', 'w').close()
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
	if got := stdoutOf(t, b, "import os; print(os.path.exists('/dev/shm/kh-fork-shm'), os.path.exists('/dev/null'), os.listdir('/dev/pts'))"); got != "False True ['ptmx']\n" {
		t.Errorf("another forked context's /dev/shm, /dev/null, /dev/pts: %q, want its own", got)
	}
	// Neither sees the other, the template or the host by pid.
	for _, pid := range []int{b.Pid(), tmpl, os.Getpid()} {
		got := stdoutOf(t, a, "import os; print(os.path.exists('/proc/"+strconv.Itoa(pid)+"/environ'))")
		if got != "False\n" && pid > 2 {
			t.Errorf("pid %d is visible in the forked context's /proc", pid)
		}
	}
	if sb, _ := sandbox.Works(); sb != nil && sb.NoUserns() {
		wantNoUserns(t, "a forked context", stdoutOf(t, a, noUsernsProbe))
	}
	tt.ShutdownAndDrain(t, a)
	if err := syscall0(b.Pid()); err != nil {
		t.Errorf("deleting one forked context ended another: %v", err)
	}
}

// awaitExit waits (bounded) until process pid has ended (a zombie has).
func awaitExit(t *testing.T, pid int, within time.Duration) {
	t.Helper()
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return // gone already
	}
	defer unix.Close(fd)
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for deadline := time.Now().Add(within); ; {
		left := time.Until(deadline)
		if left <= 0 {
			t.Fatalf("pid %d still runs after %v", pid, within)
		}
		n, err := unix.Poll(fds, int(left.Milliseconds())+1)
		if err == nil && n > 0 {
			return
		}
	}
}

// A template replaced because a preloaded package changed (here: a
// `pip install --user` of a newer version, which the template, running no
// code from writable paths, never imports) leaves the contexts forked from
// it running: it lives on, reaping, until the last of them ended, then
// exits. The new template finds the user's version shadows what it
// preloaded, so contexts start as they would without it and import the
// user's.
func TestSandboxedTemplateReplacedKeepsItsContexts(t *testing.T) {
	needSandbox(t)
	userBase := t.TempDir()
	tr, dir := forkTransport(t, forkMode{sandbox: SandboxAuto}, []string{"six"}, []string{"PYTHONUSERBASE=" + userBase}, userBase)
	old := readyTemplate(t, tr)
	probe := "import sys\nprint('six' in sys.modules)\nimport six\nprint(getattr(six, 'KH', 'system'))"
	first := startIn(t, tr, "python", dir)
	mustBeForkedFrom(t, first, old)
	if got := stdoutOf(t, first, probe+"\nkept = 'state'"); got != "True\nsystem\n" {
		t.Fatalf("first context: %q", got)
	}
	site := strings.TrimSpace(stdoutOf(t, first, "import site; print(site.getusersitepackages())"))
	if !strings.HasPrefix(site, userBase) {
		t.Fatalf("the user site is %s, not under PYTHONUSERBASE %s", site, userBase)
	}
	if err := os.MkdirAll(site, 0o755); err != nil {
		t.Fatal(err)
	}
	testkit.WriteFile(t, filepath.Join(site, "six.py"), "KH = 'user'\n") // pip install --user six
	if got := stdoutOf(t, startIn(t, tr, "python", dir), probe); got != "False\nuser\n" {
		t.Fatalf("after the user's install: %q, want a fresh import of the user's six", got)
	}
	if next := readyTemplate(t, tr); next == old {
		t.Fatalf("the stale template (pid %d) still serves", old)
	}
	if err := syscall0(old); err != nil {
		t.Fatalf("the retired template ended while a context forked from it runs: %v", err)
	}
	if n := retiredTemplates(tr); n != 1 {
		t.Errorf("MemoryStats counts %d retired templates, want the one still reaping", n)
	}
	if got := stdoutOf(t, first, "print(kept, getattr(six, 'KH', 'system'))"); got != "state system\n" {
		t.Fatalf("the context forked from the retired template: %q", got)
	}
	if got := stdoutOf(t, startIn(t, tr, "python", dir), probe); got != "False\nuser\n" {
		t.Fatalf("from the new template, which the user's six shadows: %q", got)
	}
	tt.ShutdownAndDrain(t, first)
	awaitExit(t, old, killWait)
	for deadline := time.Now().Add(killWait); retiredTemplates(tr) != 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("MemoryStats still counts the retired template %s after it exited", killWait)
		}
	}
}

// awaitCmdline waits (bounded) until pid's command line is want: a child
// whose exec began has its new one a moment later.
func awaitCmdline(t *testing.T, pid int, want string) {
	t.Helper()
	var got []byte
	for deadline := time.Now().Add(tt.ExecTimeout); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if got, _ = os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline"); string(got) == want {
			return
		}
	}
	t.Fatalf("pid %d runs %q, want %q", pid, got, want)
}

// retiredTemplates is how many retired python templates MemoryStats counts.
func retiredTemplates(tr *Transport) int {
	for _, st := range tr.MemoryStats() {
		if st.Language == "python" && st.Role == "retired-fork-template" {
			return st.Interpreters
		}
	}
	return 0
}

// A context forked in a sandbox is interrupted, restarted and deleted as
// an interpreter bwrap started: SIGINT reaches its cell, a restart forks a
// new one, and its deletion ends everything it started, a process in a
// session of its own included, and no other context.
func TestForkedSandboxedContextInterruptRestartDelete(t *testing.T) {
	tr, dir := forkTransport(t, forkMode{sandbox: SandboxAuto}, []string{"wave"}, nil)
	tmpl := readyTemplate(t, tr)
	k := startIn(t, tr, "python", dir)
	neighbour := startIn(t, tr, "python", dir)
	mustBeForkedFrom(t, k, tmpl)
	interruptSleepingCell(t, k)
	pid := k.Pid()
	if err := k.Restart(context.Background()); err != nil {
		t.Fatal(err)
	}
	awaitExit(t, pid, killWait)
	mustBeForkedFrom(t, k, tmpl)
	marker := strconv.Itoa(600000 + os.Getpid()%100000)
	// The cell says which process its sleep is: Popen returns once the
	// child's exec began, before the kernel gave it its new arguments
	// (/proc/<pid>/cmdline), so the sleep is found by pid, then awaited.
	got := stdoutOf(t, k, "import os, subprocess\np = subprocess.Popen(['sleep', '"+marker+"'], start_new_session=True)\nprint(os.readlink('/proc/self/ns/pid'), p.pid)")
	ns, nsSleeper, _ := strings.Cut(strings.TrimSpace(got), " ")
	n, err := strconv.Atoi(nsSleeper)
	if err != nil || n <= 2 {
		t.Fatalf("detached child: %q, want its pid in the context's namespace (above 2)", got)
	}
	sleeper := testkit.HostPidIn(t, ns, n)
	if !slices.Contains(descendants(tmpl), sleeper) {
		t.Fatal("the detached sleep is not among the template's descendants")
	}
	awaitCmdline(t, sleeper, "sleep\x00"+marker+"\x00")
	tt.ShutdownAndDrain(t, k)
	awaitExit(t, sleeper, killWait)
	if got := stdoutOf(t, neighbour, "print(6 * 7)"); got != "42\n" {
		t.Fatalf("the neighbour after the delete: %q", got)
	}
}

// Where user namespaces are refused (here: a user namespace whose limit of
// them is 0, as max_user_namespaces=0 or Ubuntu's AppArmor rule makes for
// an unprivileged host), the sandboxed template cannot start: the
// transport says so once (Options.Warn), ForkStats shows it, and contexts
// start cold in their sandbox. The test runs itself again in such a
// namespace, as its root, so nothing of the machine changes.
func TestForkTemplateRefusedIsReported(t *testing.T) {
	if os.Getenv("KH_TEST_NO_USERNS") == "" {
		needSandbox(t)
		testkit.NeedPythonModules(t, testkit.DebianPython, "numpy", "pandas", "matplotlib", "IPython")
		unshare := testkit.NeedCommand(t, "unshare", "util-linux")
		ctx, cancel := context.WithTimeout(context.Background(), 4*tt.StartTimeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, unshare, "--user", "--map-root-user", "sh", "-c",
			`echo 0 > /proc/sys/user/max_user_namespaces && exec "$@"`, "sh",
			os.Args[0], "-test.run=^TestForkTemplateRefusedIsReported$", "-test.v", "-test.count=1")
		cmd.Env = append(os.Environ(), "KH_TEST_NO_USERNS=1")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--- PASS: TestForkTemplateRefusedIsReported") {
			t.Fatalf("in a user namespace without user namespaces: %v\n%s", err, out)
		}
		t.Logf("%s", out)
		return
	}
	var warned warnings
	dir := t.TempDir()
	tr := New(Options{Interpreters: map[string]string{"python": testkit.DebianPython}, Preload: []string{"json"}, PoolCwd: dir, NoCgroups: true, Warn: warned.warn,
		Sandbox: SandboxOptions{Mode: SandboxOn, Writable: []string{dir}}})
	t.Cleanup(func() { _ = tr.Close() })
	if on, why, err := tr.Sandboxed(); !on || err != nil {
		t.Fatalf("interpreters are not sandboxed: %s %v", why, err)
	}
	for deadline := time.Now().Add(2 * tt.StartTimeout); ; time.Sleep(20 * time.Millisecond) {
		if st := tr.ForkStats(); len(st) == 1 && st[0].Failing != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the template's failure is not in ForkStats: %+v", tr.ForkStats())
		}
	}
	for i := 0; i < 2; i++ {
		k := startIn(t, tr, "python", dir)
		if sandbox.NsPid(k.Pid()) != 2 {
			t.Errorf("context %d is pid %d in its namespace, want 2: a cold start in its own sandbox", i, sandbox.NsPid(k.Pid()))
		}
		if got := stdoutOf(t, k, "print(6 * 7)"); got != "42\n" {
			t.Errorf("context %d prints %q", i, got)
		}
	}
	// Each context's start tried the template again, in the background.
	for deadline := time.Now().Add(tt.StartTimeout); ; time.Sleep(20 * time.Millisecond) {
		tr.forks["python"].mu.Lock()
		starting := tr.forks["python"].start != nil
		tr.forks["python"].mu.Unlock()
		if !starting {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the template's start does not end")
		}
	}
	got := warned.all()
	if len(got) != 1 || !strings.Contains(got[0], "fork template cannot start") || !strings.Contains(got[0], "namespace") {
		t.Errorf("warnings: %q, want one that says the template cannot start and why", got)
	} else {
		t.Logf("warned: %s", got[0])
	}
	if st := tr.ForkStats(); len(st) != 1 || !strings.Contains(st[0].Failing, "namespace") {
		t.Errorf("ForkStats: %+v", st)
	}
}

// warnings records what a Transport warns (Options.Warn), one line each.
type warnings struct {
	mu    sync.Mutex
	lines []string
}

func (w *warnings) warn(msg string, args ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.lines = append(w.lines, strings.TrimSpace(fmt.Sprintln(append([]any{msg}, args...)...)))
}

// all returns the warnings so far.
func (w *warnings) all() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.lines)
}
