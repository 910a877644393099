package transporttest

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kernelhost/kernelhost/core"
	"github.com/kernelhost/kernelhost/core/engine"
)

// engineCases run the transport under the real engine.Engine: they prove
// that the engine's snippets work on this transport's kernels (env vars and
// cwd byte for byte, invariant 7) and that the invariants hold on a real
// kernel, not only on core's scripted fake.
func engineCases() []Case {
	return []Case{
		{Name: "EngineEnvVarsExact", Run: testEngineEnvVarsExact},
		{Name: "EngineCwdExact", Run: testEngineCwdExact},
		{Name: "EngineEnvResetAfterOverlap", Run: testEngineEnvResetAfterOverlap},
		{Name: "EngineEnvRestoresShadowed", Run: testEngineEnvRestoresShadowed},
		{Name: "EngineErrorDoesNotAbortQueued", Run: testEngineErrorDoesNotAbortQueued},
		{Name: "EngineDisconnectFreesContext", Run: testEngineDisconnectFreesContext},
	}
}

// EnvValues returns the values every transport must carry exactly (a fresh
// slice each call).
func EnvValues() []string {
	return []string{
		`it's`, `say "hi"`, `back\slash \n not a newline`, "line\nbreak", "trailing newline\n",
		"tab\tand\r\ncrlf", "$(echo injected) `echo injected` ${HOME}", "", "ünïcödé €", "astral 😀 𝄞",
		"'; import os; os._exit(1); '", "\u2028\u2029\u0085",
	}
}

func newEngine(t *testing.T, s *Suite, cfg engine.Config) *engine.Engine {
	t.Helper()
	cfg.Transport = s.NewTransport(t)
	return NewEngine(t, cfg)
}

// NewEngine makes an engine of cfg, with a fresh temporary directory as its
// default cwd when cfg has none, and closes it at the end of the test (a
// Close that fails or takes over StartTimeout fails the test).
func NewEngine(tb testing.TB, cfg engine.Config) *engine.Engine {
	tb.Helper()
	if cfg.DefaultCwd == "" {
		cfg.DefaultCwd = tb.TempDir()
	}
	e, err := engine.NewEngine(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
		defer cancel()
		if err := e.Close(ctx); err != nil {
			tb.Errorf("engine Close: %v", err)
		}
	})
	return e
}

// EngineRun runs code on the engine and returns everything it streamed.
func EngineRun(t *testing.T, e *engine.Engine, ctx context.Context, req engine.ExecRequest) []engine.Output {
	t.Helper()
	x, err := e.Execute(ctx, req)
	if err != nil {
		t.Fatalf("Execute: %v", err)
	}
	return EngineCollect(t, x)
}

// EngineCollect reads an execution to its end, bounded by ExecTimeout.
func EngineCollect(t *testing.T, x *engine.Execution) []engine.Output {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), ExecTimeout)
	defer cancel()
	var outs []engine.Output
	for {
		var err error
		outs, err = x.Next(ctx, outs)
		if errors.Is(err, io.EOF) {
			return outs
		}
		if err != nil {
			t.Fatalf("execution did not end within %s; so far: %+v", ExecTimeout, outs)
		}
	}
}

// EngineStdout is the concatenated stdout of outs; it fails the test on an
// error line.
func EngineStdout(t *testing.T, outs []engine.Output) string {
	t.Helper()
	var b strings.Builder
	for _, o := range outs {
		switch o.Type {
		case engine.OutStdout:
			b.WriteString(o.Text)
		case engine.OutError:
			t.Fatalf("unexpected error line: %s: %s\n%s", o.ErrName, o.ErrValue, o.Traceback)
		}
	}
	return b.String()
}

