// Package jupytertest starts a real Jupyter Server (or Kernel Gateway) for
// tests: on a free loopback port, with its own temporary root, config, data
// and runtime dirs, token auth, and the IOPub rate limits disabled so no
// output is dropped.
package jupytertest

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	jupyterdeploy "github.com/kernelhost/kernelhost/deploy/jupyter"

	"github.com/kernelhost/kernelhost/internal/testkit"
)

// StartTimeout bounds how long Start waits for the server to answer. A
// start takes seconds; the bound leaves room for a package's parallel tests
// starting their servers and gateways at once on a loaded 2-core machine.
const StartTimeout = 3 * time.Minute

// Server is a running jupyter server.
type Server struct {
	URL     string // base URL, ending in "/"
	Token   string
	RootDir string
	DataDir string // its JUPYTER_DATA_DIR (kernel specs in kernels/)
	// RuntimeDir is its JUPYTER_RUNTIME_DIR: its jpserver-*.json (with the
	// token), cookie secret and its kernels' connection files.
	RuntimeDir string
	// ConfigDir is its JUPYTER_CONFIG_DIR.
	ConfigDir string
	// Pid is the server process's (a test may stop it: SIGSTOP).
	Pid int
	dir string // holds the above and its other Jupyter dirs

	mu     sync.Mutex
	stderr strings.Builder
}

// Log returns what the server wrote to stderr so far.
func (s *Server) Log() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stderr.String()
}

// Args returns the command-line arguments Start passes to jupyter-server
// (without extra), for a server on port with token serving root.
func Args(port int, token, root string) []string {
	args := []string{
		"--no-browser",
		"--ip=127.0.0.1",
		"--port=" + strconv.Itoa(port),
		"--port-retries=0",
		"--ServerApp.token=" + token,
		"--ServerApp.root_dir=" + root,
		// No silent loss: the server would otherwise drop IOPub output above
		// 1,000 msg/s (and 1 MB/s), saying so only on its stderr.
		"--ServerApp.iopub_msg_rate_limit=0",
		"--ServerApp.iopub_data_rate_limit=0",
		// Skip the rate-limit bookkeeping altogether: it parses every IOPub
		// message, and a server that falls behind the kernel loses messages
		// in ZeroMQ's queues (see docs/jupyter.md).
		"--ServerApp.limit_rate=False",
		// A kernel that dies (a segfault in a native library) is found by
		// the server's restarter, which polls the kernel's process every
		// time_to_dead seconds (3 by default) and then reports restarting:
		// a poll of a child process is cheap, so look four times a second
		// and the death is reported within a second.
		"--KernelRestarter.time_to_dead=0.25",
	}
	if os.Geteuid() == 0 {
		args = append(args, "--allow-root")
	}
	return args
}

// WriteKernelSpec writes the kernel specs of deploy/jupyter/kernels into
// dataDir/kernels (a JUPYTER_DATA_DIR, which the server searches before the
// system's): "python3" is the system's ipykernel on /usr/bin/python3 with
// unbounded IOPub queues and "ir" IRkernel (where installed), each kernel
// in its sandbox, as `make run-jupyter` installs them too, except that
// their kernels may also write os.TempDir(): the tests give
// kernels directories of t.TempDir() to work in and share files with them
// there, which the sandbox's own /tmp would hide. A test of the spec as
// shipped writes it again with jupyterdeploy.WriteKernelSpecs.
func WriteKernelSpec(dataDir string) error {
	if err := jupyterdeploy.WriteKernelSpecs(dataDir); err != nil {
		return err
	}
	specs, err := filepath.Glob(filepath.Join(dataDir, "kernels", "*", "kernel.json"))
	if err != nil {
		return err
	}
	for _, spec := range specs {
		if err := addWritable(spec, os.TempDir()); err != nil {
			return err
		}
	}
	return nil
}

// addWritable adds "--writable dir" to the sandbox launcher's options in
// the kernel spec file spec (before the "--" that ends them).
func addWritable(spec, dir string) error {
	b, err := os.ReadFile(spec)
	if err != nil {
		return err
	}
	var ks map[string]any
	if err := json.Unmarshal(b, &ks); err != nil {
		return fmt.Errorf("%s: %w", spec, err)
	}
	argv, _ := ks["argv"].([]any)
	end := slices.Index(argv, any("--"))
	if end < 0 {
		return fmt.Errorf("%s: the argv has no \"--\" after the sandbox launcher's options", spec)
	}
	ks["argv"] = slices.Insert(argv, end, any("--writable"), any(dir))
	if b, err = json.MarshalIndent(ks, "", "  "); err != nil {
		return err
	}
	return os.WriteFile(spec, b, 0o644)
}

