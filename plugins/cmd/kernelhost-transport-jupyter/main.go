// Command kernelhost-transport-jupyter is the Jupyter transport as a plugin.
// It talks to the Jupyter Server (or Kernel Gateway, Enterprise Gateway) the
// host's jupyter-* settings name (config.go), which the host passes over the
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

// logger is made before Serve: Serve hands the process's stderr to
// go-plugin's stream, whose lines the host logs as plain text, and a logger
// made later (at Configure) writes there: its JSON showed raw in the host's
// log instead of as the plugin's own lines.
var logger = transportplugin.Logger()

// newTransport connects to the server the settings name.
func newTransport(ctx context.Context, hs transportplugin.Settings) (core.Transport, error) {
	var s settings
	if err := hs.Decode(&s); err != nil {
		return nil, err
	}
	if s.InsecureSkipVerify {
		logger.Warn("INSECURE: accepting any server certificate (jupyter-insecure-skip-verify): anyone on the path can read the token and the code", "url", s.URL)
	}
	t, err := jupyter.New(ctx, s.config())
	if err != nil {
		return nil, fmt.Errorf("cannot start the jupyter transport at %s: %w", s.URL, err)
	}
	return t, nil
}

func main() { transportplugin.ServeConfigured(newTransport) }
