// Command kernelhost-transport-subprocess is the subprocess transport (local
// python, bash, node and R interpreters) as a plugin. The interpreters are
// taken from KERNELHOST_PYTHON, KERNELHOST_BASH, KERNELHOST_NODE and
// KERNELHOST_RSCRIPT, or found on PATH.
package main

import (
	"os"

	"github.com/kernelhost/kernelhost/plugins/transportplugin"
	"github.com/kernelhost/kernelhost/transports/subprocess"
)

func main() {
	transportplugin.Serve(subprocess.New(subprocess.Options{
		Python: os.Getenv("KERNELHOST_PYTHON"),
		Bash:   os.Getenv("KERNELHOST_BASH"),
		Node:   os.Getenv("KERNELHOST_NODE"),
		R:      os.Getenv("KERNELHOST_RSCRIPT"),
	}))
}