// PythonLauncher is the launcher of the python kernel kernelhost ships
// (deploy/jupyter/kernels/python3/launch.py, in the server's data dir), for
// a kernel spec of a test's own: `/usr/bin/python3 LAUNCHER -f
// {connection_file}` starts the kernel users get, without its sandbox
// (with its history in memory: kernels of one server sharing a history
// file print errors into cells).
func (s *Server) PythonLauncher() string {
	return filepath.Join(s.DataDir, "kernels", "python3", "launch.py")
}

// AddKernelSpec writes a kernel spec called name into the server's data dir;
// the server sees it at its next kernel start or spec listing. argv is the
// spec's command line ({connection_file} and {resource_dir} are substituted
// by the server). The spec file appears whole (written aside, then renamed):
// a listing by a test that shares the server never reads half of it.
func (s *Server) AddKernelSpec(name, language string, argv []string) error {
	dir := filepath.Join(s.DataDir, "kernels", name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	spec, err := json.MarshalIndent(map[string]any{
		"argv":         argv,
		"display_name": name,
		"language":     language,
	}, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, ".kernel.json.tmp")
	if err := os.WriteFile(tmp, spec, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, "kernel.json"))
}

// overflowingLauncher is ipykernel with a 1-message IOPub queue and a small
// socket buffer: a burst of messages overflows it at once, and ZeroMQ drops
// what does not fit, as it does with the default queue on a loaded machine.
const overflowingLauncher = `import zmq
_init = zmq.Context.__init__
def _init_tiny(self, *args, **kwargs):
    _init(self, *args, **kwargs)
    self.setsockopt(zmq.SNDHWM, 1)
    self.setsockopt(zmq.SNDBUF, 4096)
zmq.Context.__init__ = _init_tiny
from ipykernel import kernelapp
kernelapp.launch_new_instance()
`

// UseOverflowingPython makes the server's python3 kernel spec one whose
// IOPub queue overflows (see overflowingLauncher), for tests of lost
// messages. Kernels started before keep theirs.
func (s *Server) UseOverflowingPython() error {
	return s.AddOverflowingPython("python3")
}

// AddOverflowingPython adds a Python kernel spec called name whose IOPub
// queue overflows (see overflowingLauncher); a transport starts it for
// "python" with Config.KernelNames. The server's other specs stay, so a
// test may add it to a server others share, under a name of its own.
func (s *Server) AddOverflowingPython(name string) error {
	return s.AddKernelSpec(name, "python", []string{"/usr/bin/python3", "-c", overflowingLauncher, "-f", "{connection_file}"})
}

// Binary finds the server: jupyter-server, or "jupyter server".
func Binary() (path string, pre []string, err error) {
	if p, err := exec.LookPath("jupyter-server"); err == nil {
		return p, nil, nil
	}
	if p, err := exec.LookPath("jupyter"); err == nil {
		if exec.Command(p, "server", "--version").Run() == nil {
			return p, []string{"server"}, nil
		}
	}
	return "", nil, fmt.Errorf("jupyter-server is not installed (apt-get install jupyter-server python3-ipykernel)")
}

// Start starts a server for the test and stops it (and its kernels) in
// tb.Cleanup. extra arguments are added to Args, replacing those they set again.
func Start(tb testing.TB, extra ...string) *Server {
	tb.Helper()
	s, stop, err := start(extra...)
	return s.own(tb, "jupyter server", stop, err)
}

// start launches a jupyter server with Args and extra; stop ends it and
// removes its dirs.
func start(extra ...string) (s *Server, stop func(), err error) {
	bin, pre, err := Binary()
	if err != nil {
		return nil, nil, missingError{err}
	}
	return onAFreePort(func() (*Server, func(), error) {
		s, port, err := newServer()
		if err != nil {
			return nil, nil, err
		}
		args := append(slices.Clip(pre), override(Args(port, s.Token, s.RootDir), extra)...)
		return s.launch("jupyter server", exec.Command(bin, args...), "is running at")
	})
}

// onAFreePort runs start, a server's launch on a port freePort found, again
// (up to twice more) when another process took that port before the server
// bound it: the servers run with no port retries of their own (the tests
// must know the port), and the tests of a package start servers side by side.
func onAFreePort(start func() (*Server, func(), error)) (s *Server, stop func(), err error) {
	for range 3 {
		s, stop, err = start()
		if err == nil || !portTaken(err) {
			return s, stop, err
		}
	}
	return s, stop, err
}

