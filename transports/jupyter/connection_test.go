package jupyter

import (
	"context"
	"testing"
	"time"

	"github.com/kernelhost/kernelhost/core"
	"github.com/kernelhost/kernelhost/internal/testkit"
	"github.com/kernelhost/kernelhost/transports/jupyter/jupytertest"
)

func TestWebsocketCutReconnects(t *testing.T) {
	t.Parallel()
	srv := jupytertest.Shared(t)
	p := testkit.StartProxy(t, srv.URL[len("http://"):len(srv.URL)-1])
	tr := newTransport(t, srv, func(c *Config) { c.URL = p.URL() })
	k := startKernel(t, tr)
	run(t, k, "x = 'kept'")

	id := send(t, k, "import time\nprint('sleeping', flush=True)\ntime.sleep(2)\nprint('woke', flush=True)")
	waitStream(t, k, id, "sleeping")
	p.Cut()
	// The in-flight request gets no more messages: the kernel-wide status
	// comes next, and nothing of id follows it (collect fails on that).
	waitKernelWide(t, k, core.StateDisconnected, 30*time.Second)
	r := run(t, k, "print(x)")
	if got := r.stdout.String(); got != "kept\n" {
		t.Errorf("after reconnect: %q", got)
	}
}

func TestStalledConnectionIsNoticed(t *testing.T) {
	srv := jupytertest.Shared(t)
	p := testkit.StartProxy(t, srv.URL[len("http://"):len(srv.URL)-1])
	tr := newTransport(t, srv, func(c *Config) {
		c.URL = p.URL()
		// The pong timeout is the behaviour under test, but the connection
		// made after the stall must keep passing it: a loaded server (CI's
		// own tests) has answered a ping after more than 300 ms, and that
		// second, spurious disconnect failed the run below.
		c.PingInterval = 200 * time.Millisecond
		c.PongTimeout = 3 * time.Second
	})
	k := startKernel(t, tr)
	run(t, k, "x = 'kept'")
	p.Stall()
	// No pong comes back: the read deadline ends the connection.
	waitKernelWide(t, k, core.StateDisconnected, 30*time.Second)
	if r := run(t, k, "print(x)"); r.stdout.String() != "kept\n" {
		t.Errorf("after reconnect: %q", r.stdout.String())
	}
}

func TestPongsKeepIdleConnectionAlive(t *testing.T) {
	srv := jupytertest.Shared(t)
	tr := newTransport(t, srv, func(c *Config) {
		c.PingInterval = 100 * time.Millisecond
		c.PongTimeout = 200 * time.Millisecond
	})
	k := startKernel(t, tr)
	// Pongs keep an idle connection alive well past PingInterval+PongTimeout.
	id := send(t, k, "import time; time.sleep(1.5); print('ok')")
	if r := collect(t, k, id); r.stdout.String() != "ok\n" {
		t.Errorf("idle connection: %q", r.stdout.String())
	}
}

func TestKernelDeletedElsewhereClosesMessages(t *testing.T) {
	t.Parallel()
	srv := jupytertest.Shared(t)
	tr := newTransport(t, srv, func(c *Config) { c.PingInterval = 200 * time.Millisecond })
	k := startKernel(t, tr)
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	if err := tr.c.deleteKernel(ctx, k.(*kernel).id); err != nil {
		t.Fatal(err)
	}
	waitKernelWide(t, k, core.StateDisconnected, 30*time.Second)
	select {
	case m, ok := <-k.Messages():
		if ok {
			t.Fatalf("message %+v after the kernel was deleted", m)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("messages not closed after the kernel was deleted on the server")
	}
	err := k.Execute(ctx, core.ExecuteRequest{MsgID: "gone", Code: "1"})
	if err == nil {
		t.Fatal("execute on a lost kernel succeeded")
	}
	t.Logf("execute on a lost kernel: %v", err)
}

// An execution sent to a kernel the server deleted (or culled) behind the
// transport's back, before a ping tick noticed, ends within seconds: the
// request's silence makes the transport ask the server.
func TestExecutionOnDeletedKernelEndsWithinSeconds(t *testing.T) {
	srv := jupytertest.Shared(t)
	tr := newTransport(t, srv, nil) // PingInterval 15 s: no tick in the test's span
	k := startKernel(t, tr)
	run(t, k, "x = 1")
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	if err := tr.c.deleteKernel(ctx, k.(*kernel).id); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	send(t, k, "print(x)")
	waitKernelWide(t, k, core.StateDisconnected, 30*time.Second)
	select {
	case m, ok := <-k.Messages():
		if ok {
			t.Fatalf("message %+v after the kernel was deleted", m)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("messages not closed after the kernel was deleted on the server")
	}
	took := time.Since(began)
	t.Logf("FIGURE an execution on a deleted kernel ended after %v", took)
	if took > silenceCheckDelay+5*time.Second {
		t.Errorf("the execution ended after %v", took)
	}
}
