package jupyter

import (
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/kernelhost/kernelhost/core"
	"github.com/kernelhost/kernelhost/transports/jupyter/jupytertest"
)

// An interrupt with no request of ours running sends nothing to the
// server: a SIGINT sent to an idle kernel reaches it when it does (through
// the sandbox launcher's relay), under load inside the next request, which
// then lost its output and its reply (CI, TestConformance/InterruptIdle).
// An interrupt of a running request still goes, and stops it
// (testInterruptOf: this is also the test of interrupting a running cell on
// the shared server, which TestInterrupt ran on a kernel of its own).
func TestInterruptOfAnIdleKernelSendsNothing(t *testing.T) {
	t.Parallel()
	srv := jupytertest.Shared(t)
	backend, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	var interrupts atomic.Int32
	rp := httputil.NewSingleHostReverseProxy(backend)
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/interrupt") {
			interrupts.Add(1)
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(proxy.Close)
	k := startKernel(t, connect(t, Config{URL: proxy.URL, Token: srv.Token}, nil))

	if r := run(t, k, "print('out')"); r.stdout.String() != "out\n" {
		t.Fatalf("first cell: %q", r.stdout.String())
	}
	if err := k.Interrupt(t.Context()); err != nil {
		t.Fatal(err)
	}
	if n := interrupts.Load(); n != 0 {
		t.Fatalf("an interrupt of an idle kernel sent %d interrupt requests to the server", n)
	}
	if r := run(t, k, "print('next')"); r.stdout.String() != "next\n" || r.reply.Status != core.ReplyOK {
		t.Fatalf("after the idle interrupt: %q, reply %+v", r.stdout.String(), r.reply)
	}

	testInterruptOf(t, k)
	if n := interrupts.Load(); n != 1 {
		t.Fatalf("an interrupt of a running cell sent %d interrupt requests, want 1", n)
	}
}
