package testkit

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// SkipPythonShim makes python3 on PATH, for this process and all it
// starts, the interpreter python3 on PATH runs, not a launcher in front of
// it: pyenv's shim is a bash script that runs pyenv to pick the version
// (a dozen bash processes, ~0.2 CPU-s on the machine of docs/benchmarks.md's
// CI time) before each python the tests start by name, thousands per run.
// The interpreter stays the same: its own directory goes first on PATH,
// as pyenv's exec does for the python it runs (its other commands there are
// what the shims would run too). Nothing changes when python3 on PATH is the
// interpreter itself (Debian's, a venv's) or there is none. Main calls it;
// a package with a TestMain of its own calls it there, before its tests.
func SkipPythonShim() {
	found, err := exec.LookPath("python3")
	if err != nil {
		return
	}
	out, err := exec.Command(found, "-c", "import sys; print(sys.executable)").Output()
	exe := strings.TrimSpace(string(out))
	if err != nil || !filepath.IsAbs(exe) {
		return
	}
	dir := filepath.Dir(exe)
	if dir == filepath.Dir(found) {
		return
	}
	if fi, err := os.Stat(filepath.Join(dir, "python3")); err != nil || fi.Mode().Perm()&0o111 == 0 {
		return // python3 there would not be this interpreter
	}
	os.Setenv("PATH", dir+string(filepath.ListSeparator)+os.Getenv("PATH"))
}
