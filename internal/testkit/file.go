package testkit

import (
	"os"
	"testing"
)

// WriteFile writes text to path (mode 0644), failing the test if it cannot.
func WriteFile(tb testing.TB, path, text string) {
	tb.Helper()
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		tb.Fatal(err)
	}
}