// portTaken says whether a launch failed because its port was taken, as
// Jupyter Server and Kernel Gateway say it with no port retries.
func portTaken(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "is not available") || strings.Contains(msg, "is already in use")
}

// own hands the server that start or launch made (or their error) to tb:
// an error fails tb (a missing dependency goes through testkit.Missing), and
// the server stops in tb.Cleanup, its log printed if tb failed.
func (s *Server) own(tb testing.TB, what string, stop func(), err error) *Server {
	tb.Helper()
	if err != nil {
		if m, ok := err.(missingError); ok {
			testkit.Missing(tb, m.error)
		}
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		stop()
		if tb.Failed() {
			tb.Logf("%s log:\n%s", what, s.Log())
		}
	})
	return s
}

// missingError is a dependency that is not installed: a test skips on it,
// or fails under CI (testkit.Missing).
type missingError struct{ error }

// sharedServer is one server of Shared or SharedAs.
type sharedServer struct {
	once sync.Once
	s    *Server
	err  error
}

var shared struct {
	mu sync.Mutex
	by map[string]*sharedServer // by SharedAs's key; Shared's is ""
}

// Shared returns the test binary's shared server, a Start with no extra
// arguments that the first caller launches and that stops once all the
// package's tests are done (testkit.AfterTests: the package's TestMain must
// be testkit.Main). Tests that neither change their server (its kernel
// specs, its arguments, its life) nor count all its kernels share it: they
// use kernels of their own on it, and a server start costs seconds of a
// loaded machine. A test may add a kernel spec under a name of its own
// (AddKernelSpec), and count the kernels it started (by id, or those
// started through a proxy of its own). If the server failed to start, every caller fails with the same
// error. A failing caller prints the server's log so far.
func Shared(tb testing.TB) *Server {
	tb.Helper()
	return SharedAs(tb, "")
}

// SharedAs is Shared for the tests that share a server of their own, one
// per key: tests whose bounds need a server that other tests do not keep
// busy (a 9 MiB request takes a loaded server seconds to parse, and it
// answers nobody meanwhile), and that count only the kernels they started,
// share one with each other instead of starting one each.
func SharedAs(tb testing.TB, key string) *Server {
	tb.Helper()
	shared.mu.Lock()
	if shared.by == nil {
		shared.by = map[string]*sharedServer{}
	}
	sh := shared.by[key]
	if sh == nil {
		sh = &sharedServer{}
		shared.by[key] = sh
	}
	shared.mu.Unlock()
	sh.once.Do(func() {
		var stop func()
		sh.s, stop, sh.err = start()
		if sh.err == nil {
			testkit.AfterTests(stop)
		}
	})
	if sh.err != nil {
		if m, ok := sh.err.(missingError); ok {
			testkit.Missing(tb, m.error)
		}
		tb.Fatal(sh.err)
	}
	s := sh.s
	tb.Cleanup(func() {
		if tb.Failed() {
			tb.Logf("shared jupyter server %q log:\n%s", key, s.Log())
		}
	})
	return s
}

// KernelGatewayDir is where the unmodified Kernel Gateway 2.5.2 the tests run
// lives, relative to the repository's root (see ../shared/third_party/README.md).
const KernelGatewayDir = "../shared/third_party/kernel_gateway-2.5.2"

// KernelGatewayArgs returns Kernel Gateway's command-line arguments (after
// "-m kernel_gateway") for a gateway on port; the token goes in its
// environment (KG_AUTH_TOKEN).
func KernelGatewayArgs(port int) []string {
	return []string{
		"--KernelGatewayApp.ip=127.0.0.1",
		"--KernelGatewayApp.port=" + strconv.Itoa(port),
		"--KernelGatewayApp.port_retries=0",
		// GET api/kernels answers 403 without it: the transport lists the
		// kernels to find one created after its start was abandoned.
		"--JupyterWebsocketPersonality.list_kernels=True",
		// A kernel's death reported within about a second, as Args, but
		// not four times a second: Kernel Gateway's kernel manager is the
		// blocking one, whose every poll (is_alive) re-enters the event
		// loop through nest_asyncio, and an HTTP request in flight on a
		// connection older than the gateway's first kernel start can be
		// lost when it does ("Cannot enter into task" in its log).
		"--KernelRestarter.time_to_dead=1",
	}
}

