// Command kernelhost-transport-jupyter is the Jupyter transport as a plugin.
// It talks to the Jupyter Server (or Kernel Gateway, Enterprise Gateway) its
// jupyter-* settings name (settings.go), which the host passes over the
// plugin protocol, not in the plugin's environment. If the server cannot be
// reached the plugin's start fails with the reason, which the host reports.
package main

import (
	"context"
	"fmt"

	"github.com/kernelhost/kernelhost/core"
	"github.com/kernelhost/kernelhost/plugins/transportplugin"
	"github.com/kernelhost/kernelhost/transports/jupyter"
)

// logger's lines reach the host's log under the plugin's name.
var logger = transportplugin.Logger()

// newTransport connects to the server c names.
func newTransport(ctx context.Context, c jupyter.Config) (core.Transport, error) {
	if c.InsecureSkipVerify {
		logger.Warn("INSECURE: accepting any server certificate (jupyter-insecure-skip-verify): anyone on the path can read the token and every execution's code and output; use it only to test a set-up, and -jupyter-ca-file otherwise", "url", c.URL)
	}
	c.Warn = logger.Warn // the host logs it under the plugin's name
	t, err := jupyter.New(ctx, c)
	if err != nil {
		return nil, fmt.Errorf("cannot start the jupyter transport at %s: %w", c.URL, err)
	}
	return t, nil
}

// Its kernels run where the server runs them, maybe on another machine.
func main() { transportplugin.ServeConfigured(settings, newTransport, transportplugin.RemoteKernels()) }
