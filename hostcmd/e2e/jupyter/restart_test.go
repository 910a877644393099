package jupyter_test

import (
	"log/slog"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kernelhost/kernelhost/hostcmd/internal/hosttest"
	"github.com/kernelhost/kernelhost/hostcmd/settings"
	"github.com/kernelhost/kernelhost/internal/testkit"
	"github.com/kernelhost/kernelhost/transports/jupyter/jupytertest"
)

// A restart that takes longer than -jupyter-restart-timeout (through the
// plugin, as the binary passes the setting): the transport gives up on it
// saying so, the engine replaces the kernel with a fresh one, and the next
// execution works. The kernel spec's launcher sleeps on every start but the
// first, as a kernel whose restart waits for a cluster would.
func TestJupyterRestartTimeout(t *testing.T) {
	t.Parallel()
	const restartTimeout, slowStart = 2 * time.Second, 6 * time.Second
	srv := jupytertest.Start(t)
	marker := filepath.Join(t.TempDir(), "started-once")
	launcher := `if [ -e "$1" ]; then sleep ` + strconv.Itoa(int(slowStart.Seconds())) + `; fi; touch "$1"; exec /usr/bin/python3 "$2" -f "$3"`
	if err := srv.AddKernelSpec("python-slow-restart", "python", []string{"/bin/sh", "-c", launcher, "sh", marker, srv.PythonLauncher(), "{connection_file}"}); err != nil {
		t.Fatal(err)
	}
	var log testkit.SyncBuffer
	h := hosttest.Start(t, hosttest.JupyterViaPlugin(srv), func(c *settings.Config) {
		c.SetTransportSetting("jupyter-kernel-names", `{"python": "python-slow-restart"}`)
		c.SetTransportSetting("jupyter-restart-timeout", restartTimeout.String())
		c.Logger = slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelWarn}))
	})
	id := h.DefaultID("python")
	if out := hosttest.Stdout(h.Run(map[string]any{"code": "x = 41\nprint(x + 1)"})); out != "42\n" {
		t.Fatalf("before the restart: %q", out)
	}

	began := time.Now()
	status, body := h.Do("POST", "/contexts/"+id+"/restart", "")
	took := time.Since(began)
	t.Logf("restart answered %d %q after %v", status, body, took.Round(time.Millisecond))
	if status != 200 {
		t.Fatalf("restart: %d %q, want 200 (a fresh kernel replaces the one whose restart timed out)", status, body)
	}
	if took < slowStart {
		t.Fatalf("restart answered after %v: the slow start (%v) did not happen", took, slowStart)
	}
	want := "not back within the restart timeout (" + restartTimeout.String() + ")"
	if !strings.Contains(log.String(), "kernel restart failed; starting a new kernel") || !strings.Contains(log.String(), want) {
		t.Fatalf("the log does not say the restart timed out (%q):\n%s", want, log.String())
	}

	// The next execution works, on the new kernel: the state is gone, as
	// after any restart.
	lines := h.Run(map[string]any{"code": "print(1 + 1)\nx"})
	if out := hosttest.Stdout(lines); out != "2\n" {
		t.Fatalf("after the restart: stdout %q, lines %v", out, lines)
	}
	if errs := hosttest.OfType(lines, "error"); len(errs) != 1 || errs[0].Str("name") != "NameError" {
		t.Fatalf("after the restart: want x gone (NameError), got %v", lines)
	}
	if ctxs := h.Contexts(); len(ctxs) != 1 || ctxs[0].ID != id {
		t.Fatalf("contexts after the restart: %+v, want %s alone", ctxs, id)
	}
}
