package transportplugin_test

import (
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