func testEngineEnvVarsExact(t *testing.T, s *Suite) {
	need(t, s.Lang.PrintCwd)
	if s.Lang.PrintEnv == nil || !engine.SupportsEnv(s.Lang.Language) {
		t.Skip("no env snippets for this language")
	}
	e := newEngine(t, s, engine.Config{GlobalEnv: func(context.Context) (map[string]string, error) {
		return map[string]string{"KH_GLOBAL": "global 'value'\n"}, nil
	}})
	ctx := context.Background()
	for _, v := range EnvValues() {
		got := EngineStdout(t, EngineRun(t, e, ctx, engine.ExecRequest{Language: s.Lang.Language, Code: s.Lang.PrintEnv("KH_VALUE"), EnvVars: map[string]string{"KH_VALUE": v}}))
		if got != v {
			t.Errorf("env value %q arrived as %q", v, got)
		}
	}
	if got := EngineStdout(t, EngineRun(t, e, ctx, engine.ExecRequest{Language: s.Lang.Language, Code: s.Lang.PrintEnv("KH_VALUE")})); got != "<unset>" {
		t.Errorf("after the executions the var is %q, want it removed", got)
	}
	// A per-request value shadows a global one and is put back afterwards.
	if got := EngineStdout(t, EngineRun(t, e, ctx, engine.ExecRequest{Language: s.Lang.Language, Code: s.Lang.PrintEnv("KH_GLOBAL"), EnvVars: map[string]string{"KH_GLOBAL": "mine"}})); got != "mine" {
		t.Errorf("request value: %q", got)
	}
	if got := EngineStdout(t, EngineRun(t, e, ctx, engine.ExecRequest{Language: s.Lang.Language, Code: s.Lang.PrintEnv("KH_GLOBAL")})); got != "global 'value'\n" {
		t.Errorf("global value after reset: %q", got)
	}
}

