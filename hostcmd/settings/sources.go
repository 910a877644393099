package settings

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/BurntSushi/toml"
)

// configFlag names the config file setting: -config, KERNELHOST_CONFIG.
const configFlag = "config"

// parseSources fills fs from its three sources, each setting from the first
// that has it: the command line (args), then its environment variable
// (EnvVar), then the TOML config file named by -config or KERNELHOST_CONFIG;
// a setting in none keeps its default. It is the one place that knows the
// precedence, and it knows no setting by name: a flag added to fs gets its
// variable and its config key with it.
func parseSources(fs *flag.FlagSet, args []string, getenv func(string) string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	taken := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { taken[f.Name] = true })
	if err := applyEnv(fs, getenv, taken); err != nil {
		return err
	}
	if f := fs.Lookup(configFlag); f != nil && f.Value.String() != "" {
		return applyConfigFile(fs, f.Value.String(), taken)
	}
	return nil
}

// applyEnv sets every flag not in taken from its environment variable,
// through the flag itself so that parsing is the same, and adds it to taken.
// An empty variable counts as unset.
func applyEnv(fs *flag.FlagSet, getenv func(string) string, taken map[string]bool) error {
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if taken[f.Name] || err != nil {
			return
		}
		key := EnvVar(f.Name)
		if v := getenv(key); v != "" {
			if e := fs.Set(f.Name, v); e != nil {
				err = fmt.Errorf("%s=%q: %w", key, v, e)
			}
			taken[f.Name] = true
		}
	})
	return err
}

// applyConfigFile sets the flags not in taken from the config file at path: a
// flat TOML table whose keys are flag names. Every key is checked, taken or
// not: an unknown key or a value of the wrong TOML type is an error naming the
// file, the line and the key, so a typo never goes unnoticed because a flag
// happened to override it.
func applyConfigFile(fs *flag.FlagSet, path string, taken map[string]bool) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("config file: %w", err)
	}
	var keys map[string]toml.Primitive
	md, err := toml.Decode(string(data), &keys)
	if err != nil {
		return configError(path, err)
	}
	// In the file's order, so the first bad line is the one reported.
	for _, k := range md.Keys() {
		if len(k) != 1 {
			continue // inside a table: the table's own key is reported
		}
		s := &configSetting{fs: fs, name: k[0], apply: !taken[k[0]]}
		if err := md.PrimitiveDecode(keys[k[0]], s); err != nil {
			return configError(path, err)
		}
	}
	return nil
}

// configError puts the file and line in front of a TOML error.
func configError(path string, err error) error {
	var pe toml.ParseError
	if !errors.As(err, &pe) {
		return fmt.Errorf("config file %s: %w", path, err)
	}
	msg := pe.Message
	if pe.LastKey != "" {
		msg = pe.LastKey + ": " + msg
	}
	return fmt.Errorf("config file %s:%d: %s", path, pe.Position.Line, msg)
}

// configSetting decodes one top-level key of the config file into its flag.
// It is a toml.Unmarshaler so that its errors come back from the decoder as
// ParseErrors carrying the key's line.
type configSetting struct {
	fs    *flag.FlagSet
	name  string
	apply bool // false: a flag or variable set it; check the value only
}

func (s *configSetting) UnmarshalTOML(v any) error {
	f := s.fs.Lookup(s.name)
	if f == nil || s.name == configFlag {
		return fmt.Errorf("unknown setting (the keys are the flag names of %s -help)", s.fs.Name())
	}
	text, err := configText(f, v)
	if err != nil {
		return err
	}
	if !s.apply {
		return nil
	}
	if err := s.fs.Set(s.name, text); err != nil {
		return fmt.Errorf("invalid value %q: %w", text, err)
	}
	return nil
}

// configText is the flag text of a TOML value, if its type fits the flag's:
// an integer for an integer flag, true/false for a boolean, a number for a
// float, a string for every other flag (durations are strings like "5s").
func configText(f *flag.Flag, v any) (string, error) {
	want := "string" // also for flag.Func and other values without a Getter
	if g, ok := f.Value.(flag.Getter); ok {
		switch g.Get().(type) {
		case bool:
			want = "boolean"
		case int, int64, uint, uint64:
			want = "integer"
		case float64:
			want = "number"
		case time.Duration:
			want = "duration"
		}
	}
	switch v := v.(type) {
	case string:
		if want == "string" || want == "duration" {
			return v, nil
		}
	case int64:
		if want == "integer" || want == "number" {
			return fmt.Sprint(v), nil
		}
	case float64:
		if want == "number" {
			return fmt.Sprint(v), nil
		}
	case bool:
		if want == "boolean" {
			return fmt.Sprint(v), nil
		}
	}
	if want == "duration" {
		return "", fmt.Errorf("want a duration string such as \"5s\" or \"1m30s\", got %s", tomlType(v))
	}
	return "", fmt.Errorf("want %s %s, got %s", article(want), want, tomlType(v))
}

func tomlType(v any) string {
	switch v.(type) {
	case string:
		return "a string"
	case int64:
		return "an integer"
	case float64:
		return "a float"
	case bool:
		return "a boolean"
	case map[string]any:
		return "a table"
	case []any, []map[string]any:
		return "an array"
	default:
		return fmt.Sprintf("a %T", v) // dates and times
	}
}

func article(word string) string {
	if word[0] == 'i' {
		return "an"
	}
	return "a"
}
