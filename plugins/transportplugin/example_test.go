package transportplugin_test

import (
	"context"

	"github.com/kernelhost/kernelhost/core"
	"github.com/kernelhost/kernelhost/plugins/examples/bashtransport"
	"github.com/kernelhost/kernelhost/plugins/transportplugin"
)

// The whole main of a transport plugin is one call to Serve with the
// core.Transport it serves; go-plugin's handshake, the protocol and the
// kernel socket are Serve's business. Build the binary as
// kernelhost-transport-NAME and the host loads it with -transport NAME.
// (This example is compiled, not run: Serve expects to be started by a host.
// The runnable example of a transport, core's Example_transport, drives a
// toy one through the engine.)
func ExampleServe() {
	transportplugin.Serve(bashtransport.New())
}

// A transport that takes settings declares them, each once: the host makes
// each a flag, a KERNELHOST_* variable, a config file key and a line of
// -help, checks its bounds, and passes the plugin those that are set; the
// plugin gets its configuration with every other setting at its default.
func ExampleServeConfigured() {
	type options struct {
		Greeting string
		Repeat   int
	}
	transportplugin.ServeConfigured([]transportplugin.Setting[options]{
		transportplugin.StringSetting("greeting", "hello", "example transport: what it logs at start",
			func(o *options) *string { return &o.Greeting }),
		transportplugin.IntSetting("greeting-repeat", 1, "example transport: how often it logs the greeting",
			func(o *options) *int { return &o.Repeat }).Between(1, 10),
	}, func(ctx context.Context, o options) (core.Transport, error) {
		for range o.Repeat {
			transportplugin.Logger().Info("configured", "greeting", o.Greeting)
		}
		return bashtransport.New(), nil
	})
}