func testEngineCwdExact(t *testing.T, s *Suite) {
	need(t, s.Lang.PrintCwd)
	if !engine.SupportsEnv(s.Lang.Language) {
		t.Skip("no cwd snippet for this language")
	}
	dir := filepath.Join(t.TempDir(), `it's a "dir" with $(x) ü`)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	e := newEngine(t, s, engine.Config{})
	ctx := context.Background()
	info, err := e.CreateContext(ctx, s.Lang.Language, dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := EngineStdout(t, EngineRun(t, e, ctx, engine.ExecRequest{ContextID: info.ID, Code: s.Lang.PrintCwd})); got != dir {
		t.Errorf("cwd = %q, want %q", got, dir)
	}
	if err := e.Restart(ctx, info.ID); err != nil {
		t.Fatal(err)
	}
	if got := EngineStdout(t, EngineRun(t, e, ctx, engine.ExecRequest{ContextID: info.ID, Code: s.Lang.PrintCwd})); got != dir {
		t.Errorf("cwd after restart = %q, want %q", got, dir)
	}
	if _, err := e.CreateContext(ctx, s.Lang.Language, filepath.Join(dir, "missing")); core.KindOf(err) != core.KindInvalid {
		t.Errorf("missing cwd: err = %v, want a KindInvalid error", err)
	}
}

// Invariant 2 on a real kernel: B, queued while A runs with a secret, never
// sees it, whether A succeeds or fails.
func testEngineEnvResetAfterOverlap(t *testing.T, s *Suite) {
	need(t, s.Lang.PrintThenSleep, s.Lang.ErrorCode)
	if s.Lang.PrintEnv == nil || !engine.SupportsEnv(s.Lang.Language) {
		t.Skip("no env snippets for this language")
	}
	e := newEngine(t, s, engine.Config{})
	ctx := context.Background()
	for _, ending := range []string{s.Lang.PrintThenSleep, s.Lang.PrintThenSleep + "\n" + s.Lang.ErrorCode} {
		a, err := e.Execute(ctx, engine.ExecRequest{Language: s.Lang.Language, Code: ending, EnvVars: map[string]string{"KH_SECRET": "s3cret"}})
		if err != nil {
			t.Fatal(err)
		}
		b, err := e.Execute(ctx, engine.ExecRequest{Language: s.Lang.Language, Code: s.Lang.PrintEnv("KH_SECRET")})
		if err != nil {
			t.Fatal(err)
		}
		EngineCollect(t, a)
		if got := EngineStdout(t, EngineCollect(t, b)); got != "<unset>" {
			t.Fatalf("B saw A's secret: %q", got)
		}
	}
}

// A request's env var that shadows one the kernel inherited (PATH) or a
// global gives the earlier value back afterwards, byte for byte, instead of
// removing it.
func testEngineEnvRestoresShadowed(t *testing.T, s *Suite) {
	ctx := ctxT(t, StartTimeout)
	if s.Lang.PrintEnv == nil || !engine.SupportsEnv(s.Lang.Language) {
		t.Skip("no env snippets for this language")
	}
	global := "global\n'value' ü"
	e := newEngine(t, s, engine.Config{GlobalEnv: func(context.Context) (map[string]string, error) {
		return map[string]string{"KH_GLOBAL": global}, nil
	}})
	print := func(key string, env map[string]string) string {
		return EngineStdout(t, EngineRun(t, e, ctx, engine.ExecRequest{Language: s.Lang.Language, Code: s.Lang.PrintEnv(key), EnvVars: env}))
	}
	path := print("PATH", nil)
	if path == "<unset>" || path == "" {
		t.Fatalf("the kernel has no PATH to shadow (%q)", path)
	}
	for key, before := range map[string]string{"PATH": path, "KH_GLOBAL": global} {
		if got := print(key, map[string]string{key: "/nonexistent", "KH_OTHER": "x"}); got != "/nonexistent" {
			t.Fatalf("%s during the request = %q", key, got)
		}
		if got := print(key, nil); got != before {
			t.Errorf("%s after a request shadowed it = %q, want %q", key, got, before)
		}
		if got := print("KH_OTHER", nil); got != "<unset>" {
			t.Errorf("KH_OTHER after its request = %q, want <unset>", got)
		}
	}
}

// Invariant 3 on a real kernel: A's error never aborts B, queued behind it.
func testEngineErrorDoesNotAbortQueued(t *testing.T, s *Suite) {
	need(t, s.Lang.PrintThenSleep, s.Lang.ErrorCode, s.Lang.StdoutCode)
	e := newEngine(t, s, engine.Config{})
	ctx := context.Background()
	for range 3 {
		a, err := e.Execute(ctx, engine.ExecRequest{Language: s.Lang.Language, Code: s.Lang.PrintThenSleep + "\n" + s.Lang.ErrorCode})
		if err != nil {
			t.Fatal(err)
		}
		b, err := e.Execute(ctx, engine.ExecRequest{Language: s.Lang.Language, Code: s.Lang.StdoutCode})
		if err != nil {
			t.Fatal(err)
		}
		var aErrors int
		for _, o := range EngineCollect(t, a) {
			if o.Type == engine.OutError {
				aErrors++
			}
		}
		if aErrors != 1 {
			t.Errorf("A: %d error lines, want 1", aErrors)
		}
		if got := EngineStdout(t, EngineCollect(t, b)); got != "out\n" {
			t.Fatalf("B stdout = %q", got)
		}
	}
}

// Invariant 1 on a real kernel: a client that leaves mid-execution does not
// hold the context; with the default interrupt policy the next execution
// runs as soon as the kernel has stopped the code. Held, the context would
// free only when A's code ends, SleepRunsFor after it began; freed, B runs
// after the interrupt, or after the restart the engine falls back to when
// the kernel does not stop within the grace (ipykernel can swallow a SIGINT
// that lands outside the cell: "KeyboardInterrupt caught in kernel"), which
// took 10.5 s at a load of 10. Half of SleepRunsFor tells the two apart with
// room on both sides.
func testEngineDisconnectFreesContext(t *testing.T, s *Suite) {
	need(t, s.Lang.Sleep, s.Lang.StdoutCode)
	e := newEngine(t, s, engine.Config{InterruptGrace: InterruptTimeout / 2})
	client, leave := context.WithCancel(context.Background())
	a, err := e.Execute(client, engine.ExecRequest{Language: s.Lang.Language, Code: s.Lang.Sleep})
	if err != nil {
		t.Fatal(err)
	}
	// Wait for the sleep to start: its first line.
	wait, cancel := context.WithTimeout(context.Background(), ExecTimeout)
	defer cancel()
	if _, err := a.Next(wait, nil); err != nil {
		t.Fatalf("A never started: %v", err)
	}
	leave()
	start := time.Now()
	b := EngineRun(t, e, context.Background(), engine.ExecRequest{Language: s.Lang.Language, Code: s.Lang.StdoutCode})
	if got := EngineStdout(t, b); got != "out\n" {
		t.Fatalf("B stdout = %q", got)
	}
	if took := time.Since(start); took > SleepRunsFor/2 {
		t.Fatalf("B finished %s after A's client left; the context was held", took)
	}
}
