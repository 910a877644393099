package main

import (
	"context"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/kernelhost/kernelhost/hostcmd/mcpserver/mcptest"
	"github.com/kernelhost/kernelhost/internal/testkit"
)

// `kernelhost mcp`: the Go SDK's client starts the real binary as an MCP
// client configured with {"command": "kernelhost", "args": ["mcp"]} does,
// and talks to it over stdin and stdout. The TypeScript SDK's client does
// the same in hostcmd/sdktest/sdk-mcp.test.mjs; /mcp (HTTP) is tested in
// hostcmd/server/mcp_test.go.
func TestMCPStdio(t *testing.T) {
	t.Parallel()
	testkit.NeedPythonModules(t, testkit.DebianPython, "matplotlib")
	testkit.NeedCommand(t, "node", "nodejs")
	testkit.NeedCommand(t, "Rscript", "r-base-core")
	cmd := exec.Command(kernelhost, "mcp")
	cmd.Env = hostEnv("KERNELHOST_PYTHON="+testkit.DebianPython, "KERNELHOST_DEFAULT_CWD="+t.TempDir())
	var logs syncBuffer
	cmd.Stderr = &logs
	client, progress := mcptest.NewClient()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := client.Connect(ctx, &mcp.CommandTransport{Command: cmd, TerminateDuration: time.Minute}, nil)
	if err != nil {
		t.Fatalf("connect: %v\nlog:\n%s", err, logs.String())
	}
	defer func() {
		if t.Failed() {
			t.Logf("kernelhost mcp log:\n%s", logs.String())
		}
	}()
	// The test binary is not stamped: the MCP server tells the version
	// `kernelhost version` prints, "dev".
	if info := s.InitializeResult().ServerInfo; info.Name != "kernelhost" || info.Version != "dev" {
		t.Fatalf("server info %+v, want kernelhost dev", info)
	}
	mcptest.Tools(t, s, progress)

	// The client closes stdin: the host shuts down on its own, cleanly
	// (the SDK would SIGTERM it only after TerminateDuration).
	start := time.Now()
	if err := s.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if cmd.ProcessState == nil || !cmd.ProcessState.Success() {
		t.Fatalf("kernelhost mcp did not exit cleanly: %v", cmd.ProcessState)
	}
	if took := time.Since(start); took > 30*time.Second {
		t.Fatalf("kernelhost mcp took %v to exit after stdin closed", took)
	}
	for _, want := range []string{`"msg":"ready"`, `"reason":"the client closed stdin"`, `"msg":"stopped"`} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("the log (stderr) lacks %s", want)
		}
	}
}

// syncBuffer is a strings.Builder that exec's copy goroutine and the test
// share.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
