package server_test

import (
	"context"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/kernelhost/kernelhost/hostcmd/internal/hosttest"
	"github.com/kernelhost/kernelhost/hostcmd/mcpserver/mcptest"
)

// BenchmarkRoundTripMCP measures what MCP adds to an execution as a client
// sees it: `1+1` as a run_code call of the Go SDK's client over streamable
// HTTP (/mcp: JSON-RPC, the session, server-sent events, the result built
// for a model) and as POST /execute, on one host, alternating the two in one
// loop. It reports both medians and their difference (added-p50-ns); ns/op
// is one pair.
func BenchmarkRoundTripMCP(b *testing.B) {
	h := hosttest.Start(b)
	s, _, err := connectMCP(b, h, nil, "")
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	params := &mcp.CallToolParams{Name: "run_code", Arguments: map[string]any{"code": "1+1"}}
	body := []byte(`{"code":"1+1"}`)
	compareRuns(b, "mcp", func() {
		res, err := s.CallTool(ctx, params)
		if err != nil || res.IsError || !strings.Contains(mcptest.Texts(res), "Result:\n2") {
			b.Fatalf("run_code: %v %v", err, res)
		}
	}, "execute", func() { postExpect(b, h, body, `"text":"2"`) })
}
