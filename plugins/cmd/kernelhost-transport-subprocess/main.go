// Command kernelhost-transport-subprocess is the subprocess transport (local
// python, bash, node, R and Java interpreters) as a plugin. The interpreters
// are taken from the settings KERNELHOST_PYTHON, KERNELHOST_BASH,
// KERNELHOST_NODE, KERNELHOST_RSCRIPT and KERNELHOST_JAVA (the host passes
// them on its settings pipe; see transportplugin.Setting), or found on PATH.
package main

import (
	"github.com/kernelhost/kernelhost/plugins/transportplugin"
	"github.com/kernelhost/kernelhost/transports/subprocess"
)

func main() {
	transportplugin.Serve(subprocess.New(subprocess.Options{
		Python: transportplugin.Setting("KERNELHOST_PYTHON"),
		Bash:   transportplugin.Setting("KERNELHOST_BASH"),
		Node:   transportplugin.Setting("KERNELHOST_NODE"),
		R:      transportplugin.Setting("KERNELHOST_RSCRIPT"),
		Java:   transportplugin.Setting("KERNELHOST_JAVA"),
		// KERNELHOST_KERNEL_CGROUPS=false: process trees only (see reap.go).
		NoCgroups: transportplugin.Setting("KERNELHOST_KERNEL_CGROUPS") == "false",
	}))
}
