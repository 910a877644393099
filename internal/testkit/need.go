package testkit

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
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
func NeedPythonModules(tb testing.TB, python string, modules ...string) {
	tb.Helper()
	out, err := exec.Command(python, "-c", "import "+strings.Join(modules, ", ")).CombinedOutput()
	if err != nil {
		Missingf(tb, "%s cannot import %s (make test installs them): %v: %s", python, strings.Join(modules, ", "), err, out)
	}
}
