package python_test

import (
	"encoding/base64"
	"strings"
	"testing"

	"github.com/kernelhost/kernelhost/hostcmd/internal/hosttest"
	"github.com/kernelhost/kernelhost/hostcmd/settings"
	"github.com/kernelhost/kernelhost/internal/testkit"
	"github.com/kernelhost/kernelhost/transports/subprocess"
)

// ipythonPython is Debian's python3, which has python3-ipython and
// python3-matplotlib (`make test` installs them); python3 on PATH may be
// another interpreter. It skips the test where they are missing, and fails
// it under CI.
func ipythonPython(t *testing.T) func(*settings.Config) {
	t.Helper()
	python := testkit.DebianPython
	testkit.NeedPythonModules(t, python, "IPython", "matplotlib")
	return func(c *settings.Config) {
		c.SetTransportSetting("python", python) // the plugin's
		if c.Transport != nil {
			c.Transport = subprocess.New(subprocess.Options{Interpreters: map[string]string{"python": python}, Sandbox: subprocess.SandboxOptions{Network: hosttest.ContextNetwork}})
		}
	}
}

// Every row of issue 13's table, over HTTP: the cells an agent sends as
// upstream (IPython in Jupyter) runs them.
func TestIPythonCellsOverHTTP(t *testing.T) {
	t.Parallel()
	usePython := ipythonPython(t)
	hosttest.EachTransport(t, func(t *testing.T, start func(...func(*settings.Config)) *hosttest.Host) {
		h := start(usePython)
		run := func(code string) []hosttest.Line {
			t.Helper()
			return h.Run(map[string]any{"code": code})
		}

		// Indented: dedented as IPython does.
		lines := run("\n    x = 40\n    print(x + 2)\n")
		hosttest.NoError(t, lines)
		if got := hosttest.Stdout(lines); got != "42\n" {
			t.Errorf("indented cell: stdout %q", got)
		}

		// !cmd, %env, %pip, %%bash.
		if got := hosttest.Stdout(run("!echo hi")); got != "hi\n" {
			t.Errorf("!echo hi: stdout %q", got)
		}
		hosttest.NoError(t, run("%env KH_IPYTHON=1"))
		if got := hosttest.MainResult(t, run("import os\nos.environ['KH_IPYTHON']")); got != "1" {
			t.Errorf("after %%env: %s", got)
		}
		if got := hosttest.Stdout(run("%pip --version")); !strings.HasPrefix(got, "pip ") {
			t.Errorf("%%pip --version: stdout %q", got)
		}
		if got := hosttest.Stdout(run("%%bash\necho from bash")); got != "from bash\n" {
			t.Errorf("%%%%bash: stdout %q", got)
		}

		// A trailing ';' hides the result.
		lines = run("1+1;")
		hosttest.NoError(t, lines)
		if r := hosttest.OfType(lines, "result"); len(r) != 0 {
			t.Errorf("1+1; gave results %v", r)
		}

		// plt.show() and a figure left open: display_data with image/png.
		for _, code := range []string{
			"import matplotlib.pyplot as plt\nplt.plot([1, 2])\nplt.show()",
			"plt.figure()\nplt.plot([3, 1]);",
		} {
			lines = run(code)
			hosttest.NoError(t, lines)
			results := hosttest.OfType(lines, "result")
			if len(results) != 1 || results[0]["is_main_result"] == true {
				t.Fatalf("%q: want one display, got %v", code, results)
			}
			png, err := base64.StdEncoding.DecodeString(results[0].Str("png"))
			if err != nil || !strings.HasPrefix(string(png), "\x89PNG") {
				t.Errorf("%q: png is not a png (%v)", code, err)
			}
		}
		if got := hosttest.MainResult(t, run("plt.get_fignums()")); got != "[]" {
			t.Errorf("figures left open: %s", got)
		}
	})
}
