package server

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/kernelhost/kernelhost/core"
	"github.com/kernelhost/kernelhost/hostcmd/settings"
	"github.com/kernelhost/kernelhost/plugins/transportplugin/pluginhost"
)

// DiscoveredPlugin is one transport plugin found in the plugin directory.
type DiscoveredPlugin struct {
	Transport string // the name -transport takes: the file name without settings.PluginPrefix
	Path      string
	Info      core.TransportInfo // as the plugin describes itself, when it started
	Err       error              // why it did not start
}

// DiscoverPlugins starts every transport plugin in cfg.PluginDir, one after
// the other, with the environment and settings launchTransport gives it, asks each to
// describe itself over the plugin protocol and stops it. A plugin that does
// not start is reported with its error; only an unreadable directory is an
// error. Each start is bounded by startTimeout.
func DiscoverPlugins(ctx context.Context, cfg settings.Config, startTimeout time.Duration) ([]DiscoveredPlugin, error) {
	cfg = settings.WithDefaults(cfg)
	entries, err := os.ReadDir(cfg.PluginDir)
	if err != nil {
		return nil, fmt.Errorf("plugin directory: %w", err)
	}
	var found []DiscoveredPlugin
	for _, e := range entries {
		name, ok := strings.CutPrefix(e.Name(), settings.PluginPrefix)
		if !ok || name == "" || e.IsDir() {
			continue
		}
		p := DiscoveredPlugin{Transport: name, Path: settings.PluginPath(cfg.PluginDir, name)}
		pcfg := cfg
		pcfg.TransportName = name
		p.Info, p.Err = startPlugin(ctx, pcfg, p.Path, startTimeout)
		found = append(found, p)
	}
	sort.Slice(found, func(i, j int) bool { return found[i].Transport < found[j].Transport })
	return found, nil
}

// startPlugin starts the plugin at path with the settings it takes from cfg
// and returns what it says it is.
func startPlugin(ctx context.Context, cfg settings.Config, path string, startTimeout time.Duration) (core.TransportInfo, error) {
	desc, err := settings.ReadDescription(path)
	if err != nil {
		return core.TransportInfo{}, err
	}
	values, err := settings.ForPlugin(desc, cfg)
	if err != nil {
		return core.TransportInfo{}, err
	}
	s, err := pluginhost.Launch(ctx, pluginhost.Config{
		Path:     path,
		Settings: values,
		// The error carries what the plugin said; its log lines are noise here.
		Logger:       slog.New(slog.DiscardHandler),
		StartTimeout: startTimeout,
	})
	if err != nil {
		return core.TransportInfo{}, err
	}
	info := s.Info()
	return info, s.Close()
}