// StartKernelGateway starts Jupyter Kernel Gateway 2.5.2 (pure Python, on
// Debian's jupyter-server, notebook and ipykernel under /usr/bin/python3)
// with the same kernel specs, token auth and dirs as Start, and stops it in
// tb.Cleanup. extra arguments (e.g. the MappingKernelManager's culling) are
// added to KernelGatewayArgs, replacing those they set again.
func StartKernelGateway(tb testing.TB, extra ...string) *Server {
	tb.Helper()
	s, stop, err := startKernelGateway(extra...)
	return s.own(tb, "kernel gateway", stop, err)
}

// StartKernelGateways starts n gateways as StartKernelGateway does, at once:
// a gateway's start is seconds of Python imports, and n of them overlap.
func StartKernelGateways(tb testing.TB, n int, extra ...string) []*Server {
	tb.Helper()
	type started struct {
		s    *Server
		stop func()
		err  error
	}
	all := make([]started, n)
	var wg sync.WaitGroup
	for i := range all {
		wg.Go(func() {
			s, stop, err := startKernelGateway(extra...)
			all[i] = started{s, stop, err}
		})
	}
	wg.Wait()
	// Every gateway that started stops with tb, before a failed start fails it.
	servers := make([]*Server, n)
	for i, g := range all {
		if g.err == nil {
			servers[i] = g.s.own(tb, "kernel gateway", g.stop, nil)
		}
	}
	for _, g := range all {
		if g.err != nil {
			g.s.own(tb, "kernel gateway", nil, g.err)
		}
	}
	return servers
}

func startKernelGateway(extra ...string) (s *Server, stop func(), err error) {
	dir := filepath.Join(repoRoot(), filepath.FromSlash(KernelGatewayDir))
	if _, err := os.Stat(filepath.Join(dir, "kernel_gateway", "__init__.py")); err != nil {
		return nil, nil, missingError{fmt.Errorf("Kernel Gateway 2.5.2 is not at %s (it is ../shared/third_party beside the repository)", dir)}
	}
	if err := kernelGatewayDeps(); err != nil {
		return nil, nil, err
	}
	return onAFreePort(func() (*Server, func(), error) {
		s, port, err := newServer()
		if err != nil {
			return nil, nil, err
		}
		cmd := exec.Command(kernelGatewayPython, append([]string{"-m", "kernel_gateway"}, override(KernelGatewayArgs(port), extra)...)...)
		cmd.Env = append(os.Environ(), "PYTHONPATH="+dir, "KG_AUTH_TOKEN="+s.Token)
		return s.launch("kernel gateway", cmd, "is available at")
	})
}

// kernelGatewayPython is the interpreter Kernel Gateway runs on.
const kernelGatewayPython = "/usr/bin/python3"

// kernelGatewayDeps checks, once per test binary (an interpreter that
// imports them costs about a CPU-second, and a package starts several
// gateways), that Kernel Gateway's Debian packages are installed.
var kernelGatewayDeps = sync.OnceValue(func() error {
	if out, err := exec.Command(kernelGatewayPython, "-c", "import notebook, jupyter_client, ipykernel").CombinedOutput(); err != nil {
		return missingError{fmt.Errorf("Kernel Gateway needs Debian's python3-notebook and python3-ipykernel (apt-get install python3-notebook python3-ipykernel): %v\n%s", err, out)}
	}
	return nil
})

// repoRoot is the repository's root, found from this file's path.
func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..")
}

// newServer makes the dirs, port and token of a server to launch.
func newServer() (*Server, int, error) {
	dir, err := os.MkdirTemp("", "jupytertest-")
	if err != nil {
		return nil, 0, err
	}
	s, port, err := func() (*Server, int, error) {
		root := filepath.Join(dir, "root")
		if err := os.Mkdir(root, 0o755); err != nil {
			return nil, 0, err
		}
		port, err := freePort()
		if err != nil {
			return nil, 0, err
		}
		tok := make([]byte, 16)
		_, _ = rand.Read(tok)
		s := &Server{
			URL:        fmt.Sprintf("http://127.0.0.1:%d/", port),
			Token:      hex.EncodeToString(tok),
			RootDir:    root,
			DataDir:    filepath.Join(dir, "data"),
			RuntimeDir: filepath.Join(dir, "runtime"),
			ConfigDir:  filepath.Join(dir, "config"),
			dir:        dir,
		}
		if err := WriteKernelSpec(s.DataDir); err != nil {
			return nil, 0, err
		}
		return s, port, nil
	}()
	if err != nil {
		os.RemoveAll(dir)
		return nil, 0, err
	}
	return s, port, nil
}

