package sdktest

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kernelhost/kernelhost/hostcmd/server"
	"github.com/kernelhost/kernelhost/hostcmd/settings"
	"github.com/kernelhost/kernelhost/internal/testkit"
	"github.com/kernelhost/kernelhost/transports/jupyter"
	"github.com/kernelhost/kernelhost/transports/jupyter/jupytertest"
	"github.com/kernelhost/kernelhost/transports/subprocess"
)

// pluginDir holds the transport plugins, built by TestMain.
var pluginDir string

func TestMain(m *testing.M) {
	testkit.Main(m, func(string) error {
		var err error
		if pluginDir, err = testkit.Plugins(); err != nil {
			return fmt.Errorf("build the transport plugins: %w", err)
		}
		return nil
	})
}

// TestOfficialSDK starts a host in-process on a free port and runs
// sdk.test.mjs with node against it: with the subprocess transport linked in
// and through its plugin (as the kernelhost binary runs it), and with the
// Jupyter transport against a real Jupyter Server, linked in and through its
// plugin. Without node or node_modules the test skips, except under CI, where
// it fails: `make test` installs both (and jupyter-server).
func TestOfficialSDK(t *testing.T) {
	t.Parallel()
	python, env := pickPython(t)
	for _, mode := range []struct {
		name string
		set  func(*settings.Config)
	}{
		{"in-process", func(c *settings.Config) {
			// No network stack (pasta) per context: the SDK's tests are
			// not about the network; the plugin's host keeps the default.
			c.Transport = subprocess.New(subprocess.Options{Interpreters: map[string]string{"python": python}, Sandbox: subprocess.SandboxOptions{Network: subprocess.NetworkNone}})
		}},
		{"plugin", func(c *settings.Config) {
			c.PluginDir, c.TransportName = pluginDir, "subprocess"
			c.SetTransportSetting("python", python)
		}},
	} {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel() // a host of its own
			runEnv := env
			if mode.name == "plugin" {
				// The plugin's defaults (-python-preload=auto) fork python
				// contexts from a template that imported the data stack.
				runEnv = append(slices.Clone(env), "KH_SDK_PRELOADED=1")
			}
			testOfficialSDK(t, mode.set, runEnv...)
		})
	}
	// Two node runs at once, not four: four beside their hosts went past a
	// run's 3-minute bound on a loaded 2-core machine. The Jupyter pair runs
	// first (this subtest is not parallel), then the subprocess pair.
	t.Run("jupyter", func(t *testing.T) {
		srv := jupytertest.Start(t)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		tr, err := jupyter.New(ctx, jupyter.Config{URL: srv.URL, Token: srv.Token})
		if err != nil {
			t.Fatalf("jupyter transport: %v", err)
		}
		t.Cleanup(tr.Close)
		// ipykernel only: no javascript default context (KH_SDK_NO_JS), and
		// no r or java either (KH_SDK_TRANSPORT: sdk-rjava.test.mjs).
		t.Run("in-process", func(t *testing.T) {
			t.Parallel()
			testOfficialSDK(t, func(c *settings.Config) { c.Transport = tr }, "KH_SDK_NO_JS=1", "KH_SDK_TRANSPORT=jupyter")
		})
		t.Run("plugin", func(t *testing.T) {
			t.Parallel()
			testOfficialSDK(t, func(c *settings.Config) {
				c.PluginDir, c.TransportName = pluginDir, "jupyter"
				c.SetTransportSetting("jupyter-url", srv.URL)
				c.SetTransportSetting("jupyter-token", srv.Token)
			}, "KH_SDK_NO_JS=1", "KH_SDK_TRANSPORT=jupyter")
		})
	})
}

// pickPython picks the subprocess transport's Python as `make run` does:
// KERNELHOST_PYTHON, else python3 on PATH where it has IPython and
// matplotlib (and pandas and PIL, for sdk-charts.test.mjs), else Debian's
// /usr/bin/python3 where it has them (python3-ipython, python3-matplotlib,
// python3-pandas, python3-pil). Where none has them it returns python3 and
// KH_SDK_NO_IPYTHON=1, which skips sdk-ipython.test.mjs and
// sdk-charts.test.mjs, except under CI, where `make test` installed them
// and it fails.
func pickPython(t *testing.T) (string, []string) {
	if python := os.Getenv("KERNELHOST_PYTHON"); python != "" {
		return python, nil
	}
	for _, python := range []string{"python3", "/usr/bin/python3"} {
		if exec.Command(python, "-I", "-c", "import IPython, matplotlib, pandas, PIL").Run() == nil { // -I: as make run probes
			return python, nil
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("no Python with IPython, matplotlib, pandas and PIL (make test installs python3-ipython python3-matplotlib python3-pandas python3-pil)")
	}
	return "python3", []string{"KH_SDK_NO_IPYTHON=1"}
}

func testOfficialSDK(t *testing.T, configure func(*settings.Config), env ...string) {
	node, err := exec.LookPath("node")
	if err == nil {
		_, err = os.Stat(filepath.Join("node_modules", "@e2b", "code-interpreter", "package.json"))
	}
	if err != nil {
		testkit.Missingf(t, "the SDK test needs node and node_modules (run `make test`, which installs them): %v", err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cfg := settings.Config{
		Addr:       "127.0.0.1:0",
		DefaultCwd: t.TempDir(),
		Logger:     slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
	configure(&cfg)
	host, err := server.Start(ctx, cfg)
	if err != nil {
		t.Fatalf("start host: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := host.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})

	if slices.Contains(env, "KH_SDK_PRELOADED=1") {
		awaitForkTemplate(t, "http://"+host.Addr()+"/metrics")
	}

	// --test-force-exit: the SDK leaves its request timer (60 s) running when a
	// request fails with a non-2xx status, which would keep node alive.
	// Every *.test.mjs here runs: one file per topic (sdk.test.mjs is the
	// basics), so a feature's SDK test lives beside, not inside, the others.
	files, err := filepath.Glob("*.test.mjs")
	if err != nil || len(files) == 0 {
		t.Fatalf("no *.test.mjs files to run (%v)", err)
	}
	args := append([]string{"--test", "--test-force-exit", "--test-reporter=spec"}, files...)
	cmd := exec.CommandContext(ctx, node, args...)
	cmd.Env = append(os.Environ(),
		"E2B_DEBUG=true",
		"E2B_SANDBOX_URL="+host.URL(),
		"E2B_API_KEY=", "E2B_ACCESS_TOKEN=",
	)
	cmd.Env = append(cmd.Env, env...)
	out, err := cmd.CombinedOutput()
	t.Logf("node --test:\n%s", out)
	if err != nil {
		t.Fatalf("the SDK test failed: %v", err)
	}
}

// awaitForkTemplate waits (bounded) until the host's /metrics shows the
// python fork template: until it has preloaded, new contexts come from the
// pool, without the data stack the test then expects.
func awaitForkTemplate(t *testing.T, metricsURL string) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		resp, err := http.Get(metricsURL)
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			for _, line := range strings.Split(string(body), "\n") {
				if strings.HasPrefix(line, "kernelhost_interpreters{") && strings.Contains(line, `language="python"`) && strings.Contains(line, `role="fork-template"`) {
					return
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no python fork template in %s after 3 minutes (last error: %v)", metricsURL, err)
		}
		time.Sleep(50 * time.Millisecond) // the template's preload is not awaitable over HTTP
	}
}
