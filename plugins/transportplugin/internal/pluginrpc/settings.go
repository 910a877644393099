package pluginrpc

import (
	"fmt"
	"slices"
	"time"

	pb "github.com/kernelhost/kernelhost/plugins/transportplugin/proto"
)

// Settings are the settings the host passed the plugin, by name
// (transportplugin.Settings); Configuration makes a plugin's configuration
// of them.
type Settings struct {
	values map[string]any
}

// NewSettings is Settings holding values (each of a type Settings names),
// for tests of a plugin's settings type.
func NewSettings(values map[string]any) Settings {
	return Settings{values: values}
}

func (s Settings) names() []string {
	names := make([]string, 0, len(s.values))
	for k := range s.values {
		names = append(names, k)
	}
	slices.Sort(names)
	return names
}

// settingsToPB encodes settings for the plugin protocol: values of the types
// Settings names (an int is taken as an int64).
func settingsToPB(values map[string]any) (map[string]*pb.SettingValue, error) {
	out := make(map[string]*pb.SettingValue, len(values))
	for name, v := range values {
		var sv pb.SettingValue
		switch v := v.(type) {
		case string:
			sv.Value = &pb.SettingValue_Text{Text: []byte(v)}
		case bool:
			sv.Value = &pb.SettingValue_Flag{Flag: v}
		case int:
			sv.Value = &pb.SettingValue_Integer{Integer: int64(v)}
		case int64:
			sv.Value = &pb.SettingValue_Integer{Integer: v}
		case time.Duration:
			sv.Value = &pb.SettingValue_DurationNanos{DurationNanos: int64(v)}
		case map[string]string:
			sv.Value = &pb.SettingValue_Object{Object: &pb.StringMap{Entries: v}}
		default:
			return nil, fmt.Errorf("setting %s: a %T cannot be passed to a plugin", name, v)
		}
		out[name] = &sv
	}
	return out, nil
}

// settingsFromPB decodes the settings of a Configure call.
func settingsFromPB(in map[string]*pb.SettingValue) (Settings, error) {
	values := make(map[string]any, len(in))
	for name, sv := range in {
		switch v := sv.GetValue().(type) {
		case *pb.SettingValue_Text:
			values[name] = string(v.Text)
		case *pb.SettingValue_Flag:
			values[name] = v.Flag
		case *pb.SettingValue_Integer:
			values[name] = v.Integer
		case *pb.SettingValue_DurationNanos:
			values[name] = time.Duration(v.DurationNanos)
		case *pb.SettingValue_Object:
			values[name] = v.Object.GetEntries() // empty: nil, as unset
		default:
			return Settings{}, fmt.Errorf("setting %s: a value of no known type (a newer host?)", name)
		}
	}
	return Settings{values: values}, nil
}

// Each calls fn with every setting, in the order of their names, until fn
// returns an error, which Each returns.
func (s Settings) Each(fn func(name string, v any) error) error {
	for _, name := range s.names() {
		if err := fn(name, s.values[name]); err != nil {
			return err
		}
	}
	return nil
}
