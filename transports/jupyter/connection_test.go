package jupyter

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/kernelhost/kernelhost/core"
	"github.com/kernelhost/kernelhost/transports/jupyter/jupytertest"
)

// proxy is a loopback TCP proxy whose connections the test can cut.
type proxy struct {
	l        net.Listener
	upstream string
	wg       sync.WaitGroup
	mu       sync.Mutex
	conns    map[net.Conn]bool // → frozen: what it reads is dropped
}

func startProxy(t *testing.T, upstream string) *proxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{l: l, upstream: upstream, conns: map[net.Conn]bool{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(func() {
		l.Close()
		p.cut()
		p.wg.Wait()
	})
	return p
}

func (p *proxy) accept() {
	defer p.wg.Done()
	for {
		down, err := p.l.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", p.upstream)
		if err != nil {
			down.Close()
			continue
		}
		p.mu.Lock()
		p.conns[down], p.conns[up] = false, false
		p.mu.Unlock()
		p.wg.Add(2)
		pipe := func(dst, src net.Conn) {
			defer p.wg.Done()
			defer dst.Close()
			defer src.Close()
			buf := make([]byte, 32<<10)
			for {
				n, err := src.Read(buf)
				if n > 0 && !p.isFrozen(src) {
					if _, err := dst.Write(buf[:n]); err != nil {
						return
					}
				}
				if err != nil {
					return
				}
			}
		}
		go pipe(up, down)
		go pipe(down, up)
	}
}

// cut drops every open connection, as a network failure would.
func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
		delete(p.conns, c)
	}
}

// freeze makes every open connection a black hole in both directions, as a
// stalled network would be, without closing it. New connections work.
func (p *proxy) freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		p.conns[c] = true
	}
}

func (p *proxy) isFrozen(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.conns[c]
}

func (p *proxy) url() string { return "http://" + p.l.Addr().String() + "/" }

func TestWebsocketCutReconnects(t *testing.T) {
	srv := jupytertest.Start(t)
	p := startProxy(t, srv.URL[len("http://"):len(srv.URL)-1])
	tr := newTransport(t, srv, func(c *Config) { c.URL = p.url() })
	k := startKernel(t, tr)
	run(t, k, "x = 'kept'")

	id := send(t, k, "import time\nprint('sleeping', flush=True)\ntime.sleep(2)\nprint('woke', flush=True)")
	waitStream(t, k, id, "sleeping")
	p.cut()
	// The in-flight request gets no more messages: the kernel-wide status
	// comes next, and nothing of id follows it (collect fails on that).
	waitKernelWide(t, k, core.StateDisconnected, 10*time.Second)
	r := run(t, k, "print(x)")
	if got := r.stdout.String(); got != "kept\n" {
		t.Errorf("after reconnect: %q", got)
	}
}

func TestStalledConnectionIsNoticed(t *testing.T) {
	srv := jupytertest.Start(t)
	p := startProxy(t, srv.URL[len("http://"):len(srv.URL)-1])
	tr := newTransport(t, srv, func(c *Config) {
		c.URL = p.url()
		c.PingInterval = 200 * time.Millisecond
		c.PongTimeout = 300 * time.Millisecond
	})
	k := startKernel(t, tr)
	run(t, k, "x = 'kept'")
	p.freeze()
	// No pong comes back: the read deadline ends the connection.
	waitKernelWide(t, k, core.StateDisconnected, 10*time.Second)
	if r := run(t, k, "print(x)"); r.stdout.String() != "kept\n" {
		t.Errorf("after reconnect: %q", r.stdout.String())
	}
}

func TestPongsKeepIdleConnectionAlive(t *testing.T) {
	srv := jupytertest.Start(t)
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
	srv := jupytertest.Start(t)
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
