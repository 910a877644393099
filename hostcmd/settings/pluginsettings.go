package settings

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/kernelhost/kernelhost/plugins/transportplugin/pluginhost"
)

// The transport plugins' settings: each plugin declares its own
// (transportplugin.Setting) and prints their description when run with
// -describe; the host merges them into its settings table's flags,
// variables, config file keys and -help (Load), checks the values against
// the descriptions, and passes each plugin the ones it declares
// (launchTransport). docs/RATIONALE.md weighs asking the plugins.

// PluginPrefix starts the file name of every transport plugin.
const PluginPrefix = "kernelhost-transport-"

// PluginPath is the executable of the transport plugin called name in dir.
func PluginPath(dir, name string) string {
	return filepath.Join(dir, PluginPrefix+name)
}

// describeTimeout bounds one plugin's -describe run: a Go binary answers in
// milliseconds; one that hangs must not hold -help or a start-up.
const describeTimeout = 10 * time.Second

// pluginCatalog is what the transport plugins of a directory say of their
// settings.
type pluginCatalog struct {
	dir    string
	dirErr error                             // the directory could not be read
	descs  map[string]pluginhost.Description // by transport name
	failed map[string]error                  // transport name → why it has no description
	// specs are the settings registered as flags, by name.
	specs map[string]pluginhost.SettingSpec
}

// describePlugins runs every transport plugin in dir with -describe, at
// once. A plugin that does not answer is noted in failed, not an error: its
// settings are then unknown, and the others' still work.
func describePlugins(dir string) *pluginCatalog {
	cat := &pluginCatalog{dir: dir, descs: map[string]pluginhost.Description{}, failed: map[string]error{}}
	entries, err := os.ReadDir(dir)
	if err != nil {
		cat.dirErr = err
		return cat
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, e := range entries {
		name, ok := strings.CutPrefix(e.Name(), PluginPrefix)
		if !ok || name == "" || e.IsDir() {
			continue
		}
		wg.Go(func() {
			d, err := ReadDescription(PluginPath(dir, name))
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				cat.failed[name] = err
			} else {
				cat.descs[name] = d
			}
		})
	}
	wg.Wait()
	return cat
}

// readDescription is the description of the plugin at path.
func ReadDescription(path string) (pluginhost.Description, error) {
	if fi, err := os.Stat(path); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
		return pluginhost.Description{}, errors.New("not an executable file")
	}
	ctx, cancel := context.WithTimeout(context.Background(), describeTimeout)
	defer cancel()
	return pluginhost.Describe(ctx, path)
}

// register adds a flag to fs for every setting the plugins describe but
// those of the host (fs's flags before) they receive. A setting two plugins
// describe alike is one flag, whose value both get; a plugin whose setting
// clashes with the host's or another plugin's is noted in failed, its
// settings left out.
func (cat *pluginCatalog) register(fs *flag.FlagSet) {
	cat.specs = map[string]pluginhost.SettingSpec{}
	names := make([]string, 0, len(cat.descs))
	for name := range cat.descs {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, plugin := range names {
		d := cat.descs[plugin]
		if err := cat.clash(fs, d); err != nil {
			cat.failed[plugin] = err
			delete(cat.descs, plugin)
			continue
		}
		for _, s := range d.Settings {
			if _, ok := cat.specs[s.Name]; ok || s.Type == pluginhost.TypeHost {
				continue
			}
			if err := registerSpec(fs, s); err != nil {
				// check: the description was checked, its defaults are not
				cat.failed[plugin] = err
				continue
			}
			cat.specs[s.Name] = s
		}
	}
}

// clash is why d's settings cannot be flags of fs beside those registered.
func (cat *pluginCatalog) clash(fs *flag.FlagSet, d pluginhost.Description) error {
	for _, s := range d.Settings {
		prev, shared := cat.specs[s.Name]
		switch {
		case s.Type == pluginhost.TypeHost:
			if fs.Lookup(s.Name) == nil && s.Name != hiddenPathsSetting { // hidden.go: not a flag
				return fmt.Errorf("it takes the host's setting %s, which the host does not have", s.Name)
			}
		case shared && (prev.Type != s.Type || prev.Default != s.Default):
			return fmt.Errorf("its setting %s differs from another plugin's of that name", s.Name)
		case !shared && fs.Lookup(s.Name) != nil:
			return fmt.Errorf("its setting %s is one of the host's", s.Name)
		}
	}
	return nil
}

// registerSpec adds the flag of s to fs, of the Go type of its setting type,
// so flag parses it and -help names its type as for any flag.
func registerSpec(fs *flag.FlagSet, s pluginhost.SettingSpec) error {
	switch s.Type {
	case pluginhost.TypeString, pluginhost.TypeObject, pluginhost.TypeFile:
		fs.String(s.Name, s.Default, s.Help)
	case pluginhost.TypeInt:
		def, err := parseDefault(s, func(v string) (int64, error) { return strconv.ParseInt(v, 10, 64) })
		if err != nil {
			return err
		}
		fs.Int64(s.Name, def, s.Help)
	case pluginhost.TypeBool:
		def, err := parseDefault(s, strconv.ParseBool)
		if err != nil {
			return err
		}
		fs.Bool(s.Name, def, s.Help)
	case pluginhost.TypeDuration:
		def, err := parseDefault(s, time.ParseDuration)
		if err != nil {
			return err
		}
		fs.Duration(s.Name, def, s.Help)
	}
	return nil
}

func parseDefault[T any](s pluginhost.SettingSpec, parse func(string) (T, error)) (T, error) {
	var zero T
	if s.Default == "" {
		return zero, nil
	}
	v, err := parse(s.Default)
	if err != nil {
		return zero, fmt.Errorf("its setting %s has the default %q: %w", s.Name, s.Default, err)
	}
	return v, nil
}

// values are the plugins' settings set in fs (by a flag, a variable or the
// config file), as text, checked against their descriptions; a file setting
// (jupyter-token-file) is read into the setting it holds.
func (cat *pluginCatalog) values(fs *flag.FlagSet) (map[string]string, error) {
	out := map[string]string{}
	fs.Visit(func(f *flag.Flag) {
		if _, ok := cat.specs[f.Name]; ok {
			out[f.Name] = f.Value.String()
		}
	})
	for name, text := range out {
		if _, err := checkSetting(cat.specs[name], text); err != nil {
			return nil, err
		}
	}
	if err := readFileSettings(cat.specs, out); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, nil
	}
	return out, nil
}

