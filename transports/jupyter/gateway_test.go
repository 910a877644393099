package jupyter

import (
	"testing"

	"github.com/kernelhost/kernelhost/core"
	"github.com/kernelhost/kernelhost/transports/jupyter/jupytertest"
	"github.com/kernelhost/kernelhost/transports/transporttest"
)

// TestKernelGateway runs against one real Jupyter Kernel Gateway 2.5.2 (the
// unmodified copy in ../shared/third_party): the conformance suite and the
// gateway-specific cases below. It is the heavier of the gateway tests: one
// gateway for all of them.
func TestKernelGateway(t *testing.T) {
	kg := jupytertest.StartKernelGateway(t)
	t.Run("Conformance", func(t *testing.T) {
		transporttest.Run(t, func(t *testing.T) core.Transport {
			return newTransport(t, kg, nil)
		}, transporttest.Python)
	})
	t.Run("KernelEnv", func(t *testing.T) { testKernelEnv(t, kg) })
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
