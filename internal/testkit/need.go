package testkit

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
)

// Missing skips the test for a missing dependency (a tool, an interpreter,
// a Python package), or fails it under CI, where `make test` has installed
// everything and a skip would hide a broken setup.
func Missing(tb testing.TB, err error) {
	tb.Helper()
	if os.Getenv("CI") != "" {
		tb.Fatal(err)
	}
	tb.Skip(err)
}

// Missingf is Missing with a formatted message.
func Missingf(tb testing.TB, format string, args ...any) {
	tb.Helper()
	Missing(tb, fmt.Errorf(format, args...))
}

// NeedCommand returns the path of the command name, or calls Missing;
// debianPackage is the Debian package that installs it.
func NeedCommand(tb testing.TB, name, debianPackage string) string {
	tb.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		Missingf(tb, "%s is not installed (Debian package %s; make deps installs it)", name, debianPackage)
	}
	return path
}

// DebianPython is Debian's python3, which sees the Debian packages `make
// test` installs (python3-ipython, python3-matplotlib, python3-pandas,
// python3-pil); pyenv's python3 on PATH does not.
const DebianPython = "/usr/bin/python3"

// NeedPythonModules calls Missing unless python imports every one of
// modules (e.g. "IPython", "matplotlib").
//
// The import runs once per python and module list per test binary, and
// every later call gets its answer: importing the data stack costs about
// a CPU-second, and the fork tests of one package asked the same question
// of the same python dozens of times (what is installed does not change
// during a run).
func NeedPythonModules(tb testing.TB, python string, modules ...string) {
	tb.Helper()
	imports := strings.Join(modules, ", ")
	pythonChecksMu.Lock()
	check, ok := pythonChecks[python+"\x00"+imports]
	if !ok {
		check = &pythonCheck{}
		pythonChecks[python+"\x00"+imports] = check
	}
	pythonChecksMu.Unlock()
	check.once.Do(func() {
		if out, err := exec.Command(python, "-c", "import "+imports).CombinedOutput(); err != nil {
			check.missing = fmt.Sprintf("%s cannot import %s (make test installs them): %v: %s", python, imports, err, out)
		}
	})
	if check.missing != "" {
		Missing(tb, errors.New(check.missing))
	}
}

// pythonCheck is the answer of NeedPythonModules for one python and module
// list: "" when it imports them, else why not.
type pythonCheck struct {
	once    sync.Once
	missing string
}

var (
	pythonChecksMu sync.Mutex
	pythonChecks   = map[string]*pythonCheck{} // by python and "\x00" and the modules
)
