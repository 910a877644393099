package sandbox

import (
	"path/filepath"
	"strings"
	"testing"
)

// A bwrap that PATH finds in a path every sandbox may write (one the
// operator listed in -sandbox-writable) is refused: a context could
// replace it, and the next start would run it as the host.
func TestBwrapInAWritablePathIsRefused(t *testing.T) {
	ws := t.TempDir()
	planted := filepath.Join(ws, "bin", "bwrap")
	probe := func() (*Sandbox, error) { return &Sandbox{bwrap: planted}, nil }
	_, _, err := New(Options{Mode: On, Writable: []string{ws}}, probe)
	if err == nil || !strings.Contains(err.Error(), "in a place sandboxed code can write") {
		t.Fatalf("bwrap under a writable path: %v, want a refusal", err)
	}
}

// A path to hide that holds one the sandbox must show (the workspace, the
// drivers' cache) is left visible, and the transport says so.
func TestHiddenPathHoldingAWritableOneIsNoted(t *testing.T) {
	ws := t.TempDir()
	parent := filepath.Dir(ws)
	hidden, notes := hiddenPaths([]string{parent, filepath.Join(ws, "nothing-here")}, []string{ws})
	if len(hidden) != 0 || len(notes) != 1 || !strings.Contains(notes[0], parent) {
		t.Fatalf("hidden %q, notes %q: want %s noted, the missing path left out", hidden, notes, parent)
	}
}

// pasta forwards nothing into a context nor from it to the host's
// loopback, whoever runs it. -T is also held by behaviour
// (TestNetworkHostLoopbackUnreachable); -t, -u, -U and --no-map-gw are
// checked here only: this pasta forwards nothing inward by itself, and the
// gateway's address is another machine's, which tests must not reach.
func TestPastaArgsForwardNothing(t *testing.T) {
	for _, join := range []bool{false, true} {
		args := strings.Join(pastaArgs(join), " ")
		for _, want := range []string{"-t none", "-u none", "-T none", "-U none", "--no-map-gw", "--foreground"} {
			if !strings.Contains(args, want) {
				t.Errorf("pasta's arguments %q lack %q", args, want)
			}
		}
	}
}
