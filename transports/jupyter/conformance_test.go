package jupyter

import (
	"testing"

	"github.com/kernelhost/kernelhost/core"
	"github.com/kernelhost/kernelhost/transports/jupyter/jupytertest"
	"github.com/kernelhost/kernelhost/transports/transporttest"
)

// TestConformance runs the shared transport suite on ipykernel, once per
// websocket protocol, against one real server.
func TestConformance(t *testing.T) {
	t.Parallel()
	srv := jupytertest.Shared(t)
	protocols(t, func(t *testing.T, p Protocol) {
		transporttest.Run(t, func(t *testing.T) core.Transport {
			return newTransport(t, srv, func(c *Config) { c.Protocol = p })
		}, transporttest.Python)
	})
}
