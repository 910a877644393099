// Command kernelhost-transport-subprocess is the subprocess transport (local
// python, bash, node, R and Java interpreters) as a plugin. It declares its
// settings (settings.go), which the host merges into its own and passes over
// the plugin protocol. It reports its warm pools as gauges for the
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

// newTransport builds the transport from its settings.
func newTransport(_ context.Context, s options) (core.Transport, error) {
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
		Interpreters: s.interpreterPaths(),
		NoCgroups:    !s.KernelCgroups,
		PoolSizes:    pools, PoolCwd: s.DefaultCwd,
		Preload:         subprocess.ParsePreload(s.Preload),
		MaxMessageBytes: s.MaxMessageBytes,
		Sandbox:         subprocess.SandboxOptions{Mode: s.Sandbox, Writable: writable, Hidden: lines(s.HostPrivatePaths), Network: s.Network},
		Limits:          subprocess.Limits{MemoryBytes: memory, Pids: s.ContextPids, CPUWeight: s.ContextCPUWeight},
		Warn:            transportplugin.Logger().Warn,
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
	if !on && s.Sandbox != subprocess.SandboxOff {
		transportplugin.Logger().Warn("INTERPRETERS ARE NOT SANDBOXED: every context can reach every other context's interpreter and the host's environment (-sandbox=on refuses to start without a sandbox)", "why", why)
	}
	return withGauges{t}, nil
}

// interpreterPaths are the interpreters' settings as subprocess.Options
// takes them.
func (o *options) interpreterPaths() map[string]string {
	out := map[string]string{}
	for name, path := range o.Interpreters {
		out[name] = *path
	}
	return out
}

// lines are the lines of s that are not empty.
func lines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l != "" {
			out = append(out, l)
		}
	}
	return out
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
	for _, st := range w.ForkStats() {
		failing := 0.0
		if st.Failing != "" {
			failing = 1
		}
		gauges = append(gauges, transportplugin.Gauge{Name: "kernelhost_fork_template_failing", Help: "1 when the last start of the subprocess transport's fork template failed (the transport's log says why, once): new contexts of the language then come from the warm pool or start cold.", Labels: map[string]string{"language": st.Language}, Value: failing})
	}
	for _, st := range w.MemoryStats() {
		labels := func(kind string) map[string]string {
			return map[string]string{"language": st.Language, "role": st.Role, "kind": kind}
		}
		gauges = append(gauges,
			transportplugin.Gauge{Name: "kernelhost_interpreters", Help: "Interpreters the subprocess transport runs, per language and role (context, pool, fork-template, retired-fork-template: one replaced after a package change, which runs until the last context forked from it ended).", Labels: map[string]string{"language": st.Language, "role": st.Role}, Value: float64(st.Interpreters)})
		for kind, v := range map[string]int64{"rss": st.RSS, "pss": st.PSS, "uss": st.USS} {
			gauges = append(gauges, transportplugin.Gauge{Name: "kernelhost_interpreter_memory_bytes", Help: "Memory of the subprocess transport's interpreters, per language and role, summed: rss counts shared pages in full, pss shares them out among the processes that map them, uss counts only pages of their own (contexts forked from a template share its pages).", Labels: labels(kind), Value: float64(v)})
		}
	}
	return append(gauges, w.familyGauges()...)
}

// familyGauges are the per-context limits, which each member of a family
// has, and each family's members, memory and total memory limit.
func (w withGauges) familyGauges() []transportplugin.Gauge {
	lim := w.ContextLimits()
	var gauges []transportplugin.Gauge
	for resource, v := range map[string]int64{"memory_bytes": lim.MemoryBytes, "pids": int64(lim.Pids), "cpu_weight": int64(lim.CPUWeight)} {
		gauges = append(gauges, transportplugin.Gauge{Name: "kernelhost_context_limit", Help: "The limit each context's interpreter has (context-memory, context-pids, context-cpu-weight; 0: none), in a cgroup of its own: each member of a family too.", Labels: map[string]string{"resource": resource}, Value: float64(v)})
	}
	for _, st := range w.FamilyStats() {
		fam := map[string]string{"language": st.Language, "family": st.Family}
		gauges = append(gauges,
			transportplugin.Gauge{Name: "kernelhost_family_members", Help: "Contexts in each family (a context and its copies, which share one sandbox; families that had a copy).", Labels: fam, Value: float64(st.Members)},
			transportplugin.Gauge{Name: "kernelhost_family_memory_limit_bytes", Help: "The memory a family may take in all: each member's context-memory, summed (0: no limit).", Labels: fam, Value: float64(st.MemoryLimit)})
		for kind, v := range map[string]int64{"rss": st.RSS, "pss": st.PSS, "uss": st.USS} {
			gauges = append(gauges, transportplugin.Gauge{Name: "kernelhost_family_memory_bytes", Help: "Memory of a family's interpreters and its sandbox's init, summed as kernelhost_interpreter_memory_bytes sums (pss: what they take together).", Labels: map[string]string{"language": st.Language, "family": st.Family, "kind": kind}, Value: float64(v)})
		}
	}
	return gauges
}

func main() { transportplugin.ServeConfigured(settings, newTransport) }
