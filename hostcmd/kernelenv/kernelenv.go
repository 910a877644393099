// Package kernelenv is kernelhost's own kernel environment: code the host runs
// in every new kernel, whatever the transport, so that a cell's results carry
// what the E2B SDKs read. For python (python_env.py) that is a matplotlib
// figure's structured chart (e2b/chart), a pandas DataFrame's columns
// (e2b/data), PIL images shown as png and dicts and lists as JSON, all through
// IPython's display-formatter API; see docs/python-results.md.
//
// The engine runs Setup's code as part of each context's silent setup request
// (engine.Config.KernelSetup), on start and on every restart, before the cwd
// and env vars are applied. What it runs first is python_boot.py, which
// loads python_env.py once the kernel has something it formats or shows.
package kernelenv

import (
	_ "embed"
	"encoding/json"
)

//go:embed python_env.py
var pythonEnv string

//go:embed python_boot.py
var pythonBoot string

// PythonModule is the name the python environment registers itself under in
// sys.modules; a kernel that has it is not set up again.
const PythonModule = "_kernelhost_env"

// pythonSetup runs python_boot.py, with python_env.py's source in _SOURCE,
// in a namespace of its own (nothing lands in the user's globals), until an
// interpreter has the environment: the boot stage loads it now or at the
// first import that needs it (see python_boot.py), and running it again
// before then adds nothing. A JSON string is a valid Python string literal
// (every escape JSON writes, \uXXXX included, means the same in Python), so
// the sources are sent as such. The try keeps a kernel whose Python cannot
// even compile them (too old) usable: the environment is an extra, a failed
// setup request would fail the context.
var pythonSetup = "try:\n" +
	"    if " + literal(PythonModule) + " not in __import__('sys').modules: exec(compile(" +
	literal(pythonBoot) + ", '<kernelhost python env boot>', 'exec'), {'__name__': " + literal(PythonModule+"_boot") +
	", '_SOURCE': " + literal(pythonEnv) + "})\n" +
	"except Exception:\n" +
	"    pass"

func literal(s string) string {
	out, _ := json.Marshal(s) // cannot fail for a string
	return string(out)
}

// Setup returns the code that sets up a new kernel of language (a
// core.NormalizeLanguage name), or "" when kernelhost has nothing to add.
func Setup(language string) string {
	if language == "python" {
		return pythonSetup
	}
	return ""
}

// PythonSource is python_env.py itself, for tests and benchmarks that load it
// into an interpreter of their own.
func PythonSource() string { return pythonEnv }

// PythonBootSource is python_boot.py, for tests.
func PythonBootSource() string { return pythonBoot }
