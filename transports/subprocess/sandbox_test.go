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
	"syscall"
	"testing"

	"github.com/kernelhost/kernelhost/core"
	"github.com/kernelhost/kernelhost/internal/testkit"
	"github.com/kernelhost/kernelhost/transports/subprocess/internal/sandbox"
	tt "github.com/kernelhost/kernelhost/transports/transporttest"
)

// The attacks of issue 24, each by a context's code against another
// context's interpreter, the host, or the interpreters that come after it.
// docs/reliability.md has a row for each.

// needSandbox skips a test that needs sandboxed interpreters where bwrap
// cannot make them (fails instead when CI is set).
func needSandbox(t testing.TB) {
	t.Helper()
	if _, err := sandbox.Works(); err != nil {
		testkit.Missingf(t, "no sandbox for interpreters here: %v", err)
	}
}

// sandboxedPair starts two python kernels, victim and attacker, on a
// transport with a pool (a pooled interpreter is a victim too), in one
// workspace.
func sandboxedPair(t *testing.T) (tr *Transport, victim, attacker *Kernel, workspace string) {
	t.Helper()
	needSandbox(t)
	workspace = t.TempDir()
	tr = New(Options{PoolSizes: map[string]int{"python": 1}, PoolCwd: workspace, Sandbox: SandboxOptions{Mode: SandboxOn, Writable: []string{workspace}}})
	t.Cleanup(func() { _ = tr.Close() })
	victim = startIn(t, tr, "python", workspace)
	attacker = startIn(t, tr, "python", workspace)
	return tr, victim, attacker, workspace
}

// stdoutOf runs code and returns its stdout; the code must end ok.
func stdoutOf(t *testing.T, k *Kernel, code string) string {
	t.Helper()
	e := tt.Exec(t, k, code, false)
	if e.Reply().Status != "ok" {
		t.Fatalf("%s:%s", code, e)
	}
	return e.Stream("stdout")
}

// A context's /proc shows its own processes only: no other interpreter
// (a neighbour, the pooled one, the host) has a /proc entry there, so
// nothing can be written into their fd 3 or fd 1, nor their environ or
// memory read, by pid or by scanning.
func TestSandboxHidesOtherProcesses(t *testing.T) {
	t.Parallel()
	tr, victim, attacker, _ := sandboxedPair(t)
	pooled := readyPid(t, tr, "python")
	got := stdoutOf(t, attacker, `import os
print(sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))`)
	if got != "[1, 2]\n" {
		t.Errorf("the attacker's /proc lists %q, want its init and itself", got)
	}
	for _, pid := range []int{victim.Pid(), pooled, os.Getpid()} {
		code := `import os
out = []
for path in ['/proc/%d/fd/3', '/proc/%d/fd/1', '/proc/%d/environ', '/proc/%d/mem']:
    try:
        with open(path, 'rb' if path.endswith(('environ', 'mem')) else 'wb') as f:
            out.append('open ' + path)
    except OSError as e:
        out.append(type(e).__name__)
print(out)`
		got := stdoutOf(t, attacker, strings.ReplaceAll(code, "%d", strconv.Itoa(pid)))
		if strings.Contains(got, "open ") {
			t.Errorf("pid %d: the attacker opened %s", pid, got)
		}
	}
	// The victim still runs, with its request channel untouched.
	if got := stdoutOf(t, victim, "print(6 * 7)"); got != "42\n" {
		t.Errorf("victim prints %q", got)
	}
}

// The host's environment never reaches an interpreter: none of its
// KERNELHOST_ variables (tokens) is in the interpreter's environment, and
// the host's /proc entry is not there to read.
func TestSandboxHasNoHostSecrets(t *testing.T) {
	t.Setenv("KERNELHOST_ACCESS_TOKEN", "host-secret-24")
	_, _, attacker, _ := sandboxedPair(t)
	got := stdoutOf(t, attacker, `import os, glob
found = [k for k, v in os.environ.items() if 'host-secret-24' in v]
for path in glob.glob('/proc/*/environ'):
    try:
        if b'host-secret-24' in open(path, 'rb').read():
            found.append(path)
    except OSError:
        pass
print(found)`)
	if got != "[]\n" {
		t.Errorf("the host's token is visible at %s", got)
	}
}

