package testkit

import (
	"net"
	"sync"
	"testing"
)

// Proxy forwards loopback TCP connections to a target, and lets a test
// break the network between them: Cut closes every open connection, Stall
// turns every open one into a black hole. It stops at the end of the test.
type Proxy struct {
	l      net.Listener
	target string
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  map[net.Conn]bool // → stalled: what it reads is dropped
}

// StartProxy listens on a free loopback port and forwards each connection
// to target (host:port).
func StartProxy(tb testing.TB, target string) *Proxy {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	p := &Proxy{l: l, target: target, conns: map[net.Conn]bool{}}
	p.wg.Go(p.accept)
	tb.Cleanup(func() {
		l.Close()
		p.Cut()
		p.wg.Wait()
	})
	return p
}

// URL is the proxy's address as an http URL with a trailing slash.
func (p *Proxy) URL() string { return "http://" + p.l.Addr().String() + "/" }

// Cut closes every open connection, both ends, as a network failure would.
// New connections pass.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
		delete(p.conns, c)
	}
}

// Stall makes every open connection a black hole in both directions, as a
// stalled network would be, without closing it: what either end sends is
// read and dropped. New connections pass.
func (p *Proxy) Stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		p.conns[c] = true
	}
}

func (p *Proxy) stalled(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.conns[c]
}

func (p *Proxy) accept() {
	for {
		down, err := p.l.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			down.Close()
			continue
		}
		p.mu.Lock()
		p.conns[down], p.conns[up] = false, false
		p.mu.Unlock()
		p.wg.Go(func() { p.pipe(up, down) })
		p.wg.Go(func() { p.pipe(down, up) })
	}
}

// pipe copies src to dst until either fails, then closes both.
func (p *Proxy) pipe(dst, src net.Conn) {
	defer func() {
		src.Close()
		dst.Close()
		p.mu.Lock()
		delete(p.conns, src)
		p.mu.Unlock()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !p.stalled(src) {
			if _, err := dst.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
