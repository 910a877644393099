// Command kernelhost-transport-subprocess is the subprocess transport (local
// python, bash, node, R and Java interpreters) as a plugin. Its settings are
// the host's (-python, -node, -bash, -rscript, -java, -kernel-cgroups,
// -interpreter-pool, -default-cwd, -max-message-bytes, -sandbox,
// -sandbox-writable, -context-memory, -context-pids, -context-cpu-weight;
// docs/operating.md), which the host passes
// over the plugin protocol. It reports its warm pools as gauges for the
// host's /metrics.
package main

import (
	"context"
	"fmt"
	"strings"

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
	// Preload is what python's fork server preloads (subprocess.ParsePreload).
	Preload string `setting:"python-preload"`
	// Sandbox is auto, on or off (subprocess.SandboxOptions); the default
	// cwd and SandboxWritable (paths separated by commas) are writable in
	// every sandbox.
	Sandbox         string `setting:"sandbox"`
	SandboxWritable string `setting:"sandbox-writable"`
	// MaxMessageBytes caps an interpreter's messages (subprocess.Options).
	MaxMessageBytes int `setting:"max-message-bytes"`
	// Limits per context (subprocess.Limits); a limit this machine cannot
	// apply stops the plugin at start.
	ContextMemory    string `setting:"context-memory"`
	ContextPids      int    `setting:"context-pids"`
	ContextCPUWeight int    `setting:"context-cpu-weight"`
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
	memory, err := subprocess.ParseBytes(s.ContextMemory)
	if err != nil {
		return nil, fmt.Errorf("context-memory: %w", err)
	}
	writable := []string{s.DefaultCwd}
	for _, w := range strings.Split(s.SandboxWritable, ",") {
		if w = strings.TrimSpace(w); w != "" {
			writable = append(writable, w)
		}
	}
	t := subprocess.New(subprocess.Options{
		Python: s.Python, Node: s.Node, Bash: s.Bash, R: s.R, Java: s.Java,
		NoCgroups: !s.KernelCgroups,
		PoolSizes: pools, PoolCwd: s.DefaultCwd,
		Preload:         subprocess.ParsePreload(s.Preload),
		MaxMessageBytes: s.MaxMessageBytes,
		Sandbox:         subprocess.SandboxOptions{Mode: s.Sandbox, Writable: writable},
		Limits:          subprocess.Limits{MemoryBytes: memory, Pids: s.ContextPids, CPUWeight: s.ContextCPUWeight},
	})
	if err := t.Limited(); err != nil {
		t.Close()
		return nil, err
	}
	on, why, err := t.Sandboxed()
	if err != nil {
		t.Close()
		return nil, err
	}
	if on && len(subprocess.ParsePreload(s.Preload)) > 0 {
		transportplugin.Logger().Info("python contexts start from the warm pool, not by fork: the fork server (-python-preload) is off while interpreters are sandboxed")
	}
	if !on && s.Sandbox != subprocess.SandboxOff {
		transportplugin.Logger().Warn("INTERPRETERS ARE NOT SANDBOXED: every context can reach every other context's interpreter and the host's environment (-sandbox=on refuses to start without a sandbox)", "why", why)
	}
	return withGauges{t}, nil
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
	for _, st := range w.MemoryStats() {
		labels := func(kind string) map[string]string {
			return map[string]string{"language": st.Language, "role": st.Role, "kind": kind}
		}
		gauges = append(gauges,
			transportplugin.Gauge{Name: "kernelhost_interpreters", Help: "Interpreters the subprocess transport runs, per language and role (context, pool, fork-template).", Labels: map[string]string{"language": st.Language, "role": st.Role}, Value: float64(st.Interpreters)})
		for kind, v := range map[string]int64{"rss": st.RSS, "pss": st.PSS, "uss": st.USS} {
			gauges = append(gauges, transportplugin.Gauge{Name: "kernelhost_interpreter_memory_bytes", Help: "Memory of the subprocess transport's interpreters, per language and role, summed: rss counts shared pages in full, pss shares them out among the processes that map them, uss counts only pages of their own (contexts forked from a template share its pages).", Labels: labels(kind), Value: float64(v)})
		}
	}
	return gauges
}

func main() { transportplugin.ServeConfigured(newTransport) }
