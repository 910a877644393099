package pluginrpc

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

// Settings cross the protocol with their types and make a plugin's
// configuration, the declared defaults filling what the host did not pass;
// a setting the plugin does not declare, or of another type, is an error
// that names the setting and not its value (a token).
func TestSettingsRoundTrip(t *testing.T) {
	t.Parallel()
	type target struct {
		Text   string
		Flag   bool
		Count  int
		Wait   time.Duration
		Object map[string]string
		Empty  map[string]string
		Kept   string
	}
	settings := []Setting[target]{
		StringSetting("text", "", "", func(c *target) *string { return &c.Text }),
		BoolSetting("flag", false, "", func(c *target) *bool { return &c.Flag }),
		IntSetting("count", 0, "", func(c *target) *int { return &c.Count }),
		DurationSetting("wait", 0, "", func(c *target) *time.Duration { return &c.Wait }),
		ObjectSetting("object", "", func(c *target) *map[string]string { return &c.Object }),
		ObjectSetting("empty", "", func(c *target) *map[string]string { return &c.Empty }),
		StringSetting("kept", "default", "", func(c *target) *string { return &c.Kept }),
		FileSetting[target]("text-file", "text", ""),
	}
	sent := map[string]any{"text": "a\xffb", "flag": true, "count": 3, "wait": 90 * time.Second,
		"object": map[string]string{"K": "v"}, "empty": map[string]string(nil)}
	wire, err := settingsToPB(sent)
	if err != nil {
		t.Fatal(err)
	}
	got, err := settingsFromPB(wire)
	if err != nil {
		t.Fatal(err)
	}
	dst, err := Configuration(settings, got)
	if err != nil {
		t.Fatal(err)
	}
	want := target{Text: "a\xffb", Flag: true, Count: 3, Wait: 90 * time.Second, Object: map[string]string{"K": "v"}, Kept: "default"}
	if !reflect.DeepEqual(dst, want) {
		t.Fatalf("configuration %+v, want %+v", dst, want)
	}

	for name, tc := range map[string]struct {
		values map[string]any
		want   string
	}{
		"unknown setting":        {map[string]any{"texts": "x"}, "setting texts: this plugin takes no such setting"},
		"the host's file":        {map[string]any{"text-file": "/run/token"}, "setting text-file: this plugin takes no such setting"},
		"duration for a string":  {map[string]any{"text": time.Second}, "setting text: a time.Duration does not fit"},
		"integer for a duration": {map[string]any{"wait": int64(5)}, "setting wait: a int64 does not fit"},
		"string for an object":   {map[string]any{"object": "secret-value"}, "setting object: a string does not fit"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Configuration(settings, NewSettings(tc.values))
			if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "secret-value") {
				t.Fatalf("error %v, want one with %q that does not echo the value", err, tc.want)
			}
		})
	}
	if _, err := settingsToPB(map[string]any{"f": 1.5}); err == nil {
		t.Fatal("a float64 setting was accepted")
	}
}
