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

// A transport that takes settings is built from them when the host first
// calls the plugin: Decode fills the fields tagged with the settings' names
// (a host that passes any other setting gets a start-up error naming it).
func ExampleServeConfigured() {
	transportplugin.ServeConfigured(func(ctx context.Context, s transportplugin.Settings) (core.Transport, error) {
		var settings struct {
			Greeting string `setting:"greeting"`
		}
		if err := s.Decode(&settings); err != nil {
			return nil, err
		}
		transportplugin.Logger().Info("configured", "greeting", settings.Greeting)
		return bashtransport.New(), nil
	})
}
