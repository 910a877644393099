package policy

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kernelhost/kernelhost/core/engine"
	"github.com/kernelhost/kernelhost/internal/testkit"
)

// wasmDir holds the modules built for this run: denylist.wasm from Go, and
// reserved.wasm plus every testdata/*.wat from WAT (when wat2wasm exists).
var (
	wasmDir string
	watErr  error // why the WAT modules were not built, if they were not
)

// withCache points opts at a compilation cache kept across runs: compiling
// the 2 MB Go module takes seconds (a minute under -race), and every test
// loads its own Chain. Entries are keyed by the module's hash and wazero's
// version, so a stale entry is never used.
func withCache(opts Options) Options {
	if opts.CacheDir == "" {
		opts.CacheDir = filepath.Join(os.TempDir(), "kernelhost-policy-test-cache")
	}
	return opts
}

func TestMain(m *testing.M) {
	testkit.Main(m, func(dir string) error {
		wasmDir = dir
		if err := buildModules(dir); err != nil {
			return fmt.Errorf("build test modules: %w", err)
		}
		return nil
	})
}

func buildModules(dir string) error {
	if err := testkit.Denylist(filepath.Join(dir, "denylist.wasm")); err != nil {
		return err
	}
	wats, _ := filepath.Glob("testdata/*.wat")
	wats = append(wats, "examples/reserved/reserved.wat")
	for _, w := range wats {
		out := filepath.Join(dir, strings.TrimSuffix(filepath.Base(w), ".wat")+".wasm")
		if err := testkit.Wat("plugins/policy/"+w, out); err != nil {
			if errors.Is(err, testkit.ErrNoWat2wasm) && os.Getenv("CI") == "" {
				watErr = err
				return nil
			}
			return err
		}
	}
	return nil
}

func needWAT(t testing.TB) {
	t.Helper()
	if watErr != nil {
		t.Skip("skipping WAT modules:", watErr)
	}
}

func wasmPath(name string) string { return filepath.Join(wasmDir, name+".wasm") }

// load loads a chain of the named modules (name or name=config) and closes it
// at the end of the test.
func load(t testing.TB, opts Options, specs ...string) *Chain {
	t.Helper()
	var mcs []ModuleConfig
	for _, s := range specs {
		name, cfg, _ := strings.Cut(s, "=")
		if name != "denylist" {
			needWAT(t)
		}
		mcs = append(mcs, ModuleConfig{Path: wasmPath(name), Config: cfg})
	}
	c, err := Load(context.Background(), mcs, withCache(opts))
	if err != nil {
		t.Fatalf("Load(%v): %v", specs, err)
	}
	t.Cleanup(func() {
		if err := c.Close(context.Background()); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return c
}

func input(env map[string]string) engine.PolicyInput {
	return engine.PolicyInput{
		ContextID: "ctx-1", Language: "python", Cwd: "/home/user",
		EnvVars:   env,
		GlobalEnv: map[string]string{"HOME": "/home/user"},
		Metadata:  map[string]string{"request_id": "r-1"},
	}
}

func evaluate(t testing.TB, c *Chain, env map[string]string) engine.PolicyDecision {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d, err := c.Evaluate(ctx, input(env))
	if err != nil {
		t.Fatalf("Evaluate(%v): %v", env, err)
	}
	return d
}

func rejectedKeys(d engine.PolicyDecision) []string {
	var keys []string
	for _, r := range d.Rejections {
		keys = append(keys, r.Key)
	}
	return keys
}

func wantModuleError(t *testing.T, err error, kind error, module string, texts ...string) {
	t.Helper()
	var me *ModuleError
	if !errors.As(err, &me) {
		t.Fatalf("error = %v (%T), want a *ModuleError", err, err)
	}
	if !errors.Is(err, kind) {
		t.Errorf("error %q is not %v", err, kind)
	}
	msg := err.Error()
	for _, s := range append([]string{"policy " + module + " ("}, texts...) {
		if !strings.Contains(msg, s) {
			t.Errorf("error %q does not contain %q", msg, s)
		}
	}
	if strings.Contains(msg, "\n") {
		t.Errorf("error %q spans several lines", msg)
	}
}
