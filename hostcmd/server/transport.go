package server

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/kernelhost/kernelhost/plugins/transportplugin/pluginhost"
)

// PluginPrefix starts the file name of every transport plugin.
const PluginPrefix = "kernelhost-transport-"

// pluginPath is the executable of the transport plugin called name in dir.
func pluginPath(dir, name string) string {
	return filepath.Join(dir, PluginPrefix+name)
}

// launchTransport starts the configured transport plugin and returns it under
// supervision: the host's one way to get a transport outside tests. The
// caller closes it after the engine. onRestart is called at each restart of
// the plugin (the host's restart counter).
func launchTransport(ctx context.Context, cfg Config, onRestart func()) (*pluginhost.Supervised, error) {
	cfg = withDefaults(cfg)
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	path := pluginPath(cfg.PluginDir, cfg.TransportName)
	// Checked here rather than left to exec so the error says what to do.
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("transport %q: plugin %s not found: run `make plugins` (it builds bin/plugins/), or set %s to the directory that has it",
			cfg.TransportName, path, EnvVar("plugin-dir"))
	}
	if fi.IsDir() || fi.Mode()&0o111 == 0 {
		return nil, fmt.Errorf("transport %q: plugin %s is not an executable file", cfg.TransportName, path)
	}
	bounds := kernelBounds(cfg)
	s, err := pluginhost.Launch(ctx, pluginhost.Config{
		Path:               path,
		Settings:           pluginSettings(cfg),
		Logger:             cfg.Logger,
		OnRestart:          onRestart,
		StartKernelTimeout: bounds.pluginStart,
		CallTimeout:        bounds.pluginCall,
	})
	if err != nil {
		return nil, fmt.Errorf("transport %q: %w", cfg.TransportName, err)
	}
	return s, nil
}

// boundsMargin is what the host's bounds on a kernel start or restart leave
// beyond the transport's own, for the steps around them (the cwd snippet
// after a start, the plugin call itself).
const boundsMargin = 30 * time.Second

// hostBounds are the host's bounds on kernel starts and restarts: the
// engine's (engine.Config.StartTimeout) and the plugin calls'. Zero: their
// defaults.
type hostBounds struct {
	engineStart, pluginStart, pluginCall time.Duration
}

// kernelBounds raises the host's bounds above the jupyter transport's
// timeouts, so that a slow start or restart the settings allow is not cut
// short by a fixed bound of the host (60 s the engine's, 120 s the plugin's).
func kernelBounds(cfg Config) hostBounds {
	if cfg.TransportName != "jupyter" {
		return hostBounds{}
	}
	j := cfg.Jupyter
	start := max(time.Minute, j.StartTimeout+j.ConnectTimeout+boundsMargin, j.RestartTimeout+boundsMargin)
	return hostBounds{
		engineStart: start,
		pluginStart: start + boundsMargin,
		pluginCall:  max(time.Minute, j.RestartTimeout+boundsMargin),
	}
}
