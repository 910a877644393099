// Command kernelhost-transport-jupyter is the Jupyter transport as a plugin.
// It talks to the Jupyter Server (or Kernel Gateway, Enterprise Gateway) at
// KERNELHOST_JUPYTER_URL (default http://127.0.0.1:8888/) with the
// KERNELHOST_JUPYTER_* settings (config.go), which the host passes from its
// own jupyter-* settings on the plugin's settings pipe, not in its
// environment (transportplugin.Setting). If the settings are wrong or
// the server cannot be reached the plugin exits with the reason on stderr,
// which the host reports at start-up.
package main

import (
	"context"
	"os"
	"time"

	"github.com/kernelhost/kernelhost/plugins/transportplugin"
	"github.com/kernelhost/kernelhost/transports/jupyter"
)

func main() {
	s, err := readSettings(transportplugin.Setting)
	if err != nil {
		transportplugin.Logger().Error("cannot start the jupyter transport", "error", err)
		os.Exit(1)
	}
	if s.InsecureSkipVerify {
		transportplugin.Logger().Warn("INSECURE: accepting any server certificate (jupyter-insecure-skip-verify): anyone on the path can read the token and the code", "url", s.URL)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t, err := jupyter.New(ctx, s.config())
	cancel()
	if err != nil {
		transportplugin.Logger().Error("cannot start the jupyter transport", "url", s.URL, "error", err)
		os.Exit(1)
	}
	defer t.Close()
	transportplugin.Serve(t)
}
