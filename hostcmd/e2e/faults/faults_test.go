package faults_test

// The fault suite (make test-faults): real processes on loopback, one fault
// each. After every fault the host answers /health, the next execution on
// every context works, and, when the test ends, no goroutine of the test's
// is left (goleak against the test's own baseline) and no process the test
// started is left (the /proc tree under the test binary; their hosts have
// the default -context-network, hosttest.DefaultNetwork, so each context's
// pasta is among what must go). Those checks see
// the whole test binary, so a fault test is never a parallel test: go test
// runs the package's other tests, which are, only after it. make test runs
// this package whole as a part of its own (test-go-faults), beside the rest
// of the tests. Lines starting with "FIGURE" are the figures of
// docs/reliability.md.

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/kernelhost/kernelhost/hostcmd/internal/hosttest"
	"github.com/kernelhost/kernelhost/hostcmd/settings"
	"github.com/kernelhost/kernelhost/internal/testkit"
	"github.com/kernelhost/kernelhost/transports/jupyter"
	"github.com/kernelhost/kernelhost/transports/jupyter/jupytertest"
)

// settleKernelDied runs one execution in each context and accepts, besides
// success, a KernelDied error line: the kernel was found gone as it ran.
func settleKernelDied(h *hosttest.Host, t *testing.T) {
	t.Helper()
	for _, c := range h.Contexts() {
		code := "1"
		if c.Language == "bash" {
			code = "true"
		}
		for _, e := range hosttest.OfType(h.Run(map[string]any{"code": code, "context_id": c.ID}), "error") {
			if e.Str("name") != "KernelDied" {
				t.Fatalf("%s context %s after the fault: error %s: %s", c.Language, c.ID, e.Str("name"), e.Str("value"))
			}
		}
	}
}

// killMidExecution starts a long execution on id, kills pid with SIGKILL
// once it printed, and returns the error line the client saw and how long
// the stream took to end after the kill.
func killMidExecution(h *hosttest.Host, t *testing.T, id string, pid int) (hosttest.Line, time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s := h.Start(ctx, map[string]any{"code": "import time\nprint('running', flush=True)\ntime.sleep(60)", "context_id": id})
	s.Until("stdout")
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill -9 %d: %v", pid, err)
	}
	began := time.Now()
	rest := s.Rest()
	return hosttest.OnlyError(t, rest), time.Since(began)
}

// kill -9 of the interpreter of one context mid-execution (subprocess
// transport, in-process): the stream ends with KernelDied, the context gets a
// new interpreter at its next execution, the other contexts keep their state.
func TestFaultInterpreterKilled(t *testing.T) {
	hosttest.NoLeftovers(t)
	h := hosttest.Start(t, hosttest.DefaultNetwork)
	victim := h.CreateContext(`{}`)
	other := h.CreateContext(`{"language":"bash"}`)
	hosttest.NoError(t, h.Run(map[string]any{"code": "kept = 'state'"}))
	hosttest.NoError(t, h.Run(map[string]any{"code": "export KEPT=state", "context_id": other.ID}))
	pid := hosttest.PidOf(t, h, victim.ID)

	e, took := killMidExecution(h, t, victim.ID, pid)
	if e.Str("name") != "KernelDied" {
		t.Fatalf("error line %v, want KernelDied", e)
	}
	testkit.AwaitGone(t, "the killed interpreter", 30*time.Second, pid)
	began := time.Now()
	hosttest.Recovered(t, h)
	hosttest.Figure(t, "stream ended %s after the kill with %s: %q; next execution on every context ok after %s",
		took.Round(time.Millisecond), e.Str("name"), e.Str("value"), time.Since(began).Round(time.Millisecond))
	if got := hosttest.MainResult(t, h.Run(map[string]any{"code": "kept"})); got != "state" {
		t.Fatalf("the default context lost its state: %q", got)
	}
	if got := hosttest.Stdout(h.Run(map[string]any{"code": "echo $KEPT", "context_id": other.ID})); got != "state\n" {
		t.Fatalf("the bash context lost its state: %q", got)
	}
	if newPID := hosttest.PidOf(t, h, victim.ID); newPID == pid {
		t.Fatalf("the context still reports the killed pid %d", pid)
	}
}

