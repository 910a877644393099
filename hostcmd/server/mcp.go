package server

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/kernelhost/kernelhost/core"
	"github.com/kernelhost/kernelhost/core/engine"
	"github.com/kernelhost/kernelhost/hostcmd/mcpserver"
)

// /mcp: the MCP tool set (package mcpserver) over MCP's streamable HTTP
// transport, beside the E2B API and behind the same checks: handler wraps
// it in the Host and Origin checks and authorize in the access token, like
// every route. `kernelhost mcp` serves the same tools over stdio
// (Host.MCPServer).

// mcpSessionIdleTimeout closes a session whose client sent nothing for so
// long and never said goodbye (DELETE /mcp). A session holds no contexts
// (those are the host's), only its bookkeeping, so an idle client that
// comes back just initializes a new one.
const mcpSessionIdleTimeout = 30 * time.Minute

const mcpSessionIDHeader = "Mcp-Session-Id"

// mcpEndpoint is the MCP server and its streamable HTTP handler.
type mcpEndpoint struct {
	server  *mcp.Server
	handler *mcp.StreamableHTTPHandler
}

// Version is what the MCP server reports as its version (serverInfo);
// hostcmd/cli sets it to the build's.
var Version = "dev"

func newMCPServer(e *engine.Engine, met *metrics, log *slog.Logger) *mcp.Server {
	opts := mcpserver.Options{Engine: e, Logger: log, Version: Version}
	if met != nil {
		opts.Refused = met.refused
	}
	return mcpserver.New(opts)
}

func newMCPEndpoint(cfg Config, e *engine.Engine, met *metrics) *mcpEndpoint {
	s := newMCPServer(e, met, cfg.Logger)
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, &mcp.StreamableHTTPOptions{
		Logger:              cfg.Logger,
		SessionTimeout:      mcpSessionIdleTimeout,
		MaxRequestBodyBytes: cfg.MaxBodyBytes,
		// The SDK's own DNS-rebinding check refuses any non-loopback Host on
		// a loopback connection; browserGuard already checks Host for every
		// route, with the host's allowed-hosts list (E2B's proxy names), so
		// /mcp answers exactly the Hosts the rest of the API answers.
		DisableLocalhostProtection: true,
	})
	return &mcpEndpoint{server: s, handler: h}
}

// serveMCP serves POST (client messages), GET (the server's stream) and
// DELETE (end the session) on /mcp.
//
// A POST carrying a call streams its response. When the client goes away
// before the response went out, nobody can get it (the host keeps no event
// store to resume streams from), so the host cancels the call for it, as
// the client would have with notifications/cancelled: the engine takes it
// as the client leaving (the disconnect policy: the running code is
// interrupted, the context and the session stay).
func (a *api) serveMCP(w http.ResponseWriter, r *http.Request) {
	session := r.Header.Get(mcpSessionIDHeader)
	if r.Method != http.MethodPost || session == "" {
		a.mcp.handler.ServeHTTP(w, r)
		return
	}
	body, ok := a.readBody(w, r)
	if !ok {
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	rw := &mcpResponseWatch{ResponseWriter: w}
	a.mcp.handler.ServeHTTP(rw, r)
	if r.Context().Err() != nil && !rw.answered && (rw.status == 0 || rw.status == http.StatusOK) {
		a.mcp.cancelCalls(r, body, a.log)
	}
}

// cancelCalls sends the session of r a notifications/cancelled for each
// call in body, through the handler as a client's own would go.
func (m *mcpEndpoint) cancelCalls(r *http.Request, body []byte, log *slog.Logger) {
	var one json.RawMessage = body
	msgs := []json.RawMessage{one}
	if b := bytes.TrimSpace(body); len(b) > 0 && b[0] == '[' {
		if json.Unmarshal(b, &msgs) != nil {
			return
		}
	}
	for _, raw := range msgs {
		var call struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
		}
		if json.Unmarshal(raw, &call) != nil || call.ID == nil || call.Method == "" {
			continue
		}
		log.Info("MCP client left during a call: cancelling it", "mcp_session_id", core.Clip(r.Header.Get(mcpSessionIDHeader)), "method", core.Clip(call.Method))
		cancel, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "method": "notifications/cancelled",
			"params": map[string]any{"requestId": call.ID, "reason": "the client went away"}})
		ctx, stop := context.WithTimeout(context.WithoutCancel(r.Context()), 10*time.Second)
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.URL.String(), bytes.NewReader(cancel))
		if err == nil {
			req.Header = r.Header.Clone()
			req.RemoteAddr, req.Host = r.RemoteAddr, r.Host
			m.handler.ServeHTTP(discardResponse{header: http.Header{}}, req)
		}
		stop()
	}
}

// discardResponse takes the answer to a notification the host sent itself.
type discardResponse struct{ header http.Header }

func (d discardResponse) Header() http.Header         { return d.header }
func (d discardResponse) Write(p []byte) (int, error) { return len(p), nil }
func (d discardResponse) WriteHeader(int)             {}

// close ends every session (the host shuts down): their streams end, so
// the HTTP server's shutdown does not wait for them.
func (m *mcpEndpoint) close() {
	for ss := range m.server.Sessions() {
		_ = ss.Close()
	}
}

// mcpResponseWatch tells whether a POST's stream carried a response (the
// answer to the call), not only notifications (progress). The SDK writes
// each server-sent event in one Write.
type mcpResponseWatch struct {
	http.ResponseWriter
	status   int
	events   int
	answered bool
}

func (w *mcpResponseWatch) WriteHeader(status int) {
	w.status = status
	w.ResponseWriter.WriteHeader(status)
}

func (w *mcpResponseWatch) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	w.events++
	if !w.answered && isResponseEvent(p) {
		w.answered = true
	}
	return w.ResponseWriter.Write(p)
}

func (w *mcpResponseWatch) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// isResponseEvent: p is a server-sent event, or a JSON body, whose message
// is a JSON-RPC response (it has an id and no method). Only its first keys
// are read.
func isResponseEvent(p []byte) bool {
	if i := bytes.Index(p, []byte("data: ")); i >= 0 {
		p = p[i+len("data: "):]
	}
	dec := json.NewDecoder(bytes.NewReader(p))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return false
	}
	hasID := false
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			return false
		}
		switch key {
		case "method":
			return false
		case "id":
			hasID = true
		case "result", "error":
			return hasID
		}
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return false
		}
	}
	return hasID
}
