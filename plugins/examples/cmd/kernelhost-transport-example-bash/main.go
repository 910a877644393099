// Command kernelhost-transport-example-bash is the example transport plugin:
// the whole main of a plugin is one call to transportplugin.Serve.
package main

import (
	"github.com/kernelhost/kernelhost/plugins/examples/bashtransport"
	"github.com/kernelhost/kernelhost/plugins/transportplugin"
)

func main() { transportplugin.Serve(bashtransport.New()) }
