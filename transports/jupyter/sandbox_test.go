package jupyter

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kernelhost/kernelhost/core"
	jupyterdeploy "github.com/kernelhost/kernelhost/deploy/jupyter"
	"github.com/kernelhost/kernelhost/transports/jupyter/jupytertest"
)

// sandboxProbe is a cell that tries the walls of its kernel's sandbox and
// prints what it found as JSON; params (a JSON object) names the paths.
// The sysctl is written back with exactly the value just read: a sandbox
// that let it through would change nothing.
const sandboxProbe = `
import errno, json, os
from ipykernel.connect import get_connection_file
P = json.loads(%s)
def attempt(f):
    try:
        f()
        return "ok"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
def write_back(path):
    with open(path) as f:
        v = f.read()
    with open(path, "w") as f:
        f.write(v)
def write(path):
    with open(path, "w") as f:
        f.write("from the kernel")
print(json.dumps({
    "core_pattern": attempt(lambda: write_back("/proc/sys/kernel/core_pattern")),
    "etc": attempt(lambda: write("/etc/kernelhost-sandbox-probe")),
    "cwd": attempt(lambda: write("kernelhost-sandbox-probe")),
    "spec": attempt(lambda: open(P["spec"], "a").close()),
    "pids": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()),
    "runtime": sorted(os.listdir(P["runtime"])),
    "own": os.path.basename(get_connection_file()),
    "read": {p: attempt(lambda p=p: open(p).read()) for p in P["secrets"]},
    "token_in_env": any(P["token"] in v for v in os.environ.values()),
    "getcwd": os.getcwd(),
}))
`

type sandboxFound struct {
	CorePattern string            `json:"core_pattern"`
	Etc         string            `json:"etc"`
	Cwd         string            `json:"cwd"`
	Spec        string            `json:"spec"`
	Pids        []int             `json:"pids"`
	Runtime     []string          `json:"runtime"`
	Own         string            `json:"own"`
	Read        map[string]string `json:"read"`
	TokenInEnv  bool              `json:"token_in_env"`
	Getcwd      string            `json:"getcwd"`
}

