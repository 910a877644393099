package pluginrpc

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

// Settings cross the protocol with their types and decode into a plugin's
// struct; a setting the struct lacks, or of another type, is an error that
// names the setting and not its value (a token).
func TestSettingsRoundTrip(t *testing.T) {
	type target struct {
		Text     string            `setting:"text"`
		Flag     bool              `setting:"flag"`
		Count    int               `setting:"count"`
		Big      int64             `setting:"big"`
		Wait     time.Duration     `setting:"wait"`
		Object   map[string]string `setting:"object"`
		Empty    map[string]string `setting:"empty"`
		Untagged string
		Kept     string `setting:"kept"`
	}
	sent := map[string]any{"text": "a\xffb", "flag": true, "count": 3, "big": int64(1) << 40, "wait": 90 * time.Second,
		"object": map[string]string{"K": "v"}, "empty": map[string]string(nil)}
	wire, err := settingsToPB(sent)
	if err != nil {
		t.Fatal(err)
	}
	got, err := settingsFromPB(wire)
	if err != nil {
		t.Fatal(err)
	}
	dst := target{Kept: "default"}
	if err := got.Decode(&dst); err != nil {
		t.Fatal(err)
	}
	want := target{Text: "a\xffb", Flag: true, Count: 3, Big: 1 << 40, Wait: 90 * time.Second, Object: map[string]string{"K": "v"}, Kept: "default"}
	if !reflect.DeepEqual(dst, want) {
		t.Fatalf("decoded %+v, want %+v", dst, want)
	}

	for name, tc := range map[string]struct {
		values map[string]any
		want   string
	}{
		"unknown setting":        {map[string]any{"texts": "x"}, "setting texts: this plugin takes no such setting"},
		"duration for a string":  {map[string]any{"text": time.Second}, "setting text: a time.Duration does not fit"},
		"integer for a duration": {map[string]any{"wait": int64(5)}, "setting wait: a int64 does not fit"},
		"string for an object":   {map[string]any{"object": "secret-value"}, "setting object: a string does not fit"},
	} {
		t.Run(name, func(t *testing.T) {
			err := NewSettings(tc.values).Decode(&target{})
			if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "secret-value") {
				t.Fatalf("error %v, want one with %q that does not echo the value", err, tc.want)
			}
		})
	}
	if _, err := settingsToPB(map[string]any{"f": 1.5}); err == nil {
		t.Fatal("a float64 setting was accepted")
	}
	if err := NewSettings(nil).Decode(target{}); err == nil {
		t.Fatal("Decode into a struct value (not a pointer) was accepted")
	}
}