// readFileSettings replaces each file setting in values by the setting it
// holds, read from the file.
func readFileSettings(specs map[string]pluginhost.SettingSpec, values map[string]string) error {
	for name, file := range values {
		s := specs[name]
		if s.Type != pluginhost.TypeFile {
			continue
		}
		delete(values, name)
		if file == "" {
			continue
		}
		if values[s.FileOf] != "" {
			return fmt.Errorf("%s and %s are both set: give it one way", s.FileOf, name)
		}
		text, err := readSecretFile(name, file)
		if err != nil {
			return err
		}
		values[s.FileOf] = text
	}
	return nil
}

// readSecretFile is the content of the file of setting name, trailing line
// breaks dropped; an empty one is an error.
func readSecretFile(name, file string) (string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("%s: %w", name, err)
	}
	text := strings.TrimRight(string(b), "\r\n")
	if text == "" {
		return "", fmt.Errorf("%s %s is empty", name, file)
	}
	return text, nil
}

// checkSetting parses text as the value of s and checks it against s's
// bounds. Its errors name the setting and its variable; an object's never
// quote its text (it may hold secrets).
func checkSetting(s pluginhost.SettingSpec, text string) (any, error) {
	fail := func(err error) error { return fmt.Errorf("%s %w (%s)", s.Name, err, EnvVar(s.Name)) }
	switch s.Type {
	case pluginhost.TypeString, pluginhost.TypeFile, pluginhost.TypeHost:
		if len(s.OneOf) > 0 && !slices.Contains(s.OneOf, text) {
			return nil, fail(fmt.Errorf("must be %s, got %q", orList(s.OneOf), text))
		}
		return text, nil
	case pluginhost.TypeObject:
		return parseObject(s.Name, text)
	case pluginhost.TypeBool:
		v, err := strconv.ParseBool(text)
		if err != nil {
			return nil, fail(fmt.Errorf("want true or false, got %q", text))
		}
		return v, nil
	case pluginhost.TypeInt:
		v, err := strconv.ParseInt(text, 10, 64)
		if err != nil {
			return nil, fail(fmt.Errorf("want an integer, got %q", text))
		}
		if err := checkRange(s, v, func(n int64) string { return strconv.FormatInt(n, 10) }); err != nil {
			return nil, fail(err)
		}
		return v, nil
	case pluginhost.TypeDuration:
		v, err := time.ParseDuration(text)
		if err != nil {
			return nil, fail(fmt.Errorf("want a duration such as 90s, got %q", text))
		}
		if err := checkRange(s, int64(v), func(n int64) string { return time.Duration(n).String() }); err != nil {
			return nil, fail(err)
		}
		return v, nil
	}
	return nil, fail(fmt.Errorf("is of the unknown type %q", s.Type))
}

