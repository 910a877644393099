package jupyter

import (
	"testing"

	"github.com/kernelhost/kernelhost/core"
	"github.com/kernelhost/kernelhost/transports/jupyter/jupytertest"
	"github.com/kernelhost/kernelhost/transports/transporttest"
)

// TestConformance runs the shared transport suite on ipykernel against one
// real Jupyter Server, over the v1 binary subprotocol it offers (what the
// transport picks there by default). The suite over JSON frames is TestKernelGateway's
// Conformance: Kernel Gateway offers nothing else, and a second run over
// JSON here (30-odd kernels, a minute of CPU in CI) tested the same code.
// The cases that need no kernel of their own share one
// (transporttest.SharingKernel): an ipykernel start is about a CPU-second.
func TestConformance(t *testing.T) {
	t.Parallel()
	srv := jupytertest.Shared(t)
	s := &transporttest.Suite{NewTransport: func(t *testing.T) core.Transport { return newTransport(t, srv, nil) }, Lang: transporttest.Python()}
	transporttest.RunCases(t, s, transporttest.SharingKernel(transporttest.Cases()))
}