// kill -9 of the transport plugin mid-execution: every context's interpreter
// goes with it; the plugin restarts and every context works again.
func TestFaultPluginKilled(t *testing.T) {
	hosttest.NoLeftovers(t)
	h := hosttest.Start(t, hosttest.DefaultNetwork, hosttest.ViaPlugin, hosttest.WithSmallForkTemplate) // the template and the contexts' pasta go too
	extra := h.CreateContext(`{"language":"bash"}`)
	id := h.DefaultID("python")
	py := hosttest.PidOf(t, h, id)
	plugin := h.PluginPID()

	e, took := killMidExecution(h, t, id, plugin)
	if !strings.Contains(e.Str("value"), "died") {
		t.Fatalf("error line %v, want one saying the kernel died", e)
	}
	began := time.Now()
	hosttest.Recovered(t, h)
	hosttest.Figure(t, "stream ended %s after the kill with %s: %q; plugin restarted and every context ok after %s",
		took.Round(time.Millisecond), e.Str("name"), e.Str("value"), time.Since(began).Round(time.Millisecond))
	testkit.AwaitGone(t, "the killed plugin", 30*time.Second, plugin)
	testkit.AwaitGone(t, "the interpreter of the killed plugin", 30*time.Second, py)
	if now := h.PluginPID(); now == 0 || now == plugin {
		t.Fatalf("plugin pid %d after the restart, was %d", now, plugin)
	}
	_ = extra
}

// jupyterServer is a Jupyter Server the test can kill -9 and start again on
// the same port (jupytertest.Start cannot: it owns the process).
type jupyterServer struct {
	t          *testing.T
	port       int
	token, dir string
	cmd        *exec.Cmd
	done       chan struct{}
}

