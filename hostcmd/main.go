// Command kernelhost serves the code-interpreter HTTP API (wire-compatible
// with E2B's code-interpreter SDKs) on kernels from a transport plugin, and
// has the tools around it: plugins list, policy eval, version. See
// `kernelhost help` and package cli.
package main

import (
	"os"

	"github.com/kernelhost/kernelhost/hostcmd/cli"
)

func main() {
	cli.HideSecrets()
	os.Exit(cli.Main(os.Args[1:], cli.OS()))
}
