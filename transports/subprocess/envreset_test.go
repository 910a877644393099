package subprocess

import (
	"context"
	"testing"
	"time"

	"github.com/kernelhost/kernelhost/core/engine"
	"github.com/kernelhost/kernelhost/internal/testkit"
	"github.com/kernelhost/kernelhost/transports/transporttest"
)

// javaInFull is the Java snippets with System written in full: the test
// declares a class System of its own.
var javaInFull = func() transporttest.LanguageSnippets {
	j := transporttest.Java()
	j.PrintEnv = func(key string) string {
		return `java.lang.System.out.print(java.lang.System.getenv("` + key + `") == null ? "<unset>" : java.lang.System.getenv("` + key + `"));`
	}
	return j
}()

func newEnvEngine(t *testing.T) *engine.Engine {
	t.Helper()
	return transporttest.NewEngine(t, engine.Config{Transport: New(Options{})})
}

// Code a request leaves in its context must not turn the engine's env reset
// into a no-op: each request below redefines what the reset snippets would
// naively call, while its secret is set; the next request must not see the
// secret, and PATH, which the request shadowed, must come back.
func TestEnvResetCannotBeRedefined(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		lang     transporttest.LanguageSnippets
		redefine string
	}{
		{transporttest.Bash(), "unset() { :; }; export() { :; }; builtin() { :; }; command() { :; }; .() { :; }; eval() { :; }\n" +
			"shopt -s expand_aliases; alias unset=: export=:"},
		{transporttest.Python(), "import builtins, types\n_real_import = builtins.__import__\n" +
			"_fake = types.SimpleNamespace(environ={}, chdir=lambda p: None)\n" +
			"builtins.__import__ = lambda name, *a, **k: _fake if name == 'os' and not a and not k else _real_import(name, *a, **k)\n" +
			"import os\nos.environ.__class__.pop = lambda self, *a: None\nos.environ.__class__.update = lambda self, *a, **k: None"},
		{transporttest.JavaScript(), "process.env = new Proxy(process.env, { set: () => true, deleteProperty: () => true });\n" +
			"Object.prototype.hasOwnProperty = () => false;"},
		// In base itself, where a helper's environment (parent base) finds it.
		{transporttest.R(), "for (f in c('Sys.setenv', 'Sys.unsetenv')) {\n" +
			"  unlockBinding(f, baseenv()); assign(f, function(...) invisible(TRUE), envir = baseenv())\n}"},
		// A class named System shadows java.lang.System in later snippets.
		{javaInFull, "class System { static void setProperty(String k, String v) {} static void clearProperty(String k) {} static java.util.Map<String, String> getenv() { return new java.util.HashMap<>(); } static String getProperty(String k) { return null; } static String getProperty(String k, String d) { return d; } }"},
	} {
		t.Run(tc.lang.Language, func(t *testing.T) {
			if _, ok := New(Options{}).langs[tc.lang.Language]; !ok {
				testkit.Missingf(t, "no %s interpreter on PATH", tc.lang.Language)
			}
			e := newEnvEngine(t)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			print := func(key string, env map[string]string) string {
				return transporttest.EngineStdout(t, transporttest.EngineRun(t, e, ctx, engine.ExecRequest{Language: tc.lang.Language, Code: tc.lang.PrintEnv(key), EnvVars: env}))
			}
			path := print("PATH", nil)
			transporttest.EngineStdout(t, transporttest.EngineRun(t, e, ctx, engine.ExecRequest{
				Language: tc.lang.Language, Code: tc.lang.PrintEnv("KH_SECRET") + "\n" + tc.redefine,
				EnvVars: map[string]string{"KH_SECRET": "s3cret", "PATH": "/nonexistent"},
			}))
			for i := 0; i < 2; i++ { // the second time with the redefinitions in force at the set
				if got := print("KH_SECRET", nil); got != "<unset>" {
					t.Fatalf("a later request saw the secret: %q", got)
				}
				if got := print("PATH", nil); got != path {
					t.Fatalf("PATH after the request = %q, want %q", got, path)
				}
				if got := print("KH_SECRET", map[string]string{"KH_SECRET": "again"}); got != "again" {
					t.Fatalf("KH_SECRET during a request = %q", got)
				}
			}
		})
	}
}
