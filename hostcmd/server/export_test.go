package server

import (
	"errors"
	"flag"
	"time"
)

// RouteTable lists the routes the API registers, as "METHOD /pattern", for
// the OpenAPI tests of package server_test.
func RouteTable() []string {
	out := make([]string, len(routes))
	for i, rt := range routes {
		out[i] = rt.method + " " + rt.pattern
	}
	return out
}

// MaxTimeoutSeconds is the largest "timeout" an /execute body may give.
const MaxTimeoutSeconds = maxTimeoutSeconds

// WithoutKernelEnv makes the hosts started until restore is called send no
// kernel setup (kernelpy's check, and its source to a kernel without it),
// for benchmarks that compare the two; the subprocess driver loads the
// environment itself all the same. Not for parallel tests: it swaps a
// package variable.
func WithoutKernelEnv() (restore func()) {
	saved := kernelSetup
	kernelSetup = nil
	return func() { kernelSetup = saved }
}

// SettingDefaults are the settings of the table and of the transport
// plugins in pluginDir by name, each with its default as its flag's Go type
// (string, int, int64, bool, time.Duration).
func SettingDefaults(pluginDir string) (map[string]any, error) {
	out := map[string]any{}
	fs := flag.NewFlagSet("defaults", flag.ContinueOnError)
	for _, s := range settingsTable {
		out[s.flagName()] = s.defaultValue()
		s.register(fs)
	}
	plugins := describePlugins(pluginDir)
	plugins.register(fs)
	if note := plugins.missing(); note != "" {
		return nil, errors.New(note)
	}
	for name := range plugins.specs {
		out[name] = fs.Lookup(name).Value.(flag.Getter).Get()
	}
	return out, nil
}

// PluginSettings are the settings the plugin of cfg.TransportName (in
// cfg.PluginDir) gets from cfg, and the host's bounds on its kernel starts,
// restarts and calls that follow from them.
func PluginSettings(cfg Config) (settings map[string]any, engineStart, pluginStart, pluginCall time.Duration, err error) {
	cfg = withDefaults(cfg)
	desc, err := readDescription(pluginPath(cfg.PluginDir, cfg.TransportName))
	if err != nil {
		return nil, 0, 0, 0, err
	}
	if settings, err = settingsFor(desc, cfg); err != nil {
		return nil, 0, 0, 0, err
	}
	b := kernelBounds(desc, settings)
	return settings, b.engineStart, b.pluginStart, b.pluginCall, nil
}

// MCPSessions counts the sessions open on h's /mcp.
func MCPSessions(h *Host) int {
	n := 0
	for range h.api.mcp.server.Sessions() {
		n++
	}
	return n
}
