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

// TestMCPClientTS runs mcp-client.mcptest.mjs: the official TypeScript MCP
// client against `kernelhost mcp` (stdio, the binary built here) and /mcp
// (streamable HTTP, on a host with an access token). The Go SDK's client
// runs the same checks in hostcmd/server/mcp_test.go and hostcmd/mcp_test.go.
func TestMCPClientTS(t *testing.T) {
	t.Parallel()
	node, err := exec.LookPath("node")
	if err == nil {
		_, err = os.Stat(filepath.Join("node_modules", "@modelcontextprotocol", "sdk", "package.json"))
	}
	if err != nil {
		testkit.Missingf(t, "the MCP client test needs node and node_modules (run `make test`, which installs them): %v", err)
	}
	testkit.NeedPythonModules(t, testkit.DebianPython, "matplotlib")
	testkit.NeedCommand(t, "Rscript", "r-base-core")
	kernelhost := filepath.Join(t.TempDir(), "kernelhost")
	if err := testkit.Kernelhost(kernelhost); err != nil {
		t.Fatalf("build kernelhost: %v", err)
	}

	const token = "mcp-ts-token"
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	host, err := server.Start(ctx, settings.Config{
		Addr:        "127.0.0.1:0",
		DefaultCwd:  t.TempDir(),
		AccessToken: token,
		Logger:      slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Transport:   subprocess.New(subprocess.Options{Interpreters: map[string]string{"python": testkit.DebianPython}}),
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

	cmd := exec.CommandContext(ctx, node, "--test", "--test-force-exit", "--test-reporter=spec", "mcp-client.mcptest.mjs")
	cmd.Env = append(os.Environ(),
		"KH_MCP_URL="+host.URL()+"/mcp",
		"KH_MCP_TOKEN="+token,
		"KH_MCP_COMMAND="+kernelhost,
		// The settings of `kernelhost mcp`, as an MCP host's config would
		// give them.
		"KERNELHOST_PYTHON="+testkit.DebianPython,
		"KERNELHOST_PLUGIN_DIR="+pluginDir,
		"KERNELHOST_DEFAULT_CWD="+t.TempDir(),
		"KERNELHOST_LOG_LEVEL=warn",
	)
	out, err := cmd.CombinedOutput()
	t.Logf("node --test:\n%s", out)
	if err != nil {
		t.Fatalf("the MCP client test failed: %v", err)
	}
}
