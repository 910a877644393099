package jupyter

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kernelhost/kernelhost/core"
	"github.com/kernelhost/kernelhost/transports/jupyter/jupytertest"
	"github.com/kernelhost/kernelhost/transports/transporttest"
)

// TestKernelGateway runs against real Jupyter Kernel Gateways 2.5.2 (the
// unmodified copy in ../shared/third_party): the conformance suite and the
// gateway-specific cases below. It is the heavier of the gateway tests.
func TestKernelGateway(t *testing.T) {
	t.Parallel()
	gateways := jupytertest.StartKernelGateways(t, 2)
	kg := gateways[0]
	if v := newTransport(t, kg, nil).Info().Version; !strings.HasPrefix(v, "kernel-gateway (api ") {
		t.Errorf("version label %q, want Kernel Gateway's", v)
	}
	t.Run("Conformance", func(t *testing.T) {
		// One case at a time on a gateway, not in parallel as
		// transporttest.Run has them: Kernel Gateway 2.5.2 on Debian's
		// notebook package leaves a kernel start POSTed while another is in
		// progress unanswered (asyncio's "Cannot enter into task ... while
		// another task ... is being executed" in
		// MappingKernelManager.start_kernel, in its log). The cases are
		// shared out between two gateways, each taking its share in order:
		// the suite waits on kernels, and the two waits overlap. The two
		// run as goroutines of this test, not as parallel subtests, which
		// would queue behind the package's other parallel tests. The cases
		// that need no kernel of their own share one, as in TestConformance.
		cases := transporttest.SharingKernel(transporttest.Cases())
		var wg sync.WaitGroup
		for g, gw := range gateways {
			wg.Go(func() {
				s := &transporttest.Suite{NewTransport: func(t *testing.T) core.Transport { return newTransport(t, gw, nil) }, Lang: transporttest.Python()}
				for i, c := range cases {
					if i%len(gateways) == g {
						t.Run(c.Name, func(t *testing.T) { c.Run(t, s) })
					}
				}
			})
		}
		wg.Wait()
	})
	t.Run("KernelEnv", func(t *testing.T) { testKernelEnv(t, kg) })
	t.Run("SlowKernelStart", func(t *testing.T) { testSlowKernelStart(t, kg) })
	t.Run("RestartAfterDeath", func(t *testing.T) { testRestartAfterDeath(t, kg) })
}

// testRestartAfterDeath: a Restart asked for as soon as the kernel's death is
// reported gets a working kernel, and leaves the gateway's own restarter
// alone: the gateway restarts a dead kernel by itself (its "restarting" is
// what reports the death), and a restart request that overlaps that restart
// makes it run two restarts interleaved on one kernel (see Restart). The
// gateway's log shows the overlap (a 500, a lost request, or a second
// restart by its restarter, which would count towards its restart_limit
// and get the kernel removed); the kernel's messages show any restart after
// ours. A few rounds: the overlap without the fix was there in about one
// round of two.
func testRestartAfterDeath(t *testing.T, kg *jupytertest.Server) {
	// A kernel started first, on a transport of its own: the gateway's
	// first kernel start applies nest_asyncio, and an HTTP connection opened
	// before that (as the transport's would be on a fresh gateway) dies
	// the first time the event loop re-enters while a request on it is due
	// ("Cannot enter into task", its request never answered): a hazard of
	// the gateway's, not the overlap this test is about.
	startKernel(t, newTransport(t, kg, nil))
	tr := newTransport(t, kg, func(c *Config) { c.RestartTimeout = runTimeout })
	for round := range 3 {
		from := len(kg.Log())
		k := startKernel(t, tr)
		send(t, k, "import os\nos._exit(1)")
		waitKernelWide(t, k, core.StateDead, runTimeout)
		ctx, cancel := context.WithTimeout(context.Background(), 2*runTimeout)
		err := k.Restart(ctx)
		cancel()
		if err != nil {
			t.Fatalf("round %d: restart after death: %v", round, err)
		}
		// The gateway's restarting (after the dead it reported), then ours.
		waitKernelWide(t, k, core.StateRestarting, runTimeout)
		waitKernelWide(t, k, core.StateRestarting, runTimeout)
		// collect fails on any kernel-wide message: no restart after ours.
		if r := run(t, k, "print(6 * 7)"); r.stdout.String() != "42\n" {
			t.Errorf("round %d: after death and restart stdout = %q", round, r.stdout.String())
		}
		log := kg.Log()[from:]
		for _, overlap := range []string{"Exception restarting kernel", "KernelRestarter: restarting kernel (2/"} {
			if strings.Contains(log, overlap) {
				t.Errorf("round %d: the gateway's log has %q: our restart overlapped its own", round, overlap)
			}
		}
		if line, ok := lostRequest(log); ok {
			t.Errorf("round %d: the gateway lost a request: %s", round, line)
		}
	}
}

