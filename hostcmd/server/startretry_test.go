package server_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kernelhost/kernelhost/core"
	"github.com/kernelhost/kernelhost/hostcmd/server"
	"github.com/kernelhost/kernelhost/hostcmd/settings"
	"github.com/kernelhost/kernelhost/internal/testkit"
	"github.com/kernelhost/kernelhost/transports/subprocess"
)

// flakyStarts is a real transport whose first fails kernel starts fail, as
// a busy cluster's do.
type flakyStarts struct {
	core.Transport
	mu    sync.Mutex
	fails int
}

func (f *flakyStarts) StartKernel(ctx context.Context, spec core.KernelSpec) (core.Kernel, error) {
	f.mu.Lock()
	fail := f.fails > 0
	f.fails--
	f.mu.Unlock()
	if fail {
		return nil, errors.New("the cluster is busy")
	}
	return f.Transport.StartKernel(ctx, spec)
}

func health(addr string) (int, string) {
	resp, err := http.Get("http://" + addr + "/health")
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// A failed start of the default contexts is retried with backoff within
// -default-start-retry, and /health says what start-up waits for meanwhile;
// without it the first failure ends start-up, as before.
func TestDefaultStartRetried(t *testing.T) {
	t.Parallel()
	cfg := settings.Config{
		Addr:              testkit.FreeAddr(t),
		DefaultCwd:        t.TempDir(),
		Logger:            slog.New(slog.NewTextHandler(io.Discard, nil)),
		Transport:         &flakyStarts{Transport: subprocess.New(subprocess.Options{}), fails: 2},
		DefaultStartRetry: time.Minute,
	}
	type started struct {
		h   *server.Host
		err error
	}
	done := make(chan started, 1)
	go func() {
		h, err := server.Start(context.Background(), cfg)
		done <- started{h, err}
	}()
	var said string
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(said, "attempt 1 failed: "); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("/health never said why start-up waits; last %q", said)
		}
		var status int
		if status, said = health(cfg.Addr); status != 0 && status != http.StatusServiceUnavailable {
			t.Fatalf("/health during start-up: %d %q", status, said)
		}
	}
	if !strings.Contains(said, "the cluster is busy") || !strings.Contains(said, "waiting to retry the default contexts") {
		t.Errorf("/health while waiting: %q", said)
	}
	var s started
	select {
	case s = <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("start-up did not finish after the starts succeeded")
	}
	if s.err != nil {
		t.Fatalf("start after two failures: %v", s.err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = s.h.Shutdown(ctx)
	}()
	if status, body := health(cfg.Addr); status != http.StatusOK {
		t.Errorf("/health when ready: %d %q", status, body)
	}

	cfg.Addr = testkit.FreeAddr(t)
	cfg.Transport = &flakyStarts{Transport: subprocess.New(subprocess.Options{}), fails: 1}
	cfg.DefaultStartRetry = 0
	if h, err := server.Start(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "the cluster is busy") {
		if h != nil {
			_ = h.Shutdown(context.Background())
		}
		t.Fatalf("start without retry: %v, want the first failure", err)
	}
}