// checkRange checks v against s.Min and s.Max; show writes a bound as the
// setting's type does.
func checkRange(s pluginhost.SettingSpec, v int64, show func(int64) string) error {
	switch {
	case s.Min != nil && s.Max != nil && (v < *s.Min || v > *s.Max):
		return fmt.Errorf("must be between %s and %s, got %s", show(*s.Min), show(*s.Max), show(v))
	case s.Min != nil && v < *s.Min && *s.Min == 1:
		return fmt.Errorf("must be positive, got %s", show(v))
	case s.Min != nil && v < *s.Min && *s.Min == 0:
		return fmt.Errorf("must not be negative, got %s", show(v))
	case s.Min != nil && v < *s.Min:
		return fmt.Errorf("must be at least %s, got %s", show(*s.Min), show(v))
	case s.Max != nil && v > *s.Max:
		return fmt.Errorf("must be at most %s, got %s", show(*s.Max), show(v))
	}
	return nil
}

// orList is "a, b or c".
func orList(words []string) string {
	if len(words) == 1 {
		return words[0]
	}
	return strings.Join(words[:len(words)-1], ", ") + " or " + words[len(words)-1]
}

// ForPlugin are the settings the plugin described by d receives from cfg,
// typed: those of cfg.TransportSettings it declares (a file setting read
// into the one it holds), checked against d, and the host's settings it
// takes. Settings it declares and cfg leaves unset keep the plugin's
// defaults.
func ForPlugin(d pluginhost.Description, cfg Config) (map[string]any, error) {
	specs := map[string]pluginhost.SettingSpec{}
	values := map[string]string{}
	for _, s := range d.Settings {
		specs[s.Name] = s
		if v, ok := cfg.TransportSettings[s.Name]; ok && s.Type != pluginhost.TypeHost {
			values[s.Name] = v
		}
	}
	if err := readFileSettings(specs, values); err != nil {
		return nil, err
	}
	out := map[string]any{}
	for name, text := range values {
		v, err := checkSetting(specs[name], text)
		if err != nil {
			return nil, err
		}
		out[name] = v
	}
	for _, s := range d.Settings {
		if s.Type == pluginhost.TypeHost {
			v, err := hostSetting(cfg, s.Name, specs)
			if err != nil {
				return nil, err
			}
			out[s.Name] = v
		}
	}
	return out, nil
}

// hostSetting is the host's setting name in cfg, as text, for a plugin that
// takes it (specs are the plugin's settings).
func hostSetting(cfg Config, name string, specs map[string]pluginhost.SettingSpec) (string, error) {
	if name == hiddenPathsSetting {
		return strings.Join(cfg.PrivatePaths(specs), "\n"), nil
	}
	for _, s := range settingsTable {
		if s.flagName() == name {
			return s.text(&cfg), nil
		}
	}
	return "", fmt.Errorf("the transport plugin takes the host's setting %s, which the host does not have", name)
}

// preScan finds the value of the host's setting name (plugin-dir) before
// the flags are parsed, for the flags that depend on it: on the command
// line, else in its variable, else in the config file; "" when none has
// it. It is lenient: whatever it gets wrong, the full parse reports.
func preScan(name string, args []string, getenv func(string) string) string {
	if v, ok := scanArgs(name, args); ok {
		return v
	}
	if v := getenv(EnvVar(name)); v != "" {
		return v
	}
	path, ok := scanArgs(configFlag, args)
	if !ok {
		path = getenv(EnvVar(configFlag))
	}
	if path == "" {
		return ""
	}
	var keys map[string]any
	if _, err := toml.DecodeFile(path, &keys); err != nil {
		return ""
	}
	v, _ := keys[name].(string)
	return v
}

// scanArgs finds -name's value in args as flag would parse it: the last one
// given, before the first argument that is no flag.
func scanArgs(name string, args []string) (v string, ok bool) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" || len(a) < 2 || a[0] != '-' {
			break
		}
		n, val, hasVal := strings.Cut(strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-"), "=")
		if n != name {
			// Another flag's value ("-config x.toml") is not where the
			// flags end: serve takes no arguments, so a word after a flag
			// given without "=" is that flag's value.
			if !hasVal && i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") {
				i++
			}
			continue
		}
		if !hasVal {
			if i+1 >= len(args) {
				break
			}
			i++
			val = args[i]
		}
		v, ok = val, true
	}
	return v, ok
}

// missing says which plugins' settings are not among the flags, and why:
// for -help, and after an unknown flag. "" when every plugin described its
// settings.
func (cat *pluginCatalog) missing() string {
	if cat.dirErr != nil {
		return fmt.Sprintf("The transport plugins' settings (python, jupyter-url, ...) are not listed: the plugin directory %s cannot be read (%v); make plugins builds the plugins into bin/plugins, -plugin-dir names another directory.", cat.dir, cat.dirErr)
	}
	if len(cat.descs) == 0 && len(cat.failed) == 0 {
		return fmt.Sprintf("The transport plugins' settings (python, jupyter-url, ...) are not listed: the plugin directory %s has no %s* executables; make plugins builds them into bin/plugins, -plugin-dir names another directory.", cat.dir, PluginPrefix)
	}
	if len(cat.failed) == 0 {
		return ""
	}
	names := make([]string, 0, len(cat.failed))
	for name := range cat.failed {
		names = append(names, name)
	}
	slices.Sort(names)
	var b strings.Builder
	fmt.Fprintf(&b, "Transport plugins in %s whose settings are not listed, as they could not describe them:", cat.dir)
	for _, name := range names {
		fmt.Fprintf(&b, "\n  %s: %v", name, cat.failed[name])
	}
	return b.String()
}

