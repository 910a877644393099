package jupyter

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/kernelhost/kernelhost/core"
	"github.com/kernelhost/kernelhost/core/engine"
	"github.com/kernelhost/kernelhost/internal/testkit"
	"github.com/kernelhost/kernelhost/transports/jupyter/jupytertest"
	"github.com/kernelhost/kernelhost/transports/transporttest"
)

// rSnippets are the conformance suite's snippets for IRkernel. With them the
// suite's engine cases run core's R snippets (Sys.setenv, Sys.unsetenv,
// setwd with rString literals) on a real R kernel: every value of
// transporttest.EnvValues must come back byte for byte, a cwd with quotes and
// non-ASCII must be entered, and both must be reset after the execution.
var rSnippets = transporttest.R()

// rSkipped are the suite's cases not run on R, with the reason, so that
// `go test -v` shows it. Most IRkernel 1.3.2 fails by design of the kernel,
// not of the transport or the engine; the slow lifecycle cases are proven on
// ipykernel already and would add ~25 s to every CI run.
var rSkipped = map[string]string{
	"MainResult":       "IRkernel sends a value as display_data, never execute_result",
	"Stderr":           "IRkernel does not capture cat(file = stderr()); message() arrives with an extra newline",
	"SilentNotCounted": "IRkernel sends execute_input for silent requests",
	"Interrupt":        "IRkernel replies status abort (not error) to an interrupted request",
	// The cwd part runs in the Cwd subtest below.

	"InterruptIdle":                "CI time: transport behaviour, proven on ipykernel",
	"RestartDuringExecution":       "CI time: transport behaviour, proven on ipykernel",
	"KernelDeath":                  "CI time: transport behaviour, proven on ipykernel",
	"EngineDisconnectFreesContext": "CI time: engine behaviour, proven on ipykernel",
}

// TestRKernel runs the conformance suite, engine cases included, on IRkernel
// (Debian's r-cran-irkernel, kernel spec "ir"), against one server.
// EngineEnvVarsExact proves core's Sys.setenv/Sys.unsetenv snippets: every
// transporttest.EnvValues value comes back byte for byte through
// cat(Sys.getenv(...)), and is unset (or the global value restored) after the
// execution; EngineEnvResetAfterOverlap, that a queued request never sees it.
func TestRKernel(t *testing.T) {
	t.Parallel()
	srv := startRServer(t)
	s := &transporttest.Suite{NewTransport: func(t *testing.T) core.Transport { return newTransport(t, srv, nil) }, Lang: rSnippets}
	var cases []transporttest.Case
	for _, c := range transporttest.Cases() {
		if why, ok := rSkipped[c.Name]; ok {
			t.Run(c.Name, func(t *testing.T) { t.Skip(why) })
			continue
		}
		cases = append(cases, c)
	}
	// The cases that need no kernel of their own share one, as in
	// TestConformance: an IRkernel start is the slowest.
	transporttest.RunCases(t, s, transporttest.SharingKernel(cases))
	t.Run("Cwd", func(t *testing.T) { testRCwd(t, srv) })
	t.Run("DefaultCwdOnKernel", func(t *testing.T) { testRDefaultCwdOnKernel(t, srv) })
}

// testRDefaultCwdOnKernel: with the default cwd checked where the kernel runs
// (engine.Config.DefaultCwdOnKernel), IRkernel's chdirFirst snippet (sent as a
// normal request: IRkernel hides a silent one's errors) skips a default cwd
// that does not exist, enters the fallback whose name has quotes, $(…) and
// non-ASCII, and the context's cwd says so; with none there, the kernel
// stays in its own cwd (the server's root dir).
func testRDefaultCwdOnKernel(t *testing.T, srv *jupytertest.Server) {
	fallback := filepath.Join(t.TempDir(), `it's a "dir" with $(x) ü 😀`)
	if err := os.Mkdir(fallback, 0o755); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(t.TempDir(), "missing")
	for _, tc := range []struct {
		name      string
		fallbacks []string
		want      string
	}{
		{"Fallback", []string{missing + "-too", fallback}, fallback},
		{"Nowhere", []string{missing + "-too"}, srv.RootDir},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := transporttest.NewEngine(t, engine.Config{
				Transport:  newTransport(t, srv, nil),
				DefaultCwd: missing, DefaultCwdOnKernel: true, DefaultCwdFallbacks: tc.fallbacks,
			})
			ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
			defer cancel()
			info, err := e.CreateContext(ctx, "r", "")
			if err != nil {
				t.Fatal(err)
			}
			got := transporttest.EngineStdout(t, transporttest.EngineRun(t, e, ctx, engine.ExecRequest{ContextID: info.ID, Code: rSnippets.PrintCwd}))
			if info.Cwd != tc.want || got != tc.want {
				t.Fatalf("context cwd %q, getwd() %q, want %q", info.Cwd, got, tc.want)
			}
		})
	}
}

// testRCwd: core's setwd snippet enters a directory whose name has quotes,
// $(…) and non-ASCII, on a new context and again after a restart.
func testRCwd(t *testing.T, srv *jupytertest.Server) {
	dir := filepath.Join(t.TempDir(), `it's a "dir" with $(x) ü 中文 😀`)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	e := transporttest.NewEngine(t, engine.Config{Transport: newTransport(t, srv, nil)})
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	info, err := e.CreateContext(ctx, "r", dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, when := range []string{"new context", "after restart"} {
		if when == "after restart" {
			if err := e.Restart(ctx, info.ID); err != nil {
				t.Fatal(err)
			}
		}
		got := transporttest.EngineStdout(t, transporttest.EngineRun(t, e, ctx, engine.ExecRequest{ContextID: info.ID, Code: rSnippets.PrintCwd}))
		if got != dir {
			t.Errorf("%s: getwd() = %q, want %q", when, got, dir)
		}
	}
}

// startRServer starts a server and checks it has the R kernel spec: missing R
// skips the test, or fails it under CI, where `make test` installs it. A
// server of its own, not the shared one: IRkernel starts are the slowest, and
// one beside the parallel tests' traffic on the shared server missed its
// bound at load 30.
func startRServer(t *testing.T) *jupytertest.Server {
	t.Helper()
	srv := jupytertest.Start(t)
	if _, ok := newTransport(t, srv, nil).kernelName("r"); !ok {
		testkit.Missingf(t, "the jupyter server has no R kernel spec (apt-get install r-cran-irkernel)")
	}
	return srv
}