// The kernel spec kernelhost ships (deploy/jupyter/kernels/python3) runs
// each kernel in the walls of the subprocess transport's interpreters, on
// the server's own machine: a cell cannot write a sysctl, /etc or its own
// kernel spec, sees only its own processes, and cannot read the server's
// token (its jpserver-*.json, its config dir), another kernel's connection
// file (its HMAC key), another kernel's cells (IPython's history) or the
// host's /tmp; its cwd (the server's root) is
// writable, and an interrupt still reaches it (the launcher passes it in).
// The same holds with /tmp writable (jupytertest's spec, "--writable /tmp"),
// where the server's dirs are shown but for the masks over them.
func TestShippedKernelSpecIsSandboxed(t *testing.T) {
	t.Parallel()
	srv := jupytertest.Start(t) // its kernel specs are changed: a server of its own
	if err := os.MkdirAll(srv.ConfigDir, 0o700); err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(srv.ConfigDir, "jupyter_server_config.json")
	hostTmp := filepath.Join(t.TempDir(), "host-file")
	for _, f := range []string{config, hostTmp} {
		if err := os.WriteFile(f, []byte(`{"ServerApp": {"token": "`+srv.Token+`"}}`), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { os.Remove("/etc/kernelhost-sandbox-probe") }) // were /etc writable
	tr := newTransport(t, srv, nil)

	t.Run("AsShipped", func(t *testing.T) {
		// jupytertest's spec lets kernels write os.TempDir(): not this one.
		if err := jupyterdeploy.WriteKernelSpecs(srv.DataDir); err != nil {
			t.Fatal(err)
		}
		k := startKernel(t, tr)
		checkSandbox(t, srv, k, startKernel(t, tr), config, hostTmp)
		testInterruptOf(t, k)
	})
	t.Run("TmpWritable", func(t *testing.T) {
		if err := jupytertest.WriteKernelSpec(srv.DataDir); err != nil {
			t.Fatal(err)
		}
		checkSandbox(t, srv, startKernel(t, tr), startKernel(t, tr), config)
	})
}

// checkSandbox runs sandboxProbe in k, beside other on the same server, and
// checks what it found; secrets are more files it must not read.
func checkSandbox(t *testing.T, srv *jupytertest.Server, k, other core.Kernel, secrets ...string) {
	t.Helper()
	// Both kernels are up, their connection files written; other's cell,
	// in IPython's history, is written out at once (ipykernel's history
	// thread would otherwise write it later).
	const mark = "a-cell-of-the-other-kernel"
	run(t, other, "x = '"+mark+"'\nget_ipython().history_manager.writeout_cache()")
	entries, err := os.ReadDir(srv.RuntimeDir)
	if err != nil {
		t.Fatal(err)
	}
	var servers, kernels int
	for _, e := range entries {
		servers += boolInt(strings.HasPrefix(e.Name(), "jpserver-") && strings.HasSuffix(e.Name(), ".json"))
		kernels += boolInt(strings.HasPrefix(e.Name(), "kernel-"))
		secrets = append(secrets, filepath.Join(srv.RuntimeDir, e.Name()))
	}
	if servers != 1 || kernels < 2 {
		t.Fatalf("the server's runtime dir holds %v: want its jpserver-*.json and both kernels' connection files", entries)
	}
	os.Remove(filepath.Join(srv.RootDir, "kernelhost-sandbox-probe"))
	got := probeSandbox(t, k, map[string]any{
		"spec":    filepath.Join(srv.DataDir, "kernels", "python3", "kernel.json"),
		"runtime": srv.RuntimeDir,
		"secrets": secrets,
		"token":   srv.Token,
	})
	readOnly := []string{"EROFS"}
	if os.Geteuid() != 0 {
		readOnly = append(readOnly, "EACCES") // the owner check may come first
	}
	for what, res := range map[string]string{"/proc/sys/kernel/core_pattern": got.CorePattern, "/etc": got.Etc} {
		if !slices.Contains(readOnly, res) {
			t.Errorf("writing %s from a kernel: %s, want %v", what, res, readOnly)
		}
	}
	if got.Spec != "EROFS" {
		t.Errorf("writing its own kernel spec: %s, want EROFS", got.Spec)
	}
	if !slices.Equal(got.Pids, []int{1, 2}) {
		t.Errorf("the kernel sees pids %v, want only its sandbox's init and itself (1, 2)", got.Pids)
	}
	if !slices.Equal(got.Runtime, []string{got.Own}) {
		t.Errorf("the kernel sees %v in the server's runtime dir, want only its own connection file %s", got.Runtime, got.Own)
	}
	for path, res := range got.Read {
		if filepath.Base(path) != got.Own && res != "ENOENT" {
			t.Errorf("reading %s from a kernel: %s, want ENOENT (hidden)", path, res)
		}
	}
	if got.TokenInEnv {
		t.Error("the server's token is in the kernel's environment")
	}
	if got.Cwd != "ok" || got.Getcwd != srv.RootDir {
		t.Errorf("writing in its cwd %s: %s, want ok in %s", got.Getcwd, got.Cwd, srv.RootDir)
	}
	if b, err := os.ReadFile(filepath.Join(srv.RootDir, "kernelhost-sandbox-probe")); string(b) != "from the kernel" {
		t.Errorf("the file the kernel wrote in its cwd, on the host: %q, %v", b, err)
	}
	// IPython's history of every session (%history -g) holds no other
	// kernel's cells: each kernel keeps its own in memory, not in the
	// history.sqlite of the IPYTHONDIR all kernels may write.
	r := run(t, k, "h = get_ipython().history_manager\nprint([c for s, _, c in h.search('*'+'"+mark+"*') if s != h.session_number])")
	if got := r.stdout.String(); got != "[]\n" {
		t.Errorf("the other kernel's cells in this kernel's history: stdout %q, stderr %q", got, r.stderr.String())
	}
}

// probeSandbox runs sandboxProbe with params in k.
func probeSandbox(t *testing.T, k core.Kernel, params map[string]any) sandboxFound {
	t.Helper()
	b, _ := json.Marshal(params)
	literal, _ := json.Marshal(string(b)) // a JSON string is a Python string literal
	r := run(t, k, strings.Replace(sandboxProbe, "%s", string(literal), 1))
	var got sandboxFound
	if err := json.Unmarshal([]byte(r.stdout.String()), &got); err != nil {
		t.Fatalf("the probe printed %q (stderr %q): %v", r.stdout.String(), r.stderr.String(), err)
	}
	t.Logf("found: %+v", got)
	return got
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// The shipped ir spec runs IRkernel in the same sandbox, and its launcher
// stays the kernel's parent to pass the server's SIGINT in (IRkernel takes
// interrupts only as signals): a cell cannot write a sysctl, sees pids 1
// and 2 only and its own connection file in the runtime dir; an interrupt
// aborts a sleeping cell and the kernel runs the next.
func TestShippedRKernelSpecIsSandboxed(t *testing.T) {
	t.Parallel()
	srv := startRServer(t) // a server of its own: its kernel specs are changed
	if err := jupyterdeploy.WriteKernelSpecs(srv.DataDir); err != nil {
		t.Fatal(err)
	}
	tr := newTransport(t, srv, nil)
	if name, _ := tr.kernelName("r"); name != "ir" {
		t.Fatalf("R runs on kernel spec %q, want the shipped ir", name)
	}
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	k, err := tr.StartKernel(ctx, core.KernelSpec{Language: "r"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = k.Shutdown(ctx)
	})
	probe := fmt.Sprintf(`w <- tryCatch({v <- readLines("/proc/sys/kernel/core_pattern"); writeLines(v, "/proc/sys/kernel/core_pattern"); "written"},
  error = function(e) conditionMessage(e), warning = function(w) conditionMessage(w))
cat(w, "\n")
cat(sort(as.integer(grep("^[0-9]+$", list.files("/proc"), value = TRUE))), "\n")
cat(list.files(%q), "\n")`, srv.RuntimeDir)
	lines := strings.Split(run(t, k, probe).stdout.String(), "\n")
	if len(lines) < 3 || !strings.Contains(lines[0], "Read-only file system") || strings.TrimSpace(lines[1]) != "1 2" ||
		!strings.HasPrefix(lines[2], "kernel-") || strings.Count(strings.TrimSpace(lines[2]), " ") != 0 {
		t.Fatalf("the probe found %q: want the sysctl read-only, pids 1 2, and only its own connection file", lines)
	}

	id := send(t, k, "cat('sleeping\\n'); Sys.sleep(60)")
	waitStream(t, k, id, "sleeping")
	if err := k.Interrupt(ctx); err != nil {
		t.Fatal(err)
	}
	if r := collectWithin(t, k, id, 20*time.Second); r.reply.Status != core.ReplyAborted && r.reply.Status != core.ReplyError {
		t.Errorf("the interrupted cell's reply: %+v", r.reply)
	}
	if r := run(t, k, "cat('next\\n')"); r.stdout.String() != "next\n" {
		t.Errorf("after the interrupt: %q", r.stdout.String())
	}
}
