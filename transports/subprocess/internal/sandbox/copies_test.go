package sandbox

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// Two Python files repeat this package's lists, as Python cannot read
// Go's: the fork server covers a forked context's own /proc with
// kernelKnobs itself, and the Jupyter kernels' launcher is a separate
// sandbox with the same walls. Nothing else keeps the copies equal: a
// knob added here and missed there leaves it writable in forked contexts
// or Jupyter kernels, with every other test still passing.
func TestPythonCopiesOfTheWalls(t *testing.T) {
	const (
		forkserver = "../../drivers/forkserver.py"
		jupyter    = "../../../../deploy/jupyter/kernels/python3/sandbox.py"
	)
	// The fork server names the entries under /proc, without the prefix.
	var knobs []string
	for _, k := range pythonTuple(t, forkserver, "_KERNEL_KNOBS") {
		knobs = append(knobs, "/proc/"+k)
	}
	sameEntries(t, forkserver+" _KERNEL_KNOBS", knobs, kernelKnobs)
	sameEntries(t, jupyter+" KERNEL_KNOBS", pythonTuple(t, jupyter, "KERNEL_KNOBS"), kernelKnobs)
	// The whole list must match: the launcher adds $IPYTHONDIR on its own
	// (a Jupyter server sets it for its kernels), outside USER_DIRS.
	sameEntries(t, jupyter+" USER_DIRS", pythonTuple(t, jupyter, "USER_DIRS"), userDirs)
}

// pythonTuple is the tuple of string literals assigned to name at the
// start of a line of the Python file path (a literal that may span lines).
func pythonTuple(t *testing.T, path, name string) []string {
	t.Helper()
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `\s*=\s*\(([^)]*)\)`).FindSubmatch(src)
	if m == nil {
		t.Fatalf("%s: no %s = (...) tuple; if it was renamed or moved, update this test", path, name)
	}
	var entries []string
	for _, s := range regexp.MustCompile(`"([^"]*)"|'([^']*)'`).FindAllStringSubmatch(string(m[1]), -1) {
		entries = append(entries, s[1]+s[2])
	}
	if len(entries) == 0 {
		t.Fatalf("%s: %s holds no string literal", path, name)
	}
	return entries
}

// sameEntries fails naming what the copy at where lacks of want and adds to it.
func sameEntries(t *testing.T, where string, got, want []string) {
	t.Helper()
	var missing, extra []string
	for _, w := range want {
		if !slices.Contains(got, w) {
			missing = append(missing, w)
		}
	}
	for _, g := range got {
		if !slices.Contains(want, g) {
			extra = append(extra, g)
		}
	}
	if len(missing) > 0 || len(extra) > 0 {
		t.Errorf("%s differs from the Go list: missing %s; extra %s", where, list(missing), list(extra))
	}
}

func list(entries []string) string {
	if len(entries) == 0 {
		return "none"
	}
	return strings.Join(entries, ", ")
}