// Files: the host's are read-only, the workspace is shared and writable,
// /tmp is the context's own and goes with it.
func TestSandboxFiles(t *testing.T) {
	t.Parallel()
	_, victim, attacker, workspace := sandboxedPair(t)
	exe, _ := os.Executable()
	got := stdoutOf(t, attacker, `import os, tempfile
def write(path):
    try:
        with open(path, 'w') as f:
            f.write('x')
        return 'wrote'
    except OSError as e:
        return type(e).__name__
print(write('/usr/kh-sandbox-probe'), write(`+pythonLiteral(filepath.Join(filepath.Dir(exe), "kh-sandbox-probe"))+`), write('shared.txt'))
d = tempfile.mkdtemp()
open(os.path.join(d, 'mine'), 'w').close()
print(d)`)
	lines := strings.Split(strings.TrimSpace(got), "\n")
	if len(lines) != 2 || len(strings.Fields(lines[0])) != 3 {
		t.Fatalf("writes: %q", got)
	}
	if f := strings.Fields(lines[0]); f[0] == "wrote" || f[2] != "wrote" {
		t.Errorf("writes to a host file, a file beside this program, the workspace: %q", lines[0])
	}
	for _, path := range []string{"/usr/kh-sandbox-probe", filepath.Join(filepath.Dir(exe), "kh-sandbox-probe")} {
		if _, err := os.Stat(path); err == nil {
			os.Remove(path)
			t.Errorf("the attacker wrote %s on the host", path)
		}
	}
	if _, err := os.Stat(filepath.Join(workspace, "shared.txt")); err != nil {
		t.Errorf("the workspace file is not on the host: %v", err)
	}
	if got := stdoutOf(t, victim, "print(open('shared.txt').read())"); got != "x\n" {
		t.Errorf("the neighbour reads %q from the shared workspace", got)
	}
	tmp := lines[1]
	if got := stdoutOf(t, victim, "import os; print(os.path.exists("+pythonLiteral(tmp)+"))"); got != "False\n" {
		t.Errorf("the neighbour sees the attacker's temporary directory %s: %q", tmp, got)
	}
	if _, err := os.Stat(tmp); err == nil {
		t.Errorf("the attacker's temporary directory %s is on the host's /tmp", tmp)
	}
}

// noUsernsProbe is a cell that tries to make a user namespace (and a mount
// namespace, which needs capabilities it has not got): it prints the errno
// name of each, "made" where one was made.
// It tries in a new process: the kernel refuses a user namespace to a
// process of several threads (EINVAL), as the driver is.
const noUsernsProbe = `import subprocess, sys
def unshare(flags):
    return subprocess.run([sys.executable, '-c', """import ctypes, errno
libc = ctypes.CDLL(None, use_errno=True)
print('made' if libc.unshare(%d) == 0 else errno.errorcode[ctypes.get_errno()])""" % flags], capture_output=True, text=True, timeout=60).stdout.strip()
print(unshare(0x10000000), unshare(0x00020000))`

// needNoUserns skips a test of --disable-userns where this bwrap cannot
// apply it (fails instead when CI is set).
func needNoUserns(t *testing.T) {
	t.Helper()
	needSandbox(t)
	if sb, _ := sandbox.Works(); !sb.NoUserns() {
		testkit.Missingf(t, "bwrap cannot keep interpreters from making user namespaces here (it needs --disable-userns, bubblewrap 0.8.0, and a user namespace for the sandbox)")
	}
}

// wantNoUserns checks what noUsernsProbe printed: neither namespace made
// (ENOSPC: the count of user namespaces is used up; EPERM, EUSERS: refused
// otherwise).
func wantNoUserns(t *testing.T, who, got string) {
	t.Helper()
	f := strings.Fields(got)
	if len(f) != 2 || !slices.Contains([]string{"ENOSPC", "EPERM", "EUSERS"}, f[0]) || f[1] != "EPERM" {
		t.Errorf("%s: unshare(CLONE_NEWUSER), unshare(CLONE_NEWNS): %q, want both refused", who, got)
	}
}

// No context makes a user namespace (and with it capabilities over
// namespaces of its own), the pooled one nor a cold one; each still runs
// as the host's uid and gid, and sees the host's files as theirs.
func TestSandboxCannotMakeUserNamespaces(t *testing.T) {
	t.Parallel()
	needNoUserns(t)
	_, pooled, cold, workspace := sandboxedPair(t)
	for who, k := range map[string]*Kernel{"pooled": pooled, "cold": cold} {
		wantNoUserns(t, who, stdoutOf(t, k, noUsernsProbe))
		got := stdoutOf(t, k, `import os
print(os.getuid(), os.getgid(), os.stat('.').st_uid, os.stat('/proc/1').st_uid)`)
		fi, err := os.Stat(workspace)
		if err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf("%d %d %d %d\n", os.Getuid(), os.Getgid(), fi.Sys().(*syscall.Stat_t).Uid, os.Getuid())
		if got != want {
			t.Errorf("%s: uid, gid, the workspace's owner, its init's owner: %q, want %q", who, got, want)
		}
	}
}

// A child that writes itself into the root cgroup (or any other) cannot:
// /sys is read-only. And it ends with its context all the same.
func TestSandboxChildCannotLeaveItsCgroup(t *testing.T) {
	t.Parallel()
	_, _, attacker, _ := sandboxedPair(t)
	got := stdoutOf(t, attacker, `import os, glob
out = []
for path in glob.glob('/sys/fs/cgroup/**/cgroup.procs', recursive=True)[:50] + ['/sys/fs/cgroup/cgroup.procs', '/sys/fs/cgroup/unified/cgroup.procs']:
    try:
        with open(path, 'w') as f:
            f.write(str(os.getpid()))
        out.append(path)
    except OSError:
        pass
print(out)`)
	if got != "[]\n" {
		t.Errorf("the attacker moved into %s", got)
	}
}

