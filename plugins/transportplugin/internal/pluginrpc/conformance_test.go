package pluginrpc

import (
	"context"
	"testing"
	"time"

	"github.com/kernelhost/kernelhost/core"
	"github.com/kernelhost/kernelhost/internal/testkit"
	"github.com/kernelhost/kernelhost/transports/transporttest"
)

// pluginTransport launches bin for one conformance case; the suite cannot
// tell it from the transport linked in.
func pluginTransport(bin string) func(t *testing.T) core.Transport {
	return pluginTransportConfig(Config{Path: bin})
}

func pluginTransportConfig(shared Config) func(t *testing.T) core.Transport {
	return func(t *testing.T) core.Transport {
		cfg := shared // the suite's cases call this concurrently
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cfg.Logger = testLogger(t)
		bin := cfg.Path
		s, err := Launch(ctx, cfg)
		if err != nil {
			t.Fatalf("Launch %s: %v", bin, err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
}

// subprocessPlugin launches the real subprocess plugin for one case of a
// conformance suite, with its defaults but three: no python fork template
// (python-preload=off), pool only the languages of pool (interpreter-pool;
// the default is python=1,javascript=1), and no network stack per sandboxed
// interpreter (context-network=none: pasta, ~140 ms of CPU each, is
// transports/subprocess's network_test.go's subject, not the suite's).
// Every case launches a plugin of its own, well over a hundred in all, and
// with the defaults each started a template that imported the data stack (a
// CPU-second; its contexts forked only when it was ready before the case's
// first kernel, which it mostly was not) and a python and a node
// interpreter for its pools, whatever the suite's language: most of this
// package's CPU. Forked contexts are tested in transports/subprocess
// (fork_test.go), through the plugin in TestForkThroughPlugin and the host's
// e2e tests.
func subprocessPlugin(pool string) func(t *testing.T) core.Transport {
	return pluginTransportConfig(Config{Path: subprocessBin, Settings: map[string]any{"python-preload": "off", "interpreter-pool": pool, "context-network": "none"}})
}

// Each conformance suite is a parallel test: its cases run beside the other
// suites' cases (go test's -parallel bounds how many at once), not after them.
// The subprocess plugin's suites share one plugin and kernel among the
// cases that need none of their own (transporttest.RunSharing: each case
// launches a plugin of its own, with its pools); the example plugin's gives
// every case its own.
// Each suite's language keeps its default pool (python=1, javascript=1;
// none for bash and typescript), the others have none.
func TestConformanceSubprocessPluginPython(t *testing.T) {
	t.Parallel()
	transporttest.RunSharing(t, subprocessPlugin("python=1,javascript=0"), transporttest.Python())
}

func TestConformanceSubprocessPluginBash(t *testing.T) {
	t.Parallel()
	transporttest.RunSharing(t, subprocessPlugin("python=0,javascript=0"), transporttest.Bash())
}

func TestConformanceSubprocessPluginJavaScript(t *testing.T) {
	t.Parallel()
	testkit.NeedCommand(t, "node", "nodejs")
	transporttest.RunSharing(t, subprocessPlugin("python=0,javascript=1"), transporttest.JavaScript())
}

func TestConformanceSubprocessPluginTypeScript(t *testing.T) {
	t.Parallel()
	testkit.NeedCommand(t, "node", "nodejs")
	transporttest.RunSharing(t, subprocessPlugin("python=0,javascript=0"), transporttest.TypeScript())
}

func TestConformanceExamplePlugin(t *testing.T) {
	t.Parallel()
	transporttest.Run(t, pluginTransport(exampleBin), transporttest.Bash())
}

// The kernels of the example plugin on gRPC streams instead of the kernel
// socket: the slower path stays correct.
func TestConformanceExamplePluginGRPCStreams(t *testing.T) {
	t.Parallel()
	transporttest.Run(t, pluginTransportConfig(Config{Path: exampleBin, GRPCKernelStreams: true}), transporttest.Bash())
}

// The example plugin sends SIGINT again while the interrupted request still
// runs (interruptResends): a SIGINT that lands as bash forks a command can be
// taken by the child alone. That race is too rare to test reliably, so this
// code plays it: its own trap lets the first SIGINT pass and ends the cell at
// the second.
func TestExamplePluginInterruptIsSentAgain(t *testing.T) {
	t.Parallel()
	s := &transporttest.Suite{NewTransport: pluginTransport(exampleBin), Lang: transporttest.Bash()}
	k := s.StartKernel(t)
	const code = `n=0; trap '((++n >= 2)) && return 130' INT; echo start; while :; do sleep 0.05; done`
	e := transporttest.Send(t, k, code, false)
	transporttest.Collect(t, k, e, transporttest.ExecTimeout, func(transporttest.Received) bool { return e.Stream("stdout") != "" })
	if err := k.Interrupt(context.Background()); err != nil {
		t.Fatal(err)
	}
	transporttest.Collect(t, k, e, 5*time.Second, nil)
	if r := e.Reply(); r.Status != core.ReplyError {
		t.Fatalf("reply %+v, want an error (exit status 130)", r)
	}
}
