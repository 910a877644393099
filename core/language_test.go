package core

import "testing"

func TestNormalizeLanguage(t *testing.T) {
	for in, want := range map[string]string{"": "python", " JS ": "javascript", "ts": "typescript", "Python": "python", "r": "r", "Java": "java"} {
		if got := NormalizeLanguage(in); got != want {
			t.Errorf("NormalizeLanguage(%q) = %q, want %q", in, got, want)
		}
	}
	if KernelLanguage("typescript") != "javascript" {
		t.Error("typescript must run on the javascript kernel")
	}
}