// An R context's tempdir is in its own /tmp: deleted with it.
func TestSandboxRTempdirGoesWithTheContext(t *testing.T) {
	t.Parallel()
	needSandbox(t)
	testkit.NeedCommand(t, "Rscript", "r-base-core")
	tr := New(Options{Sandbox: SandboxOptions{Mode: SandboxOn}})
	k := startIn(t, tr, "r", t.TempDir())
	dir := strings.TrimSpace(stdoutOf(t, k, "cat(tempdir(), '\\n')"))
	if !strings.HasPrefix(dir, "/tmp/Rtmp") {
		t.Fatalf("R's tempdir is %q", dir)
	}
	if _, err := os.Stat(dir); err == nil {
		t.Fatalf("R's tempdir %s is on the host's /tmp", dir)
	}
	tt.ShutdownAndDrain(t, k)
}

// -sandbox=on where bwrap cannot run: no interpreter starts, and the error
// says why; auto runs them unsandboxed and says why.
func TestSandboxOnFailsLoudly(t *testing.T) {
	t.Setenv("PATH", t.TempDir()) // no bwrap on PATH
	if bwrapPath, err := exec.LookPath("bwrap"); err == nil {
		t.Fatalf("bwrap found at %s", bwrapPath)
	}
	sb, why, err := sandbox.New(SandboxOptions{Mode: SandboxOn}, sandbox.Probe)
	if sb != nil || err == nil || !strings.Contains(err.Error(), "bwrap is not installed") {
		t.Errorf("on: %v %q %v", sb, why, err)
	}
	sb, why, err = sandbox.New(SandboxOptions{Mode: SandboxAuto}, sandbox.Probe)
	if sb != nil || err != nil || !strings.Contains(why, "bwrap is not installed") {
		t.Errorf("auto: %v %q %v", sb, why, err)
	}
	if _, err := ParseSandboxMode("yes"); err == nil {
		t.Error("sandbox mode yes accepted")
	}
}

// A tampered compiled driver in the cache (written while the host runs, as
// an unsandboxed context could) never runs: the host checks it against the
// hash it holds and compiles it anew.
func TestPythonDriverTamperedCacheIsReplaced(t *testing.T) {
	cache := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", cache)
	tr := New(Options{})
	start := func() *Kernel {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), tt.StartTimeout)
		defer cancel()
		k, err := tr.StartKernel(ctx, core.KernelSpec{Language: "python", Cwd: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { k.Shutdown(context.Background()) })
		return k.(*Kernel)
	}
	start()
	path, first := cachedDriver(t, cache)
	marker := filepath.Join(t.TempDir(), "tampered")
	evil, err := exec.Command(tr.langs["python"].path, "-c", `import marshal, sys
sys.stdout.buffer.write(marshal.dumps(compile(sys.argv[1], "x", "exec")))`, "open("+pythonLiteral(marker)+", 'w').close()").Output()
	if err != nil {
		t.Fatalf("%v: %s", err, err.(*exec.ExitError).Stderr)
	}
	if err := os.WriteFile(path, evil, 0o600); err != nil {
		t.Fatal(err)
	}
	if got := stdoutOf(t, start(), "print(6 * 7)"); got != "42\n" {
		t.Fatalf("prints %q", got)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the tampered driver ran")
	}
	if _, data := cachedDriver(t, cache); string(data) != string(first) {
		t.Error("the tampered file was not replaced by the compiled driver")
	}
}

// A json.py or ast.py saved in the working directory (by any context: it is
// shared) runs nowhere in the driver: contexts start and run cells, and
// user code still imports modules from its cwd.
func TestPythonDriverImportsNothingFromTheCwd(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	marker := filepath.Join(t.TempDir(), "imported")
	for _, name := range []string{"json.py", "ast.py", "traceback.py", "base64.py"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("open("+pythonLiteral(marker)+", 'a').write("+pythonLiteral(name)+")\nraise SystemExit(9)\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "khuser.py"), []byte("V = 'user module'\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{SandboxOn, SandboxOff} {
		t.Run(mode, func(t *testing.T) {
			if mode == SandboxOn {
				needSandbox(t)
			}
			tr := New(Options{PoolSizes: map[string]int{"python": 1}, PoolCwd: dir, Sandbox: SandboxOptions{Mode: mode}})
			t.Cleanup(func() { _ = tr.Close() })
			for i := 0; i < 2; i++ { // the pooled interpreter and a cold one
				k := startIn(t, tr, "python", dir)
				e := tt.Exec(t, k, "import khuser\nprint(khuser.V)\n1/0", false)
				if got := e.Stream("stdout"); got != "user module\n" || e.Reply().EName != "ZeroDivisionError" {
					t.Fatalf("stdout %q, reply %+v", got, e.Reply())
				}
			}
			if b, err := os.ReadFile(marker); err == nil {
				t.Fatalf("the driver imported %s from the cwd", b)
			}
		})
	}
}