// explain adds to a flag parsing error which plugins' settings are unknown,
// when some are: the setting may be one of theirs.
func (cat *pluginCatalog) explain(err error) error {
	msg := err.Error()
	if !strings.Contains(msg, "flag provided but not defined") && !strings.Contains(msg, "unknown setting") {
		return err
	}
	if note := cat.missing(); note != "" {
		return fmt.Errorf("%w\n%s", err, note)
	}
	return err
}

// SetTransportSetting sets the transport plugins' setting name
// (TransportSettings) to value, as a flag takes it.
func (c *Config) SetTransportSetting(name, value string) {
	if c.TransportSettings == nil {
		c.TransportSettings = map[string]string{}
	}
	c.TransportSettings[name] = value
}

// KeepTransportDescription reads the description of the transport plugin
// c names, unless Load did, so that TransportDescription answers from it
// for all who need it before the launch.
func (c *Config) KeepTransportDescription() {
	c.plugins = c.plugins.withDescription(c.PluginDir, c.TransportName)
}

// TransportDescription is what the transport plugin c names says of its
// settings.
func (c Config) TransportDescription() (pluginhost.Description, error) {
	return c.plugins.description(c.PluginDir, c.TransportName)
}

// PluginSpecs are the settings the transport plugins declared, by name, as
// Load registered them; nil for a Config made in code.
func (c Config) PluginSpecs() map[string]pluginhost.SettingSpec {
	if c.plugins == nil {
		return nil
	}
	return c.plugins.specs
}

// description is the description of the plugin name in dir: the one cat
// has, when cat (which may be nil) holds that directory's, else the
// plugin's answer now.
// withDescription is cat, or a catalog of plugin name alone if cat does not
// hold it, so that the description is read once for all who need it before
// the launch (resolveDefaultCwd, launchTransport). A description that
// cannot be read leaves cat as it is: the launch reports why.
func (cat *pluginCatalog) withDescription(dir, name string) *pluginCatalog {
	if cat != nil && cat.dir == dir {
		if _, ok := cat.descs[name]; ok {
			return cat
		}
	}
	d, err := ReadDescription(PluginPath(dir, name))
	if err != nil {
		return cat
	}
	return &pluginCatalog{dir: dir, descs: map[string]pluginhost.Description{name: d}}
}

func (cat *pluginCatalog) description(dir, name string) (pluginhost.Description, error) {
	if cat != nil && cat.dir == dir {
		if d, ok := cat.descs[name]; ok {
			return d, nil
		}
	}
	return ReadDescription(PluginPath(dir, name))
}

// boundsMargin is what the host's bounds on a kernel start or restart leave
// beyond the transport's own, for the steps around them (the cwd snippet
// after a start, the plugin call itself).
const boundsMargin = 30 * time.Second

// KernelBounds are the host's bounds on kernel starts and restarts: the
// engine's (engine.Config.StartTimeout) and the plugin calls'. Zero: their
// defaults.
type KernelBounds struct {
	EngineStart, PluginStart, PluginCall time.Duration
}

// BoundsOf raises the host's bounds above the transport's own bounds on
// kernel starts and restarts (the settings its description marks as such,
// the jupyter plugin's timeouts), so that a slow start or restart the
// settings allow is not cut short by a fixed bound of the host (60 s the
// engine's, 120 s the plugin's). values are the plugin's settings as
// settings.ForPlugin makes them; a bound not among them has its default.
func BoundsOf(d pluginhost.Description, values map[string]any) KernelBounds {
	var start, restart time.Duration
	for _, s := range d.Settings {
		if s.KernelBound == "" {
			continue
		}
		v, ok := values[s.Name].(time.Duration)
		if !ok {
			v, _ = time.ParseDuration(s.Default)
		}
		switch s.KernelBound {
		case pluginhost.BoundStart:
			start += v
		case pluginhost.BoundRestart:
			restart += v
		}
	}
	if start == 0 && restart == 0 {
		return KernelBounds{}
	}
	EngineStart := max(time.Minute, start+boundsMargin, restart+boundsMargin)
	return KernelBounds{
		EngineStart: EngineStart,
		PluginStart: EngineStart + boundsMargin,
		PluginCall:  max(time.Minute, restart+boundsMargin),
	}
}
