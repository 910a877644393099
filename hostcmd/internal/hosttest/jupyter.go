package hosttest

import (
	"context"
	"testing"
	"time"

	"github.com/kernelhost/kernelhost/hostcmd/settings"
	"github.com/kernelhost/kernelhost/transports/jupyter"
	"github.com/kernelhost/kernelhost/transports/jupyter/jupytertest"
)

// JupyterInProcess returns a configure option that links a jupyter transport
// for srv into the host. The transport is shared by the hosts of tb's subtests.
func JupyterInProcess(tb testing.TB, srv *jupytertest.Server) func(*settings.Config) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tr, err := jupyter.New(ctx, jupyter.Config{URL: srv.URL, Token: srv.Token})
	if err != nil {
		tb.Fatalf("jupyter transport for %s: %v", srv.URL, err)
	}
	tb.Cleanup(tr.Close)
	return func(c *settings.Config) { c.Transport, c.TransportName = tr, "jupyter" }
}

// JupyterViaPlugin runs the jupyter transport through its plugin, as
// `KERNELHOST_TRANSPORT=jupyter kernelhost` does.
func JupyterViaPlugin(srv *jupytertest.Server) func(*settings.Config) {
	return func(c *settings.Config) {
		viaPlugin(c, "jupyter")
		c.SetTransportSetting("jupyter-url", srv.URL)
		c.SetTransportSetting("jupyter-token", srv.Token)
	}
}
