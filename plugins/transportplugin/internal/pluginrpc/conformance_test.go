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

// Each conformance suite is a parallel test: its cases run beside the other
// suites' cases (go test's -parallel bounds how many at once), not after them.
func TestConformanceSubprocessPluginPython(t *testing.T) {
	t.Parallel()
	transporttest.Run(t, pluginTransport(subprocessBin), transporttest.Python())
}

func TestConformanceSubprocessPluginBash(t *testing.T) {
	t.Parallel()
	transporttest.Run(t, pluginTransport(subprocessBin), transporttest.Bash())
}

func TestConformanceSubprocessPluginJavaScript(t *testing.T) {
	t.Parallel()
	testkit.NeedCommand(t, "node", "nodejs")
	transporttest.Run(t, pluginTransport(subprocessBin), transporttest.JavaScript())
}

func TestConformanceSubprocessPluginTypeScript(t *testing.T) {
	t.Parallel()
	testkit.NeedCommand(t, "node", "nodejs")
	transporttest.Run(t, pluginTransport(subprocessBin), transporttest.TypeScript())
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
