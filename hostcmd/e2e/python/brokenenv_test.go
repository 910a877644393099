package python_test

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kernelhost/kernelhost/hostcmd/internal/hosttest"
	"github.com/kernelhost/kernelhost/hostcmd/settings"
	"github.com/kernelhost/kernelhost/internal/testkit"
	"github.com/kernelhost/kernelhost/transports/jupyter/jupytertest"
	"github.com/kernelhost/kernelhost/transports/subprocess"
)

// brokenRe is a sitecustomize that breaks one re.compile that
// kernelhost's python environment (_kernelhost.env) makes as it loads, and
// nothing else: a broken environment, as a python that cannot run it has.
const brokenRe = `import re
_compile = re.compile
def compile(pattern, flags=0):
    if isinstance(pattern, str) and "mathdefault" in pattern:
        raise re.error("broken by the test")
    return _compile(pattern, flags)
re.compile = compile
`

// A python environment that fails to load is reported, not swallowed: on
// the stderr of a context's first execution (not its second), and in the
// host's log; the context runs its cells all the same. On the subprocess
// transport the driver loads it at start; a Jupyter kernel is sent it.
func TestBrokenPythonEnvironmentIsReported(t *testing.T) {
	testkit.NeedPythonModules(t, testkit.DebianPython, "IPython")
	check := func(t *testing.T, transport func(t *testing.T, site string) func(*settings.Config)) {
		site := t.TempDir()
		if err := os.WriteFile(filepath.Join(site, "sitecustomize.py"), []byte(brokenRe), 0o600); err != nil {
			t.Fatal(err)
		}
		// Every python from here on, the Jupyter server's kernels included.
		t.Setenv("PYTHONPATH", site)
		var logged testkit.SyncBuffer
		h := hosttest.Start(t, transport(t, site), func(c *settings.Config) {
			c.Logger = slog.New(slog.NewTextHandler(&logged, &slog.HandlerOptions{Level: slog.LevelWarn}))
		})
		const failure = "kernelhost: loading _kernelhost.env failed"
		stderr := func(lines []hosttest.Line) string {
			var b strings.Builder
			for _, l := range hosttest.OfType(lines, "stderr") {
				b.WriteString(l.Str("text"))
			}
			return b.String()
		}
		first := h.Run(map[string]any{"code": "1 + 1", "language": "python"})
		if got := stderr(first); !strings.Contains(got, failure) || !strings.Contains(got, "broken by the test") {
			t.Fatalf("first execution's stderr: %q, want the failure to load the environment", got)
		}
		if r := hosttest.OfType(first, "result"); len(r) != 1 || r[0].Str("text") != "2" {
			t.Fatalf("first execution: %v, want the result 2 as well", first)
		}
		if got := stderr(h.Run(map[string]any{"code": "1 + 1", "language": "python"})); got != "" {
			t.Fatalf("second execution's stderr: %q, want nothing", got)
		}
		if log := logged.String(); !strings.Contains(log, "kernel setup reported a failure") || !strings.Contains(log, "broken by the test") {
			t.Fatalf("host log:\n%s\nwant the failure", log)
		}
	}
	t.Run("subprocess", func(t *testing.T) {
		check(t, func(_ *testing.T, site string) func(*settings.Config) {
			return func(c *settings.Config) {
				// The sandbox's /tmp is its own: it must see site.
				c.Transport = subprocess.New(subprocess.Options{Interpreters: map[string]string{"python": testkit.DebianPython}, Sandbox: subprocess.SandboxOptions{Writable: []string{site}, Network: hosttest.ContextNetwork}})
			}
		})
	})
	t.Run("jupyter", func(t *testing.T) {
		check(t, func(t *testing.T, _ string) func(*settings.Config) {
			return hosttest.JupyterInProcess(t, jupytertest.Start(t))
		})
	})
}