// lostRequest finds the gateway's asyncio "Cannot enter into task" for an
// HTTP connection that had a request due: nest_asyncio re-entered the event
// loop as the connection's task woke, so the request was never answered.
// The same error for a connection whose client had closed it (its task woken
// by a StreamClosedError) loses nothing: the gateway's hazard on an idle
// keep-alive connection, which this machine's load makes happen at any time,
// not a sign of two restarts overlapping.
func lostRequest(log string) (string, bool) {
	for line := range strings.Lines(log) {
		if strings.Contains(line, "Cannot enter into task") && !strings.Contains(line, "StreamClosedError") {
			return strings.TrimSpace(line), true
		}
	}
	return "", false
}

// slowStartDelay is how long the "slow" kernel spec waits before it starts
// ipykernel, as a pod waiting for its image would.
const slowStartDelay = 8 * time.Second

// testSlowKernelStart: the gateway holds the websocket upgrade until the
// kernel answers, so a kernel that starts slowly shows at the connection:
// within ConnectTimeout it works; beyond it, the start fails saying so, and
// leaves no kernel behind.
func testSlowKernelStart(t *testing.T, kg *jupytertest.Server) {
	err := kg.AddKernelSpec("slow", "python", []string{"/bin/sh", "-c",
		fmt.Sprintf("sleep %d; exec /usr/bin/python3 \"$0\" -f \"$1\"", int(slowStartDelay.Seconds())), kg.PythonLauncher(), "{connection_file}"})
	if err != nil {
		t.Fatal(err)
	}
	slow := func(c *Config) { c.KernelNames = map[string]string{"python": "slow"} }

	tr := newTransport(t, kg, func(c *Config) { slow(c); c.ConnectTimeout = 2 * time.Second })
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	if _, err := tr.StartKernel(ctx, core.KernelSpec{Language: "python"}); err == nil || !strings.Contains(err.Error(), "within the connect timeout (2s)") {
		t.Fatalf("start beyond the connect timeout: %v", err)
	}
	if ks, err := tr.c.listKernels(ctx); err != nil || len(ks) != 0 {
		t.Errorf("kernels left after the failed start: %+v %v", ks, err)
	}

	began := time.Now()
	k := startKernel(t, newTransport(t, kg, slow))
	t.Logf("FIGURE slow kernel (%v delay) started through Kernel Gateway in %v", slowStartDelay, time.Since(began))
	if r := run(t, k, "print(6 * 7)"); r.stdout.String() != "42\n" {
		t.Errorf("slow kernel: %q", r.stdout.String())
	}
}

// testKernelEnv: the configured env goes in the kernel-start request; Kernel
// Gateway passes its KERNEL_* values into the kernel's environment (and
// drops the others, which it has not been told to allow).
func testKernelEnv(t *testing.T, kg *jupytertest.Server) {
	tr := newTransport(t, kg, func(c *Config) {
		c.KernelEnv = map[string]string{"KERNEL_USERNAME": "alice", "KERNEL_NAMESPACE": "team-a", "NOT_A_KERNEL_VAR": "x"}
	})
	k := startKernel(t, tr)
	r := run(t, k, "import os\nprint(os.environ.get('KERNEL_USERNAME'), os.environ.get('KERNEL_NAMESPACE'), os.environ.get('NOT_A_KERNEL_VAR'))")
	if got := r.stdout.String(); got != "alice team-a None\n" {
		t.Errorf("kernel env: %q, want %q", got, "alice team-a None\n")
	}
}

// TestLostRequest reads the gateway's log lines as CI's runs had them: the
// wake-up of a connection its client closed is no lost request.
func TestLostRequest(t *testing.T) {
	closed := "RuntimeError: Cannot enter into task <Task pending name='Task-3' coro=<HTTP1ServerConnection._server_request_loop() running at /usr/lib/python3/dist-packages/tornado/http1connection.py:825> wait_for=<Future finished exception=StreamClosedError('Stream is closed')> cb=[IOLoop.add_future.<locals>.<lambda>() at /usr/lib/python3/dist-packages/tornado/ioloop.py:687]> while another task <Task pending name='Task-1559' coro=<KernelManager._async_start_kernel() running at /usr/lib/python3/dist-packages/jupyter_client/manager.py:82>> is being executed.\n"
	due := "RuntimeError: Cannot enter into task <Task pending name='Task-7' coro=<HTTP1ServerConnection._server_request_loop() running at /usr/lib/python3/dist-packages/tornado/http1connection.py:825> wait_for=<Future finished result=None> cb=[IOLoop.add_future.<locals>.<lambda>() at /usr/lib/python3/dist-packages/tornado/ioloop.py:687]> while another task <Task pending name='Task-90' coro=<KernelManager._async_start_kernel() running at /usr/lib/python3/dist-packages/jupyter_client/manager.py:82>> is being executed.\n"
	other := "[I 261206 03:17:41 web:2293] 201 POST /api/kernels (127.0.0.1) 107.70ms\n"
	if line, ok := lostRequest(other + closed + other); ok {
		t.Errorf("a closed connection's wake-up counted as a lost request: %s", line)
	}
	if _, ok := lostRequest(other + closed + due); !ok {
		t.Error("a connection with a request due not counted as a lost request")
	}
}
