package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/kernelhost/kernelhost/core"
	"github.com/kernelhost/kernelhost/core/engine"
	"github.com/kernelhost/kernelhost/hostcmd/internal/buildinfo"
	"github.com/kernelhost/kernelhost/hostcmd/mcpserver"
	"github.com/kernelhost/kernelhost/hostcmd/settings"
)

// /mcp: the MCP tool set (package mcpserver) over MCP's streamable HTTP
// transport, beside the E2B API and behind the same checks: handler wraps
// it in the Host and Origin checks and authorize in the access token, like
// every route. `kernelhost mcp` serves the same tools over stdio
// (Host.MCPServer).

// Sessions are bounded (issue 39): the SDK closes one whose client sent
// no request for -mcp-session-idle (StreamableHTTPOptions.SessionTimeout)
// and never said goodbye (DELETE /mcp), and the host refuses an
// initialize past -mcp-max-sessions (admit; the SDK has no cap of its
// own). A session holds no contexts (those are the host's), only its
// bookkeeping, so an idle client that comes back just initializes a new
// one.

const mcpSessionIDHeader = "Mcp-Session-Id"

// mcpSessionsFull is the JSON-RPC error code of a refused initialize, in
// the range JSON-RPC leaves to servers.
const mcpSessionsFull = -32000

// mcpEndpoint is the MCP server and its streamable HTTP handler.
type mcpEndpoint struct {
	server      *mcp.Server
	handler     *mcp.StreamableHTTPHandler
	maxSessions int // negative: no cap
	idle        time.Duration
	mu          sync.Mutex
	// opening counts the admitted initializes not answered yet, whose
	// sessions server.Sessions may not list as initialized yet.
	opening int
}

func NewMCPServer(e *engine.Engine, met *Metrics, log *slog.Logger) *mcp.Server {
	opts := mcpserver.Options{Engine: e, Logger: log, Version: buildinfo.Version()}
	if met != nil {
		opts.Refused = met.refused
	}
	return mcpserver.New(opts)
}

func newMCPEndpoint(cfg settings.Config, e *engine.Engine, met *Metrics) *mcpEndpoint {
	s := NewMCPServer(e, met, cfg.Logger)
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, &mcp.StreamableHTTPOptions{
		Logger:              cfg.Logger,
		SessionTimeout:      cfg.MCPSessionIdle,
		MaxRequestBodyBytes: cfg.MaxBodyBytes,
		// The SDK's own DNS-rebinding check refuses any non-loopback Host on
		// a loopback connection; browserGuard already checks Host for every
		// route, with the host's allowed-hosts list (E2B's proxy names), so
		// /mcp answers exactly the Hosts the rest of the API answers.
		DisableLocalhostProtection: true,
	})
	return &mcpEndpoint{server: s, handler: h, maxSessions: cfg.MCPMaxSessions, idle: cfg.MCPSessionIdle}
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
func (a *API) serveMCP(w http.ResponseWriter, r *http.Request) {
	session := r.Header.Get(mcpSessionIDHeader)
	if r.Method != http.MethodPost {
		a.mcp.handler.ServeHTTP(w, r)
		return
	}
	body, ok := a.readBody(w, r)
	if !ok {
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	if session == "" {
		a.mcp.serveNewSession(w, r, body, a.log)
		return
	}
	rw := &mcpResponseWatch{ResponseWriter: w}
	a.mcp.handler.ServeHTTP(rw, r)
	if r.Context().Err() != nil && !rw.answered && (rw.status == 0 || rw.status == http.StatusOK) {
		a.mcp.cancelCalls(r, body, a.log)
	}
}

// serveNewSession serves a POST without a session id. An initialize,
// which opens a session, is served only while the open sessions are below
// the cap; other messages (the SDK answers them in a session that ends
// with the request) go through.
func (m *mcpEndpoint) serveNewSession(w http.ResponseWriter, r *http.Request, body []byte, log *slog.Logger) {
	id, initialize := initializeID(body)
	if !initialize || m.maxSessions < 0 {
		m.handler.ServeHTTP(w, r)
		return
	}
	if !m.admit() {
		log.Info("MCP session refused: the cap is reached", "max_sessions", m.maxSessions, "setting", settings.EnvVar("mcp-max-sessions"))
		m.refuseSession(w, id)
		return
	}
	// The reservation ends when the answer goes out: the session is
	// initialized by then and counted as open. Ending it only when the
	// handler returns counted the session twice for a moment, in which a
	// client quick to open another was refused below the cap.
	rw := &mcpInitializeWatch{ResponseWriter: w, answered: m.release}
	defer rw.release()
	m.handler.ServeHTTP(rw, r)
}

// release ends an admitted initialize's reservation.
func (m *mcpEndpoint) release() {
	m.mu.Lock()
	m.opening--
	m.mu.Unlock()
}

// mcpInitializeWatch calls answered once, at the first byte of the answer
// to an initialize, or when the request ends without one.
type mcpInitializeWatch struct {
	http.ResponseWriter
	answered func()
	once     sync.Once
}

func (w *mcpInitializeWatch) Write(p []byte) (int, error) {
	w.release()
	return w.ResponseWriter.Write(p)
}

func (w *mcpInitializeWatch) release() { w.once.Do(w.answered) }

func (w *mcpInitializeWatch) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// admit reserves a place for the session an initialize opens: false when
// the open sessions (and those being opened) are at the cap. A session
// counts once initialized: the SDK also lists, for a moment, the one it
// makes to answer a message sent without a session. Concurrent
// initializes near the cap may be refused a little early, never let past.
func (m *mcpEndpoint) admit() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	open := m.opening
	for ss := range m.server.Sessions() {
		if ss.InitializeParams() != nil {
			open++
		}
	}
	if open >= m.maxSessions {
		return false
	}
	m.opening++
	return true
}

