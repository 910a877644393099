package cgroup

import "testing"

func TestParseBytes(t *testing.T) {
	for in, want := range map[string]int64{"": 0, "0": 0, "512MiB": 512 << 20, "2G": 2e9, "1.5GiB": 3 << 29, "4096": 4096, "64 KiB": 64 << 10} {
		if got, err := ParseBytes(in); err != nil || got != want {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"x", "12 parsecs", "-1M", "1e30"} {
		if _, err := ParseBytes(in); err == nil {
			t.Errorf("ParseBytes(%q): no error", in)
		}
	}
}
