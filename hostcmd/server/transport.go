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
// the plugin (the host's restart counter). The plugin gets the settings it
// declares (settingsFor); bounds are the host's bounds on its kernel starts
// and restarts, raised above those its settings allow.
func launchTransport(ctx context.Context, cfg Config, onRestart func()) (_ *pluginhost.Supervised, bounds hostBounds, err error) {
	cfg = withDefaults(cfg)
	if err := cfg.validate(); err != nil {
		return nil, hostBounds{}, err
	}
	path := pluginPath(cfg.PluginDir, cfg.TransportName)
	// Checked here rather than left to exec so the error says what to do.
	fi, err := os.Stat(path)
	if err != nil {
		return nil, hostBounds{}, fmt.Errorf("transport %q: plugin %s not found: run `make plugins` (it builds bin/plugins/), or set %s to the directory that has it",
			cfg.TransportName, path, EnvVar("plugin-dir"))
	}
	if fi.IsDir() || fi.Mode()&0o111 == 0 {
		return nil, hostBounds{}, fmt.Errorf("transport %q: plugin %s is not an executable file", cfg.TransportName, path)
	}
	desc, err := cfg.plugins.description(cfg.PluginDir, cfg.TransportName)
	if err != nil {
		return nil, hostBounds{}, fmt.Errorf("transport %q: %w", cfg.TransportName, err)
	}
	settings, err := settingsFor(desc, cfg)
	if err != nil {
		return nil, hostBounds{}, fmt.Errorf("transport %q: %w", cfg.TransportName, err)
	}
	bounds = kernelBounds(desc, settings)
	s, err := pluginhost.Launch(ctx, pluginhost.Config{
		Path:               path,
		Settings:           settings,
		Logger:             cfg.Logger,
		OnRestart:          onRestart,
		StartKernelTimeout: bounds.pluginStart,
		CallTimeout:        bounds.pluginCall,
	})
	if err != nil {
		return nil, hostBounds{}, fmt.Errorf("transport %q: %w", cfg.TransportName, err)
	}
	return s, bounds, nil
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
