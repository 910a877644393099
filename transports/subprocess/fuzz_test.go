package subprocess

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kernelhost/kernelhost/core/engine"
	"github.com/kernelhost/kernelhost/transports/transporttest"
)

// fuzzEngine is one engine with a python and a bash context, shared by all the
// inputs of a fuzz run: starting interpreters per input would make the fuzzer
// a benchmark of process start-up.
func fuzzEngine(f *testing.F) *engine.Engine {
	return transporttest.NewEngine(f, engine.Config{Transport: New(Options{})})
}

// FuzzEnvValueRoundTrip: any value the API accepts reaches real python3 and
// bash processes byte for byte, and is gone again in the next execution
// (invariants 2 and 7, with the engine's generated snippets).
func FuzzEnvValueRoundTrip(f *testing.F) {
	for _, v := range transporttest.EnvValues() {
		f.Add(v)
	}
	e := fuzzEngine(f)
	f.Fuzz(func(t *testing.T, value string) {
		if engine.ValidateEnvValue("KH_FUZZ", value) != nil {
			return // NUL and invalid UTF-8 are refused before anything runs (tested in core)
		}
		for _, lang := range []transporttest.LanguageSnippets{transporttest.Python(), transporttest.Bash()} {
			ctx := context.Background()
			req := engine.ExecRequest{Language: lang.Language, Code: lang.PrintEnv("KH_FUZZ"), EnvVars: map[string]string{"KH_FUZZ": value}}
			if got := transporttest.EngineStdout(t, transporttest.EngineRun(t, e, ctx, req)); got != value {
				t.Fatalf("%s: env value %q arrived as %q", lang.Language, value, got)
			}
			req.EnvVars = nil
			if got := transporttest.EngineStdout(t, transporttest.EngineRun(t, e, ctx, req)); got != "<unset>" {
				t.Fatalf("%s: value still set afterwards: %q", lang.Language, got)
			}
		}
	})
}

// FuzzCwdRoundTrip: any directory name reaches python3 and bash exactly as
// their working directory.
func FuzzCwdRoundTrip(f *testing.F) {
	for _, name := range []string{"plain", "it's", `"q" \ $(x) ü 😀`, "new\nline", " lead and trail "} {
		f.Add(name)
	}
	e := fuzzEngine(f)
	root := f.TempDir()
	f.Fuzz(func(t *testing.T, name string) {
		if name == "" || name == "." || name == ".." || len(name) > 200 || strings.ContainsAny(name, "/\x00") || engine.ValidateEnvValue("cwd", name) != nil {
			return // not a single directory name
		}
		dir := filepath.Join(root, name)
		if err := os.Mkdir(dir, 0o755); err != nil && !os.IsExist(err) {
			t.Skip(err)
		}
		for _, lang := range []transporttest.LanguageSnippets{transporttest.Python(), transporttest.Bash()} {
			ctx := context.Background()
			info, err := e.CreateContext(ctx, lang.Language, dir)
			if err != nil {
				t.Fatalf("%s in %q: %v", lang.Language, dir, err)
			}
			got := transporttest.EngineStdout(t, transporttest.EngineRun(t, e, ctx, engine.ExecRequest{ContextID: info.ID, Code: lang.PrintCwd}))
			if err := e.Delete(ctx, info.ID); err != nil {
				t.Fatal(err)
			}
			if got != dir {
				t.Fatalf("%s: cwd %q arrived as %q", lang.Language, dir, got)
			}
		}
	})
}
