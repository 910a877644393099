package subprocess

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/kernelhost/kernelhost/internal/testkit"
	tt "github.com/kernelhost/kernelhost/transports/transporttest"
)

// Under an unprivileged host without a sandbox, python contexts are forked
// from the template and copied live, as under root: the transport plugin
// is not dumpable (pluginrpc, to keep the host's settings from its
// interpreters), so its /proc/<pid>/fd is closed to a process of its user
// without CAP_SYS_PTRACE, and a fork's pipes must not be opened there
// (fork.go). Through /proc every fork waited forkAckWait for an answer
// that never came, then the context started cold. The test runs itself
// again as nobody, made not dumpable as the plugin makes itself.
func TestUnprivilegedHostForksContexts(t *testing.T) {
	if os.Getenv("KH_TEST_UNPRIVILEGED") == "" {
		runAsNobody(t, "TestUnprivilegedHostForksContexts", "KH_TEST_UNPRIVILEGED=1")
		return
	}
	if os.Getuid() == 0 {
		t.Fatal("runs as root: KH_TEST_UNPRIVILEGED is for the test's run as nobody")
	}
	// As pluginrpc's init does in the plugin.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	var warned warnings
	dir := t.TempDir()
	// colorsys: a module the driver does not import, so a context that
	// has it loaded is a fork of the template.
	tr := New(Options{Interpreters: map[string]string{"python": testkit.DebianPython}, Preload: []string{"colorsys"}, PoolCwd: dir, NoCgroups: true, Warn: warned.warn,
		Sandbox: SandboxOptions{Mode: SandboxOff}})
	t.Cleanup(func() { _ = tr.Close() })
	tmpl := readyTemplate(t, tr)
	k := startIn(t, tr, "python", dir)
	mustBeForkedFrom(t, k, tmpl)
	const probe = "import sys\nx = 41\nprint('colorsys' in sys.modules)"
	if got := stdoutOf(t, k, probe); got != "True\n" {
		t.Errorf("the context has the preloaded module: %q, want True (a fork of the template)", got)
	}
	// Its control socket (fd 5) is the driver's, not its children's.
	const inherited = "import os\nos.system('test -e /proc/$$/fd/5 && echo fd5 || echo none')"
	if got := stdoutOf(t, k, inherited); got != "none\n" {
		t.Errorf("a child of the context has its fd 5: %q", got)
	}
	cp := liveFork(t, tr, k)
	if parentOf(cp.Pid()) != os.Getpid() {
		t.Errorf("the copy's parent is %d, want this process", parentOf(cp.Pid()))
	}
	if got := stdoutOf(t, cp, "print(x + 1)"); got != "42\n" {
		t.Errorf("the copy prints %q, want its source's state", got)
	}
	if got := stdoutOf(t, cp, inherited); got != "none\n" {
		t.Errorf("a child of the copy has its fd 5: %q", got)
	}
	// The copy forks too: it got a control socket of its own.
	if got := stdoutOf(t, liveFork(t, tr, cp), "print(x + 1)"); got != "42\n" {
		t.Errorf("the copy's copy prints %q", got)
	}
	if w := warned.all(); len(w) != 0 {
		t.Errorf("warnings: %q", w)
	}
}

// runAsNobody runs the test binary's test name again, as nobody (uid
// 65534), with vars added to its environment, and fails unless it passed.
// It needs root (a skip otherwise). The binary is copied where nobody can
// run it; HOME and TMPDIR are a directory of nobody's.
func runAsNobody(t *testing.T, name string, vars ...string) {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("runs the test as nobody, which needs root")
	}
	home, err := os.MkdirTemp("", "kernelhost-nobody-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(home) })
	bin := filepath.Join(home, "subprocess.test")
	if err := copyExecutable(bin); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{home, bin} {
		if err := os.Chmod(path, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chown(home, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*tt.StartTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "-test.run=^"+name+"$", "-test.v", "-test.count=1")
	cmd.Dir = home
	cmd.Env = append(os.Environ(), append([]string{"HOME=" + home, "TMPDIR=" + home}, vars...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: "+name) {
		t.Fatalf("as nobody: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}

// copyExecutable copies the running test binary to path.
func copyExecutable(path string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	src, err := os.Open(self)
	if err != nil {
		return err
	}
	defer src.Close()
	dst, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(dst, src); err != nil {
		dst.Close()
		return err
	}
	return dst.Close()
}
