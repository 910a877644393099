package settings

import (
	"errors"
	"flag"
	"time"
)

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
func PluginSettings(cfg Config) (values map[string]any, engineStart, pluginStart, pluginCall time.Duration, err error) {
	cfg = WithDefaults(cfg)
	desc, err := ReadDescription(PluginPath(cfg.PluginDir, cfg.TransportName))
	if err != nil {
		return nil, 0, 0, 0, err
	}
	if values, err = ForPlugin(desc, cfg); err != nil {
		return nil, 0, 0, 0, err
	}
	b := BoundsOf(desc, values)
	return values, b.EngineStart, b.PluginStart, b.PluginCall, nil
}