func startJupyter(t *testing.T) *jupyterServer {
	t.Helper()
	if _, _, err := jupytertest.Binary(); err != nil {
		t.Skip(err)
	}
	s := &jupyterServer{t: t, port: testkit.FreePort(t), token: fmt.Sprintf("tok%d", rand.Int64()), dir: t.TempDir()}
	if err := os.Mkdir(filepath.Join(s.dir, "root"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := jupytertest.WriteKernelSpec(filepath.Join(s.dir, "data")); err != nil {
		t.Fatal(err)
	}
	s.start()
	t.Cleanup(s.stop)
	return s
}

func (s *jupyterServer) url() string { return fmt.Sprintf("http://127.0.0.1:%d/", s.port) }

// start runs the server and waits until it answers.
func (s *jupyterServer) start() {
	s.t.Helper()
	bin, pre, _ := jupytertest.Binary()
	cmd := exec.Command(bin, append(pre, jupytertest.Args(s.port, s.token, filepath.Join(s.dir, "root"))...)...)
	cmd.Env = append(os.Environ(),
		"JUPYTER_CONFIG_DIR="+filepath.Join(s.dir, "config"),
		"JUPYTER_DATA_DIR="+filepath.Join(s.dir, "data"),
		"JUPYTER_RUNTIME_DIR="+filepath.Join(s.dir, "runtime"),
		"IPYTHONDIR="+filepath.Join(s.dir, "ipython"),
		"PYDEVD_DISABLE_FILE_VALIDATION=1",
	)
	// Its own process group: the cleanup reaches its kernels too. Pdeathsig:
	// it dies with a killed test binary.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	log, err := os.Create(filepath.Join(s.dir, fmt.Sprintf("server-%d.log", time.Now().UnixNano())))
	if err != nil {
		s.t.Fatal(err)
	}
	defer log.Close()
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	s.cmd, s.done = cmd, make(chan struct{})
	go func() { _ = cmd.Wait(); close(s.done) }()
	deadline := time.Now().Add(jupytertest.StartTimeout)
	for {
		req, _ := http.NewRequest("GET", s.url()+"api/kernelspecs", nil)
		req.Header.Set("Authorization", "token "+s.token)
		tr := &http.Transport{}
		resp, err := (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Do(req)
		tr.CloseIdleConnections()
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		select {
		case <-s.done:
			s.t.Fatalf("jupyter server exited at start (log in %s)", s.dir)
		default:
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("jupyter server not ready after %s", jupytertest.StartTimeout)
		}
		time.Sleep(50 * time.Millisecond) // nothing to wait on but the port
	}
}

// kill9 kills the server process alone (its kernels are not signalled).
func (s *jupyterServer) kill9() {
	s.t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		s.t.Fatal(err)
	}
	<-s.done
}

func (s *jupyterServer) stop() {
	pgid := s.cmd.Process.Pid
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(15 * time.Second):
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	<-s.done
}

// jupyterHost starts a Jupyter Server and a host on it whose (in-process)
// jupyter transport goes through a TCP proxy, with short ping bounds so a
// stalled connection is noticed within a second.
func jupyterHost(t *testing.T) (*hosttest.Host, *jupyterServer, *testkit.Proxy) {
	t.Helper()
	srv := startJupyter(t)
	p := testkit.StartProxy(t, fmt.Sprintf("127.0.0.1:%d", srv.port))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tr, err := jupyter.New(ctx, jupyter.Config{
		URL: p.URL(), Token: srv.token,
		PingInterval: 300 * time.Millisecond, PongTimeout: 700 * time.Millisecond,
		ReconnectTimeout: 20 * time.Second,
	})
	if err != nil {
		t.Fatalf("jupyter transport: %v", err)
	}
	t.Cleanup(tr.Close)
	h := hosttest.Start(t, func(c *settings.Config) { c.Transport = tr })
	return h, srv, p
}

// kill -9 of a Jupyter kernel mid-execution: the server restarts it; the
// stream ends with an error line; the context works again, without state.
func TestFaultJupyterKernelKilled(t *testing.T) {
	hosttest.NoLeftovers(t)
	h, _, _ := jupyterHost(t)
	other := h.CreateContext(`{}`)
	hosttest.NoError(t, h.Run(map[string]any{"code": "kept = 'state'", "context_id": other.ID}))
	id := h.DefaultID("python")
	pid := hosttest.PidOf(t, h, id)
	e, took := killMidExecution(h, t, id, pid)
	began := time.Now()
	hosttest.Recovered(t, h)
	hosttest.Figure(t, "stream ended %s after the kill with %s: %q; every context ok after %s",
		took.Round(time.Millisecond), e.Str("name"), e.Str("value"), time.Since(began).Round(time.Millisecond))
	testkit.AwaitGone(t, "the killed kernel", 30*time.Second, pid)
	if got := hosttest.MainResult(t, h.Run(map[string]any{"code": "kept", "context_id": other.ID})); got != "state" {
		t.Fatalf("the other kernel lost its state: %q", got)
	}
}

// kill -9 of the Jupyter Server itself mid-execution, then a new server on
// the same port: the host recovers without a restart (new kernels, no state).
func TestFaultJupyterServerKilled(t *testing.T) {
	hosttest.NoLeftovers(t)
	h, srv, _ := jupyterHost(t)
	other := h.CreateContext(`{}`)
	id := h.DefaultID("python")
	kernels := []int{hosttest.PidOf(t, h, id), hosttest.PidOf(t, h, other.ID)}
	e, took := killMidExecution(h, t, id, srv.cmd.Process.Pid)
	<-srv.done
	// Its kernels end with it (their sandbox's --die-with-parent; an
	// unsandboxed kernel's parent poller notices within seconds).
	for _, k := range kernels {
		testkit.AwaitGone(t, "a kernel of the killed server", 30*time.Second, k)
	}
	// While it is down, the host answers and says what is wrong.
	status, body := h.Do("POST", "/execute", fmt.Sprintf(`{"code":"1","context_id":%q}`, other.ID))
	down := fmt.Sprintf("%d", status)
	if status == 200 {
		if errs := hosttest.OfType(hosttest.ParseStream(t, []byte(body)), "error"); len(errs) == 1 {
			down += " + error line " + errs[0].Str("name") + ": " + errs[0].Str("value")
		}
	} else {
		down += " " + body
	}
	if s, _ := h.Do("GET", "/health", ""); s != 200 {
		t.Fatalf("health with the Jupyter Server down: %d", s)
	}
	restart := time.Now()
	srv.start()
	serverUp := time.Since(restart)
	began := time.Now()
	// An execution sent while the transport is still finding its kernel gone
	// on the new server (its reconnect gets a 404) ends with KernelDied, the
	// code not run, as the contract says; the next one runs on a new kernel.
	settleKernelDied(h, t)
	hosttest.Recovered(t, h)
	hosttest.Figure(t, "stream ended %s after the kill with %s: %q; while down, /execute gave %s; server back after %s; every context ok %s later",
		took.Round(time.Millisecond), e.Str("name"), e.Str("value"), down, serverUp.Round(time.Millisecond), time.Since(began).Round(time.Millisecond))
}

// The websocket to the Jupyter Server is cut (RST-free close) or stalled
// (open, nothing forwarded) mid-execution: the stream ends with a clear
// error, the context works again.
func TestFaultJupyterWebsocket(t *testing.T) {
	for _, fault := range []string{"cut", "stall"} {
		t.Run(fault, func(t *testing.T) {
			hosttest.NoLeftovers(t)
			h, _, p := jupyterHost(t)
			id := h.DefaultID("python")
			hosttest.NoError(t, h.Run(map[string]any{"code": "kept = 'state'"}))
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			s := h.Start(ctx, map[string]any{"code": "import time\nprint('running', flush=True)\ntime.sleep(3)\nprint('woke', flush=True)", "context_id": id})
			s.Until("stdout")
			if fault == "cut" {
				p.Cut()
			} else {
				p.Stall()
			}
			began := time.Now()
			rest := s.Rest()
			took := time.Since(began)
			saw := "no error line, stdout " + fmt.Sprintf("%q", hosttest.Stdout(rest))
			if errs := hosttest.OfType(rest, "error"); len(errs) > 0 {
				saw = errs[0].Str("name") + ": " + errs[0].Str("value")
			}
			began = time.Now()
			hosttest.Recovered(t, h)
			kept := hosttest.MainResult(t, h.Run(map[string]any{"code": "kept"}))
			hosttest.Figure(t, "stream ended %s after the %s with %s; every context ok after %s; state kept: %v",
				took.Round(time.Millisecond), fault, saw, time.Since(began).Round(time.Millisecond), kept == "state")
			if kept != "state" {
				t.Errorf("the kernel lost its state over a reconnect: %q", kept)
			}
		})
	}
}

// 500 clients on two contexts drop their connection at random moments of
// their stream (before it starts, while it is queued, while it runs), 25 at
// a time: the host stays healthy, every context works, nothing leaks.
func TestFaultClientsDisconnect(t *testing.T) {
	hosttest.NoLeftovers(t)
	h := hosttest.Start(t, hosttest.DefaultNetwork)
	ids := []string{h.DefaultID("python"), h.CreateContext(`{}`).ID}
	const clients, concurrent = 500, 25
	var (
		wg        sync.WaitGroup
		sem       = make(chan struct{}, concurrent)
		gotLines  atomic.Int64
		completed atomic.Int64
	)
	began := time.Now()
	for i := range clients {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rand.IntN(300))*time.Millisecond)
			defer cancel()
			body := fmt.Sprintf(`{"code":"import time\nfor i in range(30):\n    print(i, flush=True)\n    time.sleep(0.005)","context_id":%q}`, ids[i%len(ids)])
			req, _ := http.NewRequestWithContext(ctx, "POST", h.URL()+"/execute", strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			resp, err := h.Client().Do(req)
			if err != nil {
				return // dropped before the answer
			}
			defer resp.Body.Close()
			if resp.StatusCode != 200 && resp.StatusCode != 429 {
				t.Errorf("status %d", resp.StatusCode)
				return
			}
			b, err := io.ReadAll(resp.Body)
			gotLines.Add(int64(strings.Count(string(b), "\n")))
			if err == nil && resp.StatusCode == 200 {
				completed.Add(1)
			}
		})
	}
	wg.Wait()
	storm := time.Since(began)
	began = time.Now()
	hosttest.Recovered(t, h)
	hosttest.Figure(t, "%d clients (%d at a time) on %d contexts took %s; %d streams read to the end, %d lines received; every context ok %s after the last",
		clients, concurrent, len(ids), storm.Round(time.Millisecond), completed.Load(), gotLines.Load(), time.Since(began).Round(time.Millisecond))
	interpreters := 0
	for _, name := range hosttest.Descendants(os.Getpid()) {
		// Not a sandbox's bwrap and its init, nor its network stack
		// (pasta, whose executable is passt).
		if name != "bwrap" && !strings.HasPrefix(name, "passt") {
			interpreters++
		}
	}
	if n := interpreters; n != len(h.Contexts()) {
		t.Fatalf("%d interpreter processes for %d contexts: %v", n, len(h.Contexts()), hosttest.Descendants(os.Getpid()))
	}
}

