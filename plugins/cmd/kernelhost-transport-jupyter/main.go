// Command kernelhost-transport-jupyter is the Jupyter transport as a plugin.
// It talks to the Jupyter Server (or Kernel Gateway) at KERNELHOST_JUPYTER_URL
// (default http://127.0.0.1:8888/) with KERNELHOST_JUPYTER_TOKEN; the host
// passes its environment to the plugin. If the server cannot be reached the
// plugin exits with the reason on stderr, which the host reports at start-up.
package main

import (
	"context"
	"os"
	"time"

	"github.com/kernelhost/kernelhost/plugins/transportplugin"
	"github.com/kernelhost/kernelhost/transports/jupyter"
)

func main() {
	url := os.Getenv("KERNELHOST_JUPYTER_URL")
	if url == "" {
		url = "http://127.0.0.1:8888/"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t, err := jupyter.New(ctx, jupyter.Config{URL: url, Token: os.Getenv("KERNELHOST_JUPYTER_TOKEN")})
	cancel()
	if err != nil {
		transportplugin.Logger().Error("cannot start the jupyter transport", "url", url, "error", err)
		os.Exit(1)
	}
	defer t.Close()
	transportplugin.Serve(t)
}
