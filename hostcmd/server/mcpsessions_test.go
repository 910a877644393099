package server_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kernelhost/kernelhost/hostcmd/internal/hosttest"
	"github.com/kernelhost/kernelhost/hostcmd/server"
	"github.com/kernelhost/kernelhost/hostcmd/settings"
)

// Issue 39, finding 5: MCP sessions are bounded by a cap and an idle
// expiry, each a setting.

// awaitMCPSessions waits (bounded) until h has want open MCP sessions.
func awaitMCPSessions(t *testing.T, h *hosttest.Host, want int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for server.MCPSessions(h.Host) != want {
		if time.Now().After(deadline) {
			t.Fatalf("%d MCP sessions open, want %d", server.MCPSessions(h.Host), want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// With -mcp-max-sessions=2, two clients connect; a third is refused with
// 403 and a JSON-RPC error naming the cap and the setting, which the Go
// SDK's client reports; when one client ends its session, a new one
// connects.
func TestMCPSessionCap(t *testing.T) {
	t.Parallel()
	h := hosttest.Start(t, withToken, func(c *settings.Config) { c.MCPMaxSessions = 2 })
	auth := map[string]string{"Authorization": "Bearer " + mcpToken}
	first, _, err := connectMCP(t, h, auth, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := connectMCP(t, h, auth, ""); err != nil {
		t.Fatal(err)
	}
	const want = "too many open MCP sessions: the host allows 2 (setting KERNELHOST_MCP_MAX_SESSIONS)"
	if _, _, err := connectMCP(t, h, auth, ""); err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("a third session: %v, want %q", err, want)
	}
	status, body := postInitialize(t, h)
	var answer struct {
		ID    int `json:"id"`
		Error struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(body), &answer); status != http.StatusForbidden || err != nil || answer.ID != 7 || answer.Error.Code != -32000 || !strings.Contains(answer.Error.Message, want) || !strings.Contains(answer.Error.Message, "KERNELHOST_MCP_SESSION_IDLE") {
		t.Fatalf("initialize past the cap: %d %s, want 403 with a JSON-RPC error for id 7 naming both settings", status, body)
	}
	awaitMCPSessions(t, h, 2) // the refused ones left none
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	awaitMCPSessions(t, h, 1)
	if _, _, err := connectMCP(t, h, auth, ""); err != nil {
		t.Fatalf("after a session ended: %v", err)
	}
}

// postInitialize sends an initialize request (id 7) to h's /mcp as a
// client would and returns the answer's status and body.
func postInitialize(t *testing.T, h *hosttest.Host) (int, string) {
	t.Helper()
	return postMCP(t, h, "", `{"jsonrpc":"2.0","id":7,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
}

// postMCP posts message to h's /mcp in session (none: "") as a client
// would and returns the answer's status and body.
func postMCP(t *testing.T, h *hosttest.Host, session, message string) (int, string) {
	t.Helper()
	req, err := http.NewRequest("POST", h.URL()+"/mcp", strings.NewReader(message))
	if err != nil {
		t.Fatal(err)
	}
	if session != "" {
		req.Header.Set("Mcp-Session-Id", session)
	}
	req.Header.Set("Authorization", "Bearer "+mcpToken)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := h.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// A session whose client sends nothing for -mcp-session-idle is closed:
// its id then gets the SDK's 404 "session not found", the Go SDK's client
// finds its connection closed, and the session's place is free.
func TestMCPSessionIdleExpires(t *testing.T) {
	t.Parallel()
	h := hosttest.Start(t, withToken, func(c *settings.Config) {
		c.MCPMaxSessions = 1
		// Long enough that a client under load sends initialized after
		// initialize within it (200 ms failed CI at load 10), short enough
		// to await its expiry.
		c.MCPSessionIdle = 3 * time.Second
	})
	auth := map[string]string{"Authorization": "Bearer " + mcpToken}
	s, _, err := connectMCP(t, h, auth, "")
	if err != nil {
		t.Fatal(err)
	}
	awaitMCPSessions(t, h, 0)
	if status, body := postMCP(t, h, s.ID(), `{"jsonrpc":"2.0","id":8,"method":"tools/list"}`); status != http.StatusNotFound || !strings.Contains(body, "session not found") {
		t.Fatalf("a call in the expired session: %d %q, want 404 session not found", status, body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := s.ListTools(ctx, nil); err == nil {
		t.Fatal("the Go client's call in the expired session succeeded")
	}
	if _, _, err := connectMCP(t, h, auth, ""); err != nil {
		t.Fatalf("after the idle session expired: %v", err)
	}
}