// freePort is a loopback port nothing listens on (testkit.FreePort without a test).
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// launch runs cmd as the server s (its own process group and Jupyter dirs),
// waits until its log has ready and checks that it has a Python kernel
// spec. stop ends the server and its kernels and removes its dirs; on an
// error, launch has done that already.
func (s *Server) launch(what string, cmd *exec.Cmd, ready string) (_ *Server, stop func(), err error) {
	s.prepare(cmd)
	pr, pw, err := os.Pipe()
	if err != nil {
		os.RemoveAll(s.dir)
		return nil, nil, err
	}
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		pr.Close()
		pw.Close()
		os.RemoveAll(s.dir)
		return nil, nil, fmt.Errorf("start %s: %v", what, err)
	}
	pw.Close()
	s.Pid = cmd.Process.Pid
	running, logDone := s.collectLog(pr, ready)
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stop = func() {
		halt(cmd, exited, pr, logDone)
		os.RemoveAll(s.dir)
	}

	select {
	case <-running:
	case err := <-exited:
		exited <- err // for halt
		stop()
		return nil, nil, fmt.Errorf("%s exited before it was ready: %v\n%s", what, err, s.Log())
	case <-time.After(StartTimeout):
		stop()
		return nil, nil, fmt.Errorf("%s not ready after %v\n%s", what, StartTimeout, s.Log())
	}
	if err := s.checkPython(); err != nil {
		stop()
		return nil, nil, err
	}
	return s, stop, nil
}

// prepare makes cmd run in s's root dir with s's own Jupyter dirs, in a
// process group of its own (so that cleanup also reaches the kernels it
// started), killed when the test process dies.
func (s *Server) prepare(cmd *exec.Cmd) {
	cmd.Dir = s.RootDir
	if cmd.Env == nil {
		cmd.Env = os.Environ()
	}
	cmd.Env = append(cmd.Env,
		"JUPYTER_CONFIG_DIR="+s.ConfigDir,
		"JUPYTER_DATA_DIR="+s.DataDir,
		"JUPYTER_RUNTIME_DIR="+s.RuntimeDir,
		"IPYTHONDIR="+filepath.Join(s.dir, "ipython"),
		"PYDEVD_DISABLE_FILE_VALIDATION=1",
	)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	setDeathSignal(cmd.SysProcAttr)
}

// collectLog keeps the server's output (s.Log) until pr ends. running is
// closed at the first line that contains ready, logDone when pr is drained.
func (s *Server) collectLog(pr io.Reader, ready string) (running, logDone chan struct{}) {
	running, logDone = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(logDone)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		announced := false
		for sc.Scan() {
			line := sc.Text()
			s.mu.Lock()
			s.stderr.WriteString(line + "\n")
			s.mu.Unlock()
			if !announced && strings.Contains(line, ready) {
				announced = true
				close(running)
			}
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	return running, logDone
}

// checkPython makes sure the server answers with the token and has a Python
// kernel spec (python3-ipykernel).
func (s *Server) checkPython() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+"api/kernelspecs", nil)
	req.Header.Set("Authorization", "token "+s.Token)
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return fmt.Errorf("jupyter server: GET api/kernelspecs: %v", err)
	}
	defer resp.Body.Close()
	var specs struct {
		Kernelspecs map[string]struct {
			Spec struct {
				Language string `json:"language"`
			} `json:"spec"`
		} `json:"kernelspecs"`
	}
	if resp.StatusCode != 200 {
		return fmt.Errorf("jupyter server: GET api/kernelspecs: %s", resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&specs); err != nil {
		return fmt.Errorf("jupyter server: GET api/kernelspecs: %v", err)
	}
	for _, ks := range specs.Kernelspecs {
		if strings.EqualFold(ks.Spec.Language, "python") {
			return nil
		}
	}
	return missingError{errors.New("the jupyter server has no Python kernel spec (apt-get install python3-ipykernel)")}
}

// halt asks the server to shut down (it then stops its kernels), and kills the
// whole process group if it has not exited in time.
func halt(cmd *exec.Cmd, exited chan error, pr *os.File, logDone chan struct{}) {
	pgid := cmd.Process.Pid
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(15 * time.Second):
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-exited
	}
	// Kernels left behind would hold the log pipe open.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	select {
	case <-logDone:
	case <-time.After(5 * time.Second):
		pr.Close()
		<-logDone
	}
	pr.Close()
}

// override appends extra to args, dropping the args whose "--name=" extra sets
// again (traitlets refuses a setting given twice).
func override(args, extra []string) []string {
	var out []string
	for _, a := range args {
		name, _, _ := strings.Cut(a, "=")
		if !slices.ContainsFunc(extra, func(e string) bool { return strings.HasPrefix(e, name+"=") }) {
			out = append(out, a)
		}
	}
	return append(out, extra...)
}
