package sdktest

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/kernelhost/kernelhost/hostcmd/server"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// TestOfficialSDK starts a host in-process on a free port and runs
// sdk.test.mjs with node against it. Without node or node_modules the test
// skips, except under CI, where it fails: `make test` installs both.
func TestOfficialSDK(t *testing.T) {
	node, err := exec.LookPath("node")
	if err == nil {
		_, err = os.Stat(filepath.Join("node_modules", "@e2b", "code-interpreter", "package.json"))
	}
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("the SDK test needs node and node_modules (run `make test`, which installs them): %v", err)
		}
		t.Skipf("node or node_modules missing (run `make test` to install them): %v", err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	host, err := server.Start(ctx, server.Config{
		Addr:       "127.0.0.1:0",
		DefaultCwd: t.TempDir(),
		Logger:     slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
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

	// --test-force-exit: the SDK leaves its request timer (60 s) running when a
	// request fails with a non-2xx status, which would keep node alive.
	cmd := exec.CommandContext(ctx, node, "--test", "--test-force-exit", "--test-reporter=spec", "sdk.test.mjs")
	cmd.Env = append(os.Environ(),
		"E2B_DEBUG=true",
		"E2B_SANDBOX_URL="+host.URL(),
		"E2B_API_KEY=", "E2B_ACCESS_TOKEN=",
	)
	out, err := cmd.CombinedOutput()
	t.Logf("node --test:\n%s", out)
	if err != nil {
		t.Fatalf("the SDK test failed: %v", err)
	}
}
