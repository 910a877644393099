// Command kernelhost-transport-subprocess is the subprocess transport (local
// python, bash, node, R and Java interpreters) as a plugin. Its settings are
// the host's (-python, -node, -bash, -rscript, -java, -kernel-cgroups,
// -interpreter-pool, -default-cwd, -max-message-bytes; docs/operating.md), which the host passes
// over the plugin protocol. It reports its warm pools as gauges for the
// host's /metrics.
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
	// Pool sizes the warm pools (subprocess.ParsePoolSizes), whose
	// interpreters start in DefaultCwd, where contexts start by default.
	Pool       string `setting:"interpreter-pool"`
	DefaultCwd string `setting:"default-cwd"`
	// MaxMessageBytes caps an interpreter's messages (subprocess.Options).
	MaxMessageBytes int `setting:"max-message-bytes"`
}

// newTransport builds the transport from the host's settings.
func newTransport(_ context.Context, hs transportplugin.Settings) (core.Transport, error) {
	s := settings{KernelCgroups: true}
	if err := hs.Decode(&s); err != nil {
		return nil, err
	}
	pools, err := subprocess.ParsePoolSizes(s.Pool)
	if err != nil {
		return nil, err
	}
	return withGauges{subprocess.New(subprocess.Options{
		Python: s.Python, Node: s.Node, Bash: s.Bash, R: s.R, Java: s.Java,
		NoCgroups: !s.KernelCgroups,
		PoolSizes: pools, PoolCwd: s.DefaultCwd,
		MaxMessageBytes: s.MaxMessageBytes,
	})}, nil
}

// withGauges reports the transport's pools as gauges in the host's /metrics.
type withGauges struct{ *subprocess.Transport }

func (w withGauges) Gauges() []transportplugin.Gauge {
	var gauges []transportplugin.Gauge
	for _, st := range w.PoolStats() {
		lang := map[string]string{"language": st.Language}
		gauges = append(gauges,
			transportplugin.Gauge{Name: "kernelhost_pool_interpreters", Help: "Interpreters ready in the subprocess transport's warm pool, per language.", Labels: lang, Value: float64(st.Ready)},
			transportplugin.Gauge{Name: "kernelhost_pool_size", Help: "Configured size of the subprocess transport's warm pool, per language (interpreter-pool).", Labels: lang, Value: float64(st.Size)},
			transportplugin.Gauge{Name: "kernelhost_pool_rss_bytes", Help: "Resident memory of the interpreters ready in the subprocess transport's warm pool, per language.", Labels: lang, Value: float64(st.RSSBytes)})
	}
	return gauges
}

func main() { transportplugin.ServeConfigured(newTransport) }
