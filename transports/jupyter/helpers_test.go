package jupyter

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/kernelhost/kernelhost/core"
	"github.com/kernelhost/kernelhost/internal/testkit"
	"github.com/kernelhost/kernelhost/transports/jupyter/jupytertest"
)

// TestMain: testkit.Main stops the shared server (jupytertest.Shared) once
// the tests are done, and checks for leaked goroutines. The parallel tests
// spend their time waiting on kernels and servers, so more of them run at
// once than go test's default of one per core.
func TestMain(m *testing.M) {
	testkit.WaitingParallel(parallelTests)
	testkit.Main(m, nil)
}

// parallelTests is how many parallel tests run at once, unless -parallel says.
const parallelTests = 4

// runTimeout bounds one execution in tests.
const runTimeout = 60 * time.Second

// newTransport connects to srv; mod may change the config first.
func newTransport(tb testing.TB, srv *jupytertest.Server, mod func(*Config)) *Transport {
	tb.Helper()
	return connect(tb, Config{URL: srv.URL, Token: srv.Token}, mod)
}

// connect makes a transport of cfg, changed by mod first (mod may be nil),
// and closes it at the end of the test.
func connect(tb testing.TB, cfg Config, mod func(*Config)) *Transport {
	tb.Helper()
	if mod != nil {
		mod(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tr, err := New(ctx, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(tr.Close)
	return tr
}

// startKernel starts a Python kernel and shuts it down in cleanup.
func startKernel(tb testing.TB, tr *Transport) core.Kernel {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	k, err := tr.StartKernel(ctx, core.KernelSpec{Language: "python"})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := k.Shutdown(ctx); err != nil {
			tb.Errorf("shutdown: %v", err)
		}
	})
	return k
}

// result is what one execution produced.
type result struct {
	msgs   []core.Message // every message of the request, in order
	stdout strings.Builder
	stderr strings.Builder
	reply  core.Message
}

// send starts an execution and returns its msg_id.
func send(tb testing.TB, k core.Kernel, code string) string {
	tb.Helper()
	id := uuid.NewString()
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	if err := k.Execute(ctx, core.ExecuteRequest{MsgID: id, Code: code}); err != nil {
		tb.Fatalf("execute %q: %v", clip(code), err)
	}
	return id
}

// clip shortens code for a failure message (TestOneKernel/v1/TooLarge's is 9 MiB).
func clip(code string) string {
	if len(code) <= 200 {
		return code
	}
	return fmt.Sprintf("%s... (%d bytes)", code[:200], len(code))
}

// collect reads messages until the request with id has sent both its
// execute_reply and its status idle. A kernel-wide message fails the test
// (tests that expect one use waitKernelWide).
func collect(tb testing.TB, k core.Kernel, id string) *result {
	tb.Helper()
	return collectWithin(tb, k, id, runTimeout)
}

func collectWithin(tb testing.TB, k core.Kernel, id string, within time.Duration) *result {
	tb.Helper()
	r := &result{}
	var reply, idle bool
	timeout := time.After(within)
	for !reply || !idle {
		select {
		case m, ok := <-k.Messages():
			if !ok {
				tb.Fatalf("messages closed while waiting for %s", id)
			}
			if m.ParentID == "" {
				tb.Fatalf("unexpected kernel-wide message %+v", m)
			}
			if m.ParentID != id {
				tb.Fatalf("message for %s while waiting for %s: %+v", m.ParentID, id, m)
			}
			r.msgs = append(r.msgs, m)
			switch {
			case m.Type == core.MsgStream && m.Name == "stdout":
				r.stdout.WriteString(m.Text)
			case m.Type == core.MsgStream && m.Name == "stderr":
				r.stderr.WriteString(m.Text)
			case m.Type == core.MsgExecuteReply:
				r.reply, reply = m, true
			case m.Type == core.MsgStatus && m.State == core.StateIdle:
				idle = true
			}
		case <-timeout:
			tail := r.stdout.String()
			tail = tail[max(0, len(tail)-40):]
			tb.Fatalf("execution %s did not finish within %v (%d messages so far, reply %v, idle %v, stdout ends %q)",
				id, within, len(r.msgs), reply, idle, tail)
		}
	}
	return r
}

func run(tb testing.TB, k core.Kernel, code string) *result {
	tb.Helper()
	return collect(tb, k, send(tb, k, code))
}

// waitKernelWide reads messages (dropping those of requests) until a
// kernel-wide status with state arrives.
func waitKernelWide(tb testing.TB, k core.Kernel, state string, within time.Duration) {
	tb.Helper()
	timeout := time.After(within)
	for {
		select {
		case m, ok := <-k.Messages():
			if !ok {
				tb.Fatalf("messages closed while waiting for kernel-wide %q", state)
			}
			if m.ParentID == "" && m.Type == core.MsgStatus {
				if m.State == state {
					return
				}
				tb.Fatalf("kernel-wide status %q while waiting for %q", m.State, state)
			}
		case <-timeout:
			tb.Fatalf("no kernel-wide %q within %v", state, within)
		}
	}
}

// waitStream reads messages of id until a stream text containing s arrives.
func waitStream(tb testing.TB, k core.Kernel, id, s string) {
	tb.Helper()
	timeout := time.After(runTimeout)
	for {
		select {
		case m, ok := <-k.Messages():
			if !ok {
				tb.Fatalf("messages closed while waiting for %q", s)
			}
			if m.ParentID != id {
				tb.Fatalf("unexpected message %+v while waiting for %q", m, s)
			}
			if m.Type == core.MsgStream && strings.Contains(m.Text, s) {
				return
			}
		case <-timeout:
			tb.Fatalf("no output %q within %v", s, runTimeout)
		}
	}
}
