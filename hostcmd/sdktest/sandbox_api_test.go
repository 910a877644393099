package sdktest

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/kernelhost/kernelhost/hostcmd/server"
	"github.com/kernelhost/kernelhost/hostcmd/settings"
	"github.com/kernelhost/kernelhost/internal/testkit"
	"github.com/kernelhost/kernelhost/transports/subprocess"
)

// TestOfficialSDKSandboxAPI runs sandbox-api.mjs: the official SDK's
// sbx.files, sbx.commands and sbx.pty against the sandbox API (its own
// listener and its paths on the code API's) of a host with an access
// token, beside sbx.runCode in the default python context, with commands in
// the bubblewrap sandbox. (The Python SDK is not tested: it cannot be
// installed here, with no PyPI.)
//
// Not parallel: it runs (in seconds) before TestOfficialSDK's node runs
// start, which are kept to two at once on a loaded 2-core machine.
func TestOfficialSDKSandboxAPI(t *testing.T) {
	node, err := exec.LookPath("node")
	if err == nil {
		_, err = os.Stat(filepath.Join("node_modules", "@e2b", "code-interpreter", "package.json"))
	}
	if err != nil {
		testkit.Missingf(t, "the SDK test needs node and node_modules (run `make test`, which installs them): %v", err)
	}
	testkit.NeedCommand(t, "bwrap", "bubblewrap")
	python, _ := pickPython(t)
	testkit.NeedPythonModules(t, python, "pandas")

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// The default cwd is writable in contexts, as the host makes it for the
	// subprocess plugin it starts (a linked-in transport is given it).
	home := t.TempDir()
	host, err := server.Start(ctx, settings.Config{
		Addr:           "127.0.0.1:0",
		SandboxAPIAddr: "127.0.0.1:0",
		AccessToken:    "sdk-token",
		DefaultCwd:     home,
		Transport: subprocess.New(subprocess.Options{Interpreters: map[string]string{"python": python},
			Sandbox: subprocess.SandboxOptions{Mode: subprocess.SandboxOn, Writable: []string{home}}}),
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
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
	cmd := exec.CommandContext(ctx, node, "--test", "--test-force-exit", "--test-reporter=spec", "sandbox-api.mjs")
	cmd.Env = append(os.Environ(),
		"E2B_DEBUG=true", "E2B_API_KEY=", "E2B_ACCESS_TOKEN=", "E2B_SANDBOX_URL=",
		"KH_SANDBOX_URL="+host.URL(),
		"KH_ENVD_URL=http://"+host.SandboxAPIAddr(),
		"KH_TOKEN=sdk-token",
	)
	out, err := cmd.CombinedOutput()
	t.Logf("node --test:\n%s", out)
	if err != nil {
		t.Fatalf("the SDK test failed: %v", err)
	}
}
