package server

import (
	"context"
	"fmt"
	"os"

	"github.com/kernelhost/kernelhost/hostcmd/settings"
	"github.com/kernelhost/kernelhost/plugins/transportplugin/pluginhost"
)

// launchTransport starts the configured transport plugin and returns it under
// supervision: the host's one way to get a transport outside tests. The
// caller closes it after the engine. onRestart is called at each restart of
// the plugin (the host's restart counter). The plugin gets the settings it
// declares (settings.ForPlugin); bounds are the host's bounds on its kernel starts
// and restarts, raised above those its settings allow.
func launchTransport(ctx context.Context, cfg settings.Config, onRestart func()) (_ *pluginhost.Supervised, bounds settings.KernelBounds, err error) {
	cfg = settings.WithDefaults(cfg)
	if err := cfg.Validate(); err != nil {
		return nil, settings.KernelBounds{}, err
	}
	path := settings.PluginPath(cfg.PluginDir, cfg.TransportName)
	// Checked here rather than left to exec so the error says what to do.
	fi, err := os.Stat(path)
	if err != nil {
		return nil, settings.KernelBounds{}, fmt.Errorf("transport %q: plugin %s not found: run `make plugins` (it builds bin/plugins/), or set %s to the directory that has it",
			cfg.TransportName, path, settings.EnvVar("plugin-dir"))
	}
	if fi.IsDir() || fi.Mode()&0o111 == 0 {
		return nil, settings.KernelBounds{}, fmt.Errorf("transport %q: plugin %s is not an executable file", cfg.TransportName, path)
	}
	desc, err := cfg.TransportDescription()
	if err != nil {
		return nil, settings.KernelBounds{}, fmt.Errorf("transport %q: %w", cfg.TransportName, err)
	}
	values, err := settings.ForPlugin(desc, cfg)
	if err != nil {
		return nil, settings.KernelBounds{}, fmt.Errorf("transport %q: %w", cfg.TransportName, err)
	}
	bounds = settings.BoundsOf(desc, values)
	s, err := pluginhost.Launch(ctx, pluginhost.Config{
		Path:               path,
		Settings:           values,
		Logger:             cfg.Logger,
		OnRestart:          onRestart,
		StartKernelTimeout: bounds.PluginStart,
		CallTimeout:        bounds.PluginCall,
	})
	if err != nil {
		return nil, settings.KernelBounds{}, fmt.Errorf("transport %q: %w", cfg.TransportName, err)
	}
	return s, bounds, nil
}
