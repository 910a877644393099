package jupyter_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kernelhost/kernelhost/hostcmd/internal/hosttest"
	"github.com/kernelhost/kernelhost/hostcmd/server"
	"github.com/kernelhost/kernelhost/hostcmd/settings"
	"github.com/kernelhost/kernelhost/internal/testkit"
	"github.com/kernelhost/kernelhost/transports/jupyter/jupytertest"
)

// forward accepts on l and pipes every connection to target, until the test
// ends.
func forward(t *testing.T, l net.Listener, target string) {
	var wg sync.WaitGroup
	t.Cleanup(func() {
		l.Close()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			b, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			wg.Add(2)
			pipe := func(dst, src net.Conn) {
				defer wg.Done()
				_, _ = io.Copy(dst, src)
				dst.Close()
				src.Close()
			}
			go pipe(b, c)
			go pipe(c, b)
		}
	}()
}

// With -default-start-retry, a gateway that is not up yet when the host
// starts (the plugin's configure cannot reach it) is waited for: /health
// says so meanwhile, and the host starts once it comes up.
func TestJupyterGatewayUpAfterTheHost(t *testing.T) {
	t.Parallel()
	srv := jupytertest.Shared(t)
	gateway := testkit.FreeAddr(t) // nothing listens there yet
	var log testkit.SyncBuffer
	cfg := settings.Config{
		Addr:              testkit.FreeAddr(t),
		DefaultCwd:        t.TempDir(),
		Logger:            slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelWarn})),
		DefaultStartRetry: 2 * time.Minute,
	}
	hosttest.JupyterViaPlugin(srv)(&cfg)
	cfg.SetTransportSetting("jupyter-url", "http://"+gateway+"/")

	type started struct {
		h   *server.Host
		err error
	}
	done := make(chan started, 1)
	go func() {
		h, err := server.Start(context.Background(), cfg)
		done <- started{h, err}
	}()
	for deadline := time.Now().Add(60 * time.Second); !strings.Contains(log.String(), "the transport plugin did not start; retrying"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no retry logged:\n%s", log.String())
		}
	}
	if !strings.Contains(log.String(), "connection refused") {
		t.Errorf("the retry does not say why:\n%s", log.String())
	}
	if strings.Contains(log.String(), `{"@`) {
		t.Errorf("the plugin's JSON log lines in the error:\n%s", log.String())
	}
	resp, err := http.Get("http://" + cfg.Addr + "/health")
	if err != nil {
		t.Fatalf("/health while the plugin's start is retried: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "transport plugin") || !strings.Contains(string(body), "connection refused") {
		t.Errorf("/health while the plugin's start is retried: %s %q, want 503 saying what it waits for", resp.Status, body)
	}
	l, err := net.Listen("tcp", gateway)
	if err != nil {
		t.Fatal(err)
	}
	forward(t, l, strings.TrimSuffix(strings.TrimPrefix(srv.URL, "http://"), "/"))
	var s started
	select {
	case s = <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("the host did not start once the gateway was up")
	}
	if s.err != nil {
		t.Fatalf("start: %v", s.err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = s.h.Shutdown(ctx)
	}()
	h := hosttest.Attach(t, s.h, cfg.DefaultCwd)
	if out := hosttest.Stdout(h.Run(map[string]any{"code": "print(1 + 1)"})); out != "2\n" {
		t.Fatalf("1 + 1: %q", out)
	}
}

// A kernel that dies natively (a segfault) under an execution: the
// execution ends with KernelDied within seconds, the death is logged once and
// counted in /metrics, and the next execution runs on the fresh kernel,
// saying the old one was replaced.
func TestJupyterKernelDeathLoggedAndCounted(t *testing.T) {
	t.Parallel()
	srv := jupytertest.Shared(t)
	var log testkit.SyncBuffer
	h := hosttest.Start(t, hosttest.JupyterInProcess(t, srv), func(c *settings.Config) {
		c.Logger = slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelWarn}))
	})
	if out := hosttest.Stdout(h.Run(map[string]any{"code": "x = 1\nprint(x)"})); out != "1\n" {
		t.Fatalf("x: %q", out)
	}
	began := time.Now()
	lines := h.Run(map[string]any{"code": "import os; os.kill(os.getpid(), 11)"})
	took := time.Since(began)
	t.Logf("FIGURE the segfaulting execution ended after %v", took)
	if errs := hosttest.OfType(lines, "error"); len(errs) != 1 || errs[0].Str("name") != "KernelDied" {
		t.Fatalf("the segfaulting execution: %v, want KernelDied", lines)
	}
	if took > 15*time.Second { // the server's restarter, not a timeout of ours
		t.Errorf("the death was reported after %v", took)
	}
	lines = h.Run(map[string]any{"code": "print('x' in globals())"})
	if out := hosttest.Stdout(lines); out != "False\n" {
		t.Fatalf("after the death: %q", out)
	}
	if n := strings.Count(log.String(), "the context's kernel died"); n != 1 {
		t.Errorf("the death logged %d times, want once:\n%s", n, log.String())
	}
	if got := hosttest.Metrics(t, h, nil).Value(t, "kernelhost_kernels_replaced_total", "reason", "died"); got != 1 {
		t.Errorf("kernelhost_kernels_replaced_total{reason=died} = %v, want 1", got)
	}
}

