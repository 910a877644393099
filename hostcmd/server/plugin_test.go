package server_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kernelhost/kernelhost/hostcmd/internal/hosttest"
	"github.com/kernelhost/kernelhost/hostcmd/server"
	"github.com/kernelhost/kernelhost/hostcmd/settings"
	"github.com/kernelhost/kernelhost/internal/testkit"
	"github.com/kernelhost/kernelhost/plugins/transportplugin/pluginhost"
	"github.com/kernelhost/kernelhost/transports/jupyter/jupytertest"
)

// interpreterPID asks the default python context for its process id.
func interpreterPID(t *testing.T, h *hosttest.Host) int {
	t.Helper()
	return testkit.HostPidOfProbe(t, hosttest.Stdout(h.Run(map[string]any{"code": testkit.SelfPidProbe("python")})))
}

// Shutdown stops the plugin process and the interpreters it ran: nothing is
// left behind.
func TestPluginStoppedOnShutdown(t *testing.T) {
	t.Parallel()
	h := hosttest.Start(t, hosttest.ViaPlugin)
	plugin := h.PluginPID()
	if plugin == 0 || plugin == os.Getpid() || !testkit.Alive(plugin) {
		t.Fatalf("plugin pid %d: want a live process of its own", plugin)
	}
	py := interpreterPID(t, h)
	if py == plugin || py == os.Getpid() {
		t.Fatalf("interpreter pid %d is not a process of its own", py)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := h.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	// Supervised.Close returns once the plugin is reaped: gone at once.
	if testkit.Alive(plugin) {
		t.Fatalf("the plugin (pid %d) is still running after Shutdown returned", plugin)
	}
	testkit.AwaitGone(t, "the python interpreter", 30*time.Second, py)
}

// kill -9 of the plugin while code runs: the stream ends with an error line
// that says what happened, the host keeps serving, and the next execution on
// the same context runs on a restarted plugin.
func TestPluginKilledMidExecution(t *testing.T) {
	t.Parallel()
	h := hosttest.Start(t, hosttest.ViaPlugin)
	id := h.DefaultID("python")
	hosttest.NoError(t, h.Run(map[string]any{"code": "x = 1"}))
	plugin := h.PluginPID()

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s := h.Start(ctx, map[string]any{"code": "import time\nprint('sleeping', flush=True)\ntime.sleep(60)", "context_id": id})
	s.Until("stdout")
	if err := syscall.Kill(plugin, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	rest := s.Rest()
	if took := time.Since(began); took > 10*time.Second {
		t.Fatalf("the stream ended %s after the plugin died", took)
	}
	e := hosttest.OnlyError(t, rest)
	if !strings.Contains(e.Str("value"), "died") {
		t.Fatalf("error line %v, want one saying the kernel died", e)
	}

	if status, body := h.Do("GET", "/health", ""); status != 200 {
		t.Fatalf("health after the plugin died: %d %s", status, body)
	}
	lines := h.Run(map[string]any{"code": "1+1", "context_id": id})
	hosttest.NoError(t, lines)
	if got := hosttest.MainResult(t, lines); got != "2" {
		t.Fatalf("next execution on the context: %q, want 2", got)
	}
	if now := h.PluginPID(); now == plugin || now == 0 {
		t.Fatalf("plugin pid %d after the restart, was %d", now, plugin)
	}
	// Other languages' contexts come back too.
	if got := hosttest.Stdout(h.Run(map[string]any{"code": "echo ok", "language": "bash"})); got != "ok\n" {
		t.Fatalf("bash after the restart: %q", got)
	}
}

// A missing plugin is a start-up error that names the path and what to run.
func TestMissingPlugin(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := server.Start(ctx, settings.Config{
		Addr: "127.0.0.1:0", DefaultCwd: dir, PluginDir: dir, TransportName: "nosuch",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	want := filepath.Join(dir, "kernelhost-transport-nosuch")
	if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "make plugins") {
		t.Fatalf("error %v, want one naming %s and `make plugins`", err, want)
	}
}

// A plugin that fails at start-up (the jupyter plugin with no server) is a
// start-up error with the plugin's reason, and leaves no process behind.
func TestPluginFailsToStart(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, err := server.Start(ctx, settings.Config{
		Addr: "127.0.0.1:0", DefaultCwd: t.TempDir(), PluginDir: hosttest.PluginDir(), TransportName: "jupyter",
		TransportSettings: map[string]string{"jupyter-url": "http://127.0.0.1:1/"},
		Logger:            slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err == nil || !strings.Contains(err.Error(), "jupyter") {
		t.Fatalf("error %v, want a start-up error about the jupyter plugin", err)
	}
	t.Logf("start-up error: %v", err)
}

// The host learns from a plugin's description, before it starts it, that
// its kernels may run on another machine (the jupyter plugin's): it then
// checks no directory of its own for the default cwd, and refuses one that
// is relative, since only an absolute path means the same thing there. The
// subprocess plugin's kernels run on the host.
func TestPluginSaysItsKernelsMayRunElsewhere(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for name, remote := range map[string]bool{"jupyter": true, "subprocess": false} {
		d, err := pluginhost.Describe(ctx, filepath.Join(hosttest.PluginDir(), settings.PluginPrefix+name))
		if err != nil || d.RemoteKernels != remote {
			t.Errorf("%s plugin: remote kernels %v (%v), want %v", name, d.RemoteKernels, err, remote)
		}
	}
	_, err := server.Start(ctx, settings.Config{
		Addr: "127.0.0.1:0", DefaultCwd: "relative/dir", PluginDir: hosttest.PluginDir(), TransportName: "jupyter",
		TransportSettings: map[string]string{"jupyter-url": "http://127.0.0.1:1/"},
		Logger:            slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err == nil || !strings.Contains(err.Error(), "the default cwd relative/dir must be an absolute path with the jupyter transport") {
		t.Fatalf("error %v, want one saying the default cwd must be absolute", err)
	}
}

// The jupyter transport through its plugin, against a real Jupyter Server.
func TestJupyterPlugin(t *testing.T) {
	t.Parallel()
	srv := jupytertest.Shared(t)
	h := hosttest.Start(t, hosttest.ViaPlugin, func(c *settings.Config) {
		c.TransportName = "jupyter"
		c.SetTransportSetting("jupyter-url", srv.URL)
		c.SetTransportSetting("jupyter-token", srv.Token)
	})
	hosttest.NoError(t, h.Run(map[string]any{"code": "x = 41"}))
	lines := h.Run(map[string]any{"code": "print('hi', flush=True)\nx + 1", "env_vars": map[string]string{"KH_J": "v"}})
	hosttest.NoError(t, lines)
	if got := hosttest.MainResult(t, lines); got != "42" {
		t.Fatalf("x + 1 = %q", got)
	}
	if got := hosttest.Stdout(lines); got != "hi\n" {
		t.Fatalf("stdout %q", got)
	}
	if got := hosttest.Stdout(h.Run(map[string]any{"code": "import os; print(os.environ.get('KH_J'))"})); got != "None\n" {
		t.Fatalf("per-request env var left in the kernel: %q", got)
	}
}