// vmRSS is the test process's resident set, in bytes (0 when unknown).
func vmRSS() int64 {
	rss, _ := testkit.StatusBytes(0, "VmRSS")
	return rss
}

// A client that reads 1 byte per second from an execution writing 100 MB:
// the host's memory stays bounded by the per-execution output buffer while
// the reader lags, other contexts keep working, and the stream says what
// was dropped.
func TestFaultSlowReader(t *testing.T) {
	hosttest.NoLeftovers(t)
	const buffer = 8 << 20
	h := hosttest.Start(t, hosttest.DefaultNetwork, func(c *settings.Config) { c.MaxOutputBytes = buffer })
	other := h.CreateContext(`{}`)
	done := filepath.Join(h.Cwd(), "done") // where the sandboxed kernel may write
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	heapBefore, rssBefore := ms.HeapInuse, vmRSS()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	code := fmt.Sprintf("import sys\nline = 'x' * 1023 + '\\n'\nfor i in range(100 * 1024):\n    sys.stdout.write(line)\nsys.stdout.flush()\nopen(%q, 'w').close()", done)
	body := fmt.Sprintf(`{"code":%q}`, code)
	req, _ := http.NewRequestWithContext(ctx, "POST", h.URL()+"/execute", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := h.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	// Memory is sampled every 20 ms while the reader lags.
	var (
		peakHeap atomic.Uint64
		peakRSS  atomic.Int64
		sampling sync.WaitGroup
		stop     = make(chan struct{})
	)
	sampling.Go(func() {
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > peakHeap.Load() {
				peakHeap.Store(ms.HeapInuse)
			}
			if r := vmRSS(); r > peakRSS.Load() {
				peakRSS.Store(r)
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	})
	// 1 byte per second, for 5 s at least and until the kernel has written
	// all 100 MB.
	read := 0
	slowFor := time.Now()
	one := make([]byte, 1)
	for {
		if _, err := io.ReadFull(resp.Body, one); err != nil {
			t.Fatalf("slow read: %v", err)
		}
		read++
		if _, err := os.Stat(done); err == nil && read >= 5 {
			break
		}
		if time.Since(slowFor) > 4*time.Minute {
			t.Fatal("the kernel did not finish writing 100 MB in 4 minutes")
		}
		time.Sleep(time.Second) // the point of the test: a client this slow
	}
	slow := time.Since(slowFor)
	close(stop)
	sampling.Wait()
	// What is live now, with the buffer full and the reader still behind.
	runtime.GC()
	runtime.ReadMemStats(&ms)
	liveLagging := ms.HeapAlloc
	// The other context is not held up by the lagging stream.
	otherBegan := time.Now()
	if got := hosttest.MainResult(t, h.Run(map[string]any{"code": "6*7", "context_id": other.ID})); got != "42" {
		t.Fatalf("other context while the reader lags: %q", got)
	}
	otherTook := time.Since(otherBegan)
	rest, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	lines := hosttest.ParseStream(t, rest[strings.IndexByte(string(rest), '\n')+1:])
	var notice string
	received := 0
	for _, l := range lines {
		if l.Type() == "stderr" && strings.Contains(l.Str("text"), "were dropped") {
			notice = l.Str("text")
		}
		if l.Type() == "stdout" {
			received += len(l.Str("text"))
		}
	}
	if notice == "" {
		t.Fatalf("no drop notice in the stream (%d stdout bytes of 100 MB arrived)", received)
	}
	hosttest.Figure(t, "read %d bytes at 1 byte/s over %s while the kernel wrote 100 MB; heap in use %d MB -> peak %d MB, live after GC while lagging %d MB, RSS %d MB -> peak %d MB (buffer %d MB); other context answered in %s; then %d stdout bytes arrived and the stream said: %q",
		read, slow.Round(time.Second), heapBefore>>20, peakHeap.Load()>>20, liveLagging>>20, rssBefore>>20, peakRSS.Load()>>20, buffer>>20, otherTook.Round(time.Millisecond), received, strings.TrimSpace(notice))
	// Live: the full buffer plus what is in flight (pipe reads, encoded
	// lines, socket buffers). Peak: that plus garbage between collections
	// (GOGC 100 lets the heap double). Both far below the 100 MB written.
	if limit := heapBefore + 2*buffer; liveLagging > limit {
		t.Errorf("live heap %d MB while the reader lagged, more than %d MB: output is held beyond the buffer", liveLagging>>20, limit>>20)
	}
	if limit := heapBefore + 6*buffer; peakHeap.Load() > limit {
		t.Errorf("heap in use peaked at %d MB while the reader lagged, more than %d MB", peakHeap.Load()>>20, limit>>20)
	}
	hosttest.Recovered(t, h)
}