// A default context whose start the gateway answers only after the host
// gave it up (Kernel Gateway busy at start-up) leaves no kernel behind,
// through the plugin too: the host waits for the plugin to delete what its
// open start is answered with before it kills it, instead of go-plugin's
// 2 s grace (the kernel stayed on the gateway while the error said it was
// deleted).
func TestJupyterStartGivenUpAtStartupLeavesNoKernel(t *testing.T) {
	t.Parallel()
	srv := jupytertest.Start(t)
	// The gateway answers the start 9 s after it came: after the 3 s start
	// timeout and the shutdown that follows it (begun at ~3-4 s, killed at
	// ~5-6 s before), well within the plugin's 10 s wait for open starts.
	const hold = 9 * time.Second
	backend, _ := url.Parse(srv.URL)
	proxy := httputil.NewSingleHostReverseProxy(backend)
	held, answered := make(chan struct{}, 1), make(chan struct{})
	gateway := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/api/kernels") {
			proxy.ServeHTTP(w, r)
			return
		}
		// The slow gateway (the time is the behaviour) starts the kernel
		// whether its client is still there or not.
		held <- struct{}{}
		time.Sleep(hold)
		body, _ := io.ReadAll(r.Body)
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"api/kernels", bytes.NewReader(body))
		req.Header = r.Header.Clone()
		resp, err := http.DefaultClient.Do(req)
		close(answered)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		w.Header().Set("Content-Type", resp.Header.Get("Content-Type"))
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, resp.Body)
	}))
	t.Cleanup(gateway.Close)
	cfg := settings.Config{Addr: "127.0.0.1:0", DefaultCwd: t.TempDir(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	hosttest.JupyterViaPlugin(srv)(&cfg)
	cfg.SetTransportSetting("jupyter-url", gateway.URL+"/")
	cfg.SetTransportSetting("jupyter-start-timeout", "3s")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	h, err := server.Start(ctx, cfg)
	if err == nil {
		h.Shutdown(ctx)
		t.Fatal("the host started though its default context's start was held past the start timeout")
	}
	select {
	case <-held:
	default:
		t.Fatalf("no start reached the gateway: %v", err)
	}
	select { // the kernel is on the server from here until deleted
	case <-answered:
	case <-time.After(time.Minute):
		t.Fatal("the gateway's late answer never came")
	}
	if ks := jupyterKernels(t, srv); len(ks) != 0 {
		t.Errorf("kernels left on the server after the host gave up (%v): %v", err, ks)
	}
}

// jupyterKernels lists the ids of the kernels on srv.
func jupyterKernels(t *testing.T, srv *jupytertest.Server) []string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"api/kernels", nil)
	req.Header.Set("Authorization", "token "+srv.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var ks []struct {
		ID string `json:"id"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&ks); err != nil {
		t.Fatalf("GET api/kernels: %s: %v", resp.Status, err)
	}
	ids := make([]string, len(ks))
	for i, k := range ks {
		ids[i] = k.ID
	}
	return ids
}
