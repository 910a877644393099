package jupyter_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kernelhost/kernelhost/hostcmd/internal/hosttest"
	"github.com/kernelhost/kernelhost/hostcmd/settings"
	"github.com/kernelhost/kernelhost/internal/testkit"
	"github.com/kernelhost/kernelhost/transports/jupyter"
	"github.com/kernelhost/kernelhost/transports/jupyter/jupytertest"
)

// A Jupyter kernel may run on another machine, whose directories the host
// cannot see: the default cwd is checked where the kernel runs. Here the
// "other machine" is a kernel spec whose launcher, before it starts
// ipykernel, creates a directory the host never saw and removes the
// workspace the host created, as a remote kernel's file system would
// differ from the host's.
func TestJupyterDefaultCwdIsCheckedWhereTheKernelRuns(t *testing.T) {
	t.Parallel()
	srv := jupytertest.Start(t)
	base := t.TempDir()
	// launcher: mkdir $1, rm -rf $2, then the kernel (its cwd: the server's root).
	const launcher = `mkdir -p -- "$1" && rm -rf -- "$2" && exec /usr/bin/python3 "$3" -f "$4"`
	start := func(t *testing.T, spec, defaultCwd, workspace string, mkdir, rmdir string) (*hosttest.Host, *testkit.SyncBuffer) {
		t.Helper()
		if err := srv.AddKernelSpec(spec, "python", []string{"/bin/sh", "-c", launcher, "sh", mkdir, rmdir, srv.PythonLauncher(), "{connection_file}"}); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		tr, err := jupyter.New(ctx, jupyter.Config{URL: srv.URL, Token: srv.Token, KernelNames: map[string]string{"python": spec}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(tr.Close)
		var log testkit.SyncBuffer
		h := hosttest.Start(t, func(c *settings.Config) {
			c.Transport, c.TransportName = tr, "jupyter"
			c.DefaultCwd, c.Workspace = defaultCwd, workspace
			c.Logger = slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelInfo}))
		})
		return h, &log
	}
	kernelCwd := func(h *hosttest.Host) string {
		return strings.TrimSuffix(hosttest.Stdout(h.Run(map[string]any{"code": "import os; print(os.getcwd())"})), "\n")
	}

	t.Run("OnlyWhereTheKernelRuns", func(t *testing.T) {
		t.Parallel() // a kernel spec, transport and host of its own
		// Quotes, $(…) and non-ASCII: the snippet quotes the path as chdir did.
		dir := filepath.Join(base, `kernel's "side" $(x) ü`)
		workspace := filepath.Join(base, "workspace-1")
		h, log := start(t, "python-kernel-side", dir, workspace, dir, workspace)
		if ctxs := h.Contexts(); len(ctxs) != 1 || ctxs[0].Cwd != dir {
			t.Fatalf("contexts %+v, want the python default in %s", ctxs, dir)
		}
		if got := kernelCwd(h); got != dir {
			t.Fatalf("the default context runs in %q, want %q", got, dir)
		}
		if strings.Contains(log.String(), "is not a directory where the kernel runs") {
			t.Errorf("a notice for a default cwd the kernel has:\n%s", log.String())
		}
	})

	t.Run("Nowhere", func(t *testing.T) {
		t.Parallel() // a kernel spec, transport and host of its own
		nowhere := filepath.Join(base, "nowhere")
		workspace := filepath.Join(base, "workspace-2")
		h, log := start(t, "python-nowhere", nowhere, workspace, filepath.Join(base, "unrelated"), workspace)
		// The kernel stays in its own cwd (the server's root dir), and the
		// context says so.
		got := kernelCwd(h)
		if ctxs := h.Contexts(); len(ctxs) != 1 || ctxs[0].Cwd != got || got == nowhere || got == workspace {
			t.Fatalf("contexts %+v, kernel in %q: want the python default in the kernel's own cwd", ctxs, got)
		}
		if _, err := os.Stat(nowhere); err == nil {
			t.Fatalf("%s was created", nowhere)
		}
		if !strings.Contains(log.String(), "the default cwd is not a directory where the kernel runs") || !strings.Contains(log.String(), got) {
			t.Errorf("no notice naming %s in the log:\n%s", got, log.String())
		}
		// Every context finds the same: one WARN, not one per context.
		for range 2 {
			if code, body := h.Do("POST", "/contexts", `{"language":"python"}`); code != 200 {
				t.Fatalf("POST /contexts: %d %s", code, body)
			}
		}
		if n := strings.Count(log.String(), `level=WARN msg="the default cwd is not a directory where the kernel runs`); n != 1 {
			t.Errorf("%d WARNs about the default cwd for 3 contexts, want 1:\n%s", n, log.String())
		}
		// A cwd the client asks for is never replaced: a clear 400.
		code, body := h.Do("POST", "/contexts", `{"language":"python","cwd":"`+nowhere+`"}`)
		if code != 400 || !strings.Contains(body, nowhere) {
			t.Fatalf("POST /contexts with a missing cwd: %d %s, want 400 naming it", code, body)
		}
	})
}
