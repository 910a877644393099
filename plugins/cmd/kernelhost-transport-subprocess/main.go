// Command kernelhost-transport-subprocess is the subprocess transport (local
// python, bash, node, R and Java interpreters) as a plugin. Its settings are
// the host's (-python, -node, -bash, -rscript, -java, -kernel-cgroups;
// docs/operating.md), which the host passes over the plugin protocol.
package main

import (
	"context"

	"github.com/kernelhost/kernelhost/core"
	"github.com/kernelhost/kernelhost/plugins/transportplugin"
	"github.com/kernelhost/kernelhost/transports/subprocess"
)

// settings are the subprocess transport's rows of the host's settings table,
// by name. Interpreters left empty are looked up on PATH.
type settings struct {
	Python        string `setting:"python"`
	Node          string `setting:"node"`
	Bash          string `setting:"bash"`
	R             string `setting:"rscript"`
	Java          string `setting:"java"`
	KernelCgroups bool   `setting:"kernel-cgroups"` // false: process trees only (see reap.go)
}

// newTransport builds the transport from the host's settings.
func newTransport(_ context.Context, hs transportplugin.Settings) (core.Transport, error) {
	s := settings{KernelCgroups: true}
	if err := hs.Decode(&s); err != nil {
		return nil, err
	}
	return subprocess.New(subprocess.Options{
		Python: s.Python, Node: s.Node, Bash: s.Bash, R: s.R, Java: s.Java,
		NoCgroups: !s.KernelCgroups,
	}), nil
}

func main() { transportplugin.ServeConfigured(newTransport) }
