package core

import (
	"strings"
	"testing"
)

func TestQuoteClipsAtARuneBoundary(t *testing.T) {
	long := strings.Repeat("é", MaxShownBytes) // 2 bytes each
	for _, tc := range []struct{ got, want string }{
		{Quote("cobol"), `"cobol"`},
		{Quote("a\nb"), `"a\nb"`},
		{Quote(long), `"` + strings.Repeat("é", MaxShownBytes/2) + `"... (256 bytes)`},
		{Quote("x" + long), `"x` + strings.Repeat("é", MaxShownBytes/2-1) + `"... (257 bytes)`},
		{Clip("/contexts/x"), "/contexts/x"},
		{Clip(strings.Repeat("y", 300)), strings.Repeat("y", MaxShownBytes) + "... (300 bytes)"},
		{ShowID("0b5e-9f:x_y.z"), "0b5e-9f:x_y.z"},
		{ShowID("a b"), `"a b"`},
		{ShowID(""), `""`},
	} {
		if tc.got != tc.want {
			t.Errorf("got %s, want %s", tc.got, tc.want)
		}
	}
}
