// Package kernelpy is kernelhost's python inside a kernel: the python
// package _kernelhost (the _kernelhost directory: the boot stage and its one
// import hook, the chart/data/image environment, the subprocess driver's
// IPython shell) and bootstrap.py, which makes that package in a kernel
// from what the kernel is given. See _kernelhost/__init__.py.
//
// A kernel gets it one of two ways, both starting at bootstrap.py:
//   - the subprocess transport's python driver loads it at start, compiled,
//     from the driver's cache (transports/subprocess/pycache.go);
//   - any other python kernel (a Jupyter one) gets it as source, carried by
//     the setup request the host sends every new kernel (Load), once Check
//     found it missing.
//
// For the environment's results, see docs/python-results.md.
package kernelpy

import (
	_ "embed"
	"encoding/json"
	"strings"
)

var (
	//go:embed bootstrap.py
	bootstrap string
	//go:embed _kernelhost/__init__.py
	rootModule string
	//go:embed _kernelhost/env.py
	envModule string
	//go:embed _kernelhost/shell.py
	shellModule string
)

// Module is one module of the _kernelhost package.
type Module struct {
	Name   string // as in sys.modules: "_kernelhost", "_kernelhost.env"
	Source string
}

// Modules returns the package's modules, its root first. A new module is a
// file in _kernelhost and a line here.
func Modules() []Module {
	return []Module{
		{"_kernelhost", rootModule},
		{"_kernelhost.env", envModule},
		{"_kernelhost.shell", shellModule},
	}
}

// Bootstrap is bootstrap.py, which a kernel runs, in a namespace of its
// own, with MODULES (module name -> code object or source), BEFORE_START
// and NOW set.
func Bootstrap() string { return bootstrap }

// PythonModule is the name the environment has in sys.modules once it is
// loaded.
const PythonModule = "_kernelhost.env"

// pythonCheck prints "load" (the engine's KernelSetupLoadWanted: the host
// then sends Setup's code) where the kernel lacks the package; where it has
// it (the subprocess driver loaded it), it reports what failed to load, if
// anything, on stderr.
const pythonCheck = `(lambda root: print(` + "'load'" + `) if root is None else root.report())(__import__('sys').modules.get('_kernelhost'))`

// pythonLoad runs bootstrap.py with the package's source, in a namespace
// of its own (nothing lands in the user's globals), then reports. A JSON
// string is a valid Python string literal (every escape JSON writes,
// \uXXXX included, means the same in Python), and a JSON object of them a
// valid dict. The try keeps a kernel whose Python cannot even compile
// bootstrap.py (too old) usable, saying why on stderr: the environment is
// an extra, a failed setup request would fail the context.
var pythonLoad = func() string {
	sources := map[string]string{}
	for _, m := range Modules() {
		sources[m.Name] = m.Source
	}
	var b strings.Builder
	b.WriteString("try:\n    exec(compile(")
	b.WriteString(literal(bootstrap))
	b.WriteString(", '<kernelhost bootstrap>', 'exec'), {'__name__': '_kernelhost_bootstrap', 'MODULES': ")
	b.WriteString(literal(sources))
	b.WriteString(", 'BEFORE_START': None, 'NOW': False})\n")
	b.WriteString("    __import__('sys').modules['_kernelhost'].report()\n")
	b.WriteString("except Exception:\n    __import__('traceback').print_exc()")
	return b.String()
}()

func literal(v any) string {
	out, _ := json.Marshal(v) // cannot fail for strings and maps of them
	return string(out)
}

// Check returns the code that looks whether a new kernel of language (a
// core.NormalizeLanguage name) has kernelhost's package, "" when kernelhost
// has nothing to add to such kernels. It prints "load" where the kernel
// lacks the package, and writes what failed to load to stderr.
func Check(language string) string {
	if language == "python" {
		return pythonCheck
	}
	return ""
}

// Setup returns the code that gives a kernel of language the package and
// starts it (for a kernel whose Check printed "load"); "" for a
// language kernelhost adds nothing to. Running it again on a kernel that has
// the package only reports. What failed to load is written to stderr.
func Setup(language string) string {
	if language == "python" {
		return pythonLoad
	}
	return ""
}
