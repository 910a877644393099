package subprocess

import (
	"context"
	_ "embed"
	"strings"

	"github.com/kernelhost/kernelhost/core"
	"github.com/kernelhost/kernelhost/transports/subprocess/internal/sandbox"
)

// python runs drivers/driver.py, from its compiled copy in the cache
// (pycache.go). It reads JSON request lines on fd 3 and writes its messages
// into fd 1 as frames among the prints (frames.go). It can move into a
// kernel's cwd on hand-out. SIGINT alone interrupts it: the driver ignores
// one between requests and interrupts a request the signal reached before
// its code started. It forks (forker): its fork template makes contexts
// (forkserver.go).
func init() {
	register(langDef{
		name:        "python",
		interpreter: Interpreter{Name: "python", Default: "python3", DebianPackage: "python3", Help: "Python interpreter"},
		newDriver: func(t *Transport, path string) (driver, error) {
			return pythonLang{cache: newPythonDriver(t.closed, path, t.tools())}, nil
		},
	})
}

// driverPython is drivers/driver.py with drivers/forkserver.py appended,
// which runs in its globals and ends the script: it serves requests
// (_main), or forks in a fork template (forkserver.go). Real files, so they
// can be read, linted and run by hand (cat driver.py forkserver.py).
var driverPython = driverPythonMain + driverPythonFork

var (
	//go:embed drivers/driver.py
	driverPythonMain string
	//go:embed drivers/forkserver.py
	driverPythonFork string
)

type pythonLang struct{ cache *pythonDriver }

func (d pythonLang) command() (args, env []string, err error) {
	args, err = d.cache.prepare()
	// Unbuffered, so that writes to sys.__stdout__ by libraries reach fd 1 at once.
	return args, []string{"PYTHONUNBUFFERED=1"}, err
}

func (pythonLang) encode(req core.ExecuteRequest) ([]byte, error) {
	return jsonRequest{MsgID: req.MsgID, Code: req.Code, Silent: req.Silent}.line()
}

func (pythonLang) interrupt(_ context.Context, s signaller, _ string) error { return s.sigint() }

func (pythonLang) cwdRecord(dir string) []byte { return jsonRecord("cwd", dir) }

func (pythonLang) channel() channel { return fd1Frames }

// template makes the driver a fork template (drivers/forkserver.py) that
// preloads modules in cwd. In a sandbox it holds capabilities in its user
// namespace: no code from a path a context can write runs in it.
func (pythonLang) template(spec procSpec, preload []string, cwd string) procSpec {
	spec.env = append(spec.env, "KH_FORK_TEMPLATE=1", "KH_PRELOAD="+strings.Join(preload, ","))
	if sb := spec.sandbox; sb != nil {
		spec.args = append([]string{"-s"}, spec.args...)
		spec.env = append(spec.env, "KH_FORK_SANDBOX=1", "KH_WRITABLE="+strings.Join(append(sandbox.ExistingDirs([]string{cwd}), sb.Writable()...), ":"))
		if sb.OwnNetns() {
			spec.env = append(spec.env, "KH_FORK_NETNS=1") // each context in a network namespace of its own
		}
	}
	return spec
}