// refuseSession answers an initialize past the cap: 403, which MCP clients
// (the Go SDK's included) read the JSON-RPC error of, where they take 429
// and 503 for a transient failure and show only the status. The message
// names the cap, its setting and what frees a place.
func (m *mcpEndpoint) refuseSession(w http.ResponseWriter, id json.RawMessage) {
	msg := fmt.Sprintf("too many open MCP sessions: the host allows %d (setting %s); end one (DELETE /mcp with its %s) or wait until one has been idle for %s (setting %s)",
		m.maxSessions, settings.EnvVar("mcp-max-sessions"), mcpSessionIDHeader, m.idle, settings.EnvVar("mcp-session-idle"))
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id,
		"error": map[string]any{"code": mcpSessionsFull, "message": msg}})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusForbidden)
	_, _ = w.Write(body)
}

// initializeID finds an initialize request in a POST body and returns its
// id.
func initializeID(body []byte) (json.RawMessage, bool) {
	for _, call := range mcpCalls(body) {
		if call.Method == "initialize" {
			return call.ID, true
		}
	}
	return nil, false
}

// mcpCall is a JSON-RPC request: a message with an id and a method.
type mcpCall struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
}

// mcpCalls are the requests in a POST body (one message, or a batch).
func mcpCalls(body []byte) []mcpCall {
	msgs := []json.RawMessage{body}
	if b := bytes.TrimSpace(body); len(b) > 0 && b[0] == '[' {
		if json.Unmarshal(b, &msgs) != nil {
			return nil
		}
	}
	var calls []mcpCall
	for _, raw := range msgs {
		var call mcpCall
		if json.Unmarshal(raw, &call) == nil && call.ID != nil && call.Method != "" {
			calls = append(calls, call)
		}
	}
	return calls
}

// cancelCalls sends the session of r a notifications/cancelled for each
// call in body, through the handler as a client's own would go.
func (m *mcpEndpoint) cancelCalls(r *http.Request, body []byte, log *slog.Logger) {
	for _, call := range mcpCalls(body) {
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
