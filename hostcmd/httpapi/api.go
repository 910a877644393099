// Package httpapi is the host's HTTP API: the E2B code-interpreter routes
// (docs/api-contract.md, docs/openapi.json), /metrics, the MCP tools over
// streamable HTTP on /mcp, and what stands in front of them all (the Host
// and Origin checks, the access token, request ids in the log, the 503s
// while the host starts). It serves an engine; package server assembles
// the host around it.
package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"github.com/kernelhost/kernelhost/core"
	"github.com/kernelhost/kernelhost/core/engine"
	"github.com/kernelhost/kernelhost/docs"
	"github.com/kernelhost/kernelhost/hostcmd/envd"
	"github.com/kernelhost/kernelhost/hostcmd/settings"
)

// API serves the code-interpreter HTTP API (docs/api-contract.md) on an engine.
type API struct {
	engine       *engine.Engine
	log          *slog.Logger
	maxBodyBytes int64
	keepalive    time.Duration
	ready        atomic.Bool  // the default contexts exist
	starting     atomic.Value // string: what start-up is doing, for /health
	token        []byte       // settings.Config.AccessToken; empty: no check
	tokenScope   string       // settings.ScopeAll or settings.ScopeExecute
	metrics      *Metrics     // nil: no /metrics (settings.Config.DisableMetrics)
	browser      *browserGuard
	mcp          *mcpEndpoint  // /mcp
	sandbox      *envd.Server  // the sandbox API's paths; nil: off
	writeTimeout time.Duration // a stream's client must take each write within it
	// closing is done once the host shuts down (beginShutdown).
	closing       context.Context
	beginShutdown context.CancelFunc
}

// New is the HTTP API over e, as cfg sets it up. met may be nil: no
// /metrics.
func New(cfg settings.Config, e *engine.Engine, met *Metrics) *API {
	a := &API{engine: e, log: cfg.Logger, maxBodyBytes: cfg.MaxBodyBytes, keepalive: cfg.Keepalive,
		token: []byte(cfg.AccessToken), tokenScope: cfg.AccessTokenScope, metrics: met,
		browser: newBrowserGuard(cfg.AllowedHosts, cfg.AllowedOrigins, cfg.Logger), writeTimeout: cfg.WriteTimeout}
	a.closing, a.beginShutdown = context.WithCancel(context.Background())
	a.mcp = newMCPEndpoint(cfg, e, met)
	return a
}

// SetReady says whether the default contexts exist: /health answers 200
// only then.
func (a *API) SetReady(ready bool) { a.ready.Store(ready) }

// BeginShutdown tells the streams in flight that the host is shutting
// down, and /health that it is not ready.
func (a *API) BeginShutdown() {
	a.ready.Store(false)
	a.beginShutdown()
}

// CloseMCP ends the MCP sessions open on /mcp.
func (a *API) CloseMCP() { a.mcp.close() }

// MCPSessions counts the sessions open on /mcp.
func (a *API) MCPSessions() int {
	n := 0
	for range a.mcp.server.Sessions() {
		n++
	}
	return n
}

// ServeSandboxAPI serves srv's paths (the sandbox API) beside the API's on
// the API's listener.
func (a *API) ServeSandboxAPI(srv *envd.Server) { a.sandbox = srv }

// Guard puts next behind the API's Host and Origin checks and access
// token, for the sandbox API's own listener.
func (a *API) Guard(next http.Handler) http.Handler {
	return a.browser.wrap(a.authorize(next))
}

// RouteTable lists the routes the API serves, as "METHOD /pattern": what
// docs/openapi.json must describe.
func RouteTable() []string {
	out := make([]string, len(routes))
	for i, rt := range routes {
		out[i] = rt.method + " " + rt.pattern
	}
	return out
}

// route is one entry of the API's route table: an HTTP method, a ServeMux
// path pattern ({id} is a path parameter) and the handler.
type route struct {
	method, pattern string
	handle          func(*API, http.ResponseWriter, *http.Request)
}

// routes is every route the API serves, the one list that handler registers
// and that docs/openapi.json describes (a test holds the two equal both ways).
var routes = []route{
	{"GET", "/health", (*API).health},
	{"POST", "/execute", (*API).execute},
	{"GET", "/contexts", (*API).listContexts},
	{"POST", "/contexts", (*API).createContext},
	{"DELETE", "/contexts/{id}", (*API).deleteContext},
	{"POST", "/contexts/{id}/restart", (*API).restartContext},
	{"POST", "/contexts/{id}/interrupt", (*API).interruptContext},
	{"POST", "/contexts/{id}/fork", (*API).forkContext},
	{"GET", "/executions/{id}", (*API).executionState},
	{"GET", "/executions/{id}/stream", (*API).resumeExecution},
	{"GET", "/metrics", (*API).serveMetrics},
	{"GET", "/openapi.json", (*API).openAPI},
	{"POST", "/mcp", (*API).serveMCP},
	{"GET", "/mcp", (*API).serveMCP},
	{"DELETE", "/mcp", (*API).serveMCP},
}

// Handler returns the API's routes behind the Host and Origin checks
// (browser.go) and the access token.
func (a *API) Handler() http.Handler {
	mux := http.NewServeMux()
	for _, rt := range routes {
		mux.HandleFunc(rt.method+" "+rt.pattern, func(w http.ResponseWriter, r *http.Request) {
			rt.handle(a, w, r)
		})
	}
	return WithRequestLog(a.log, a.browser.wrap(a.authorize(a.withSandboxAPI(jsonRouteErrors(mux)))))
}

// withSandboxAPI serves the sandbox API's paths (sandboxapi.go) when it is
// on, next's otherwise.
func (a *API) withSandboxAPI(next http.Handler) http.Handler {
	if a.sandbox == nil {
		return next
	}
	sandbox := a.sandbox.Handler()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if IsSandboxAPIPath(r.URL.Path) {
			sandbox.ServeHTTP(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// jsonRouteErrors answers an unknown route (404) and a known path with
// another method (405, with the mux's Allow header) as FastAPI does, with
// {"detail": "Not Found"} or {"detail": "Method Not Allowed"}, instead of the
// mux's plain text: the unknown-route answer of docs/api-contract.md §2. Errors of a route's
// own handler (e.g. 404 "Context x not found") stay as the handler wrote them.
func jsonRouteErrors(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, pattern := mux.Handler(r); pattern == "" {
			// No route: the mux answers 404, 405, or redirects a path to
			// its clean form.
			w = &routeErrorWriter{ResponseWriter: w}
		}
		mux.ServeHTTP(w, r)
	})
}

// routeErrorWriter replaces the body of the mux's 404 and 405 answers (the
// status, the Allow header and redirects pass through).
type routeErrorWriter struct {
	http.ResponseWriter
	replaced bool
}

func (w *routeErrorWriter) WriteHeader(status int) {
	if status != http.StatusNotFound && status != http.StatusMethodNotAllowed {
		w.ResponseWriter.WriteHeader(status)
		return
	}
	w.replaced = true
	writeRouteError(w.ResponseWriter, status)
}

// writeRouteError writes FastAPI's answer to an unknown route (404) or method (405).
func writeRouteError(w http.ResponseWriter, status int) {
	body, _ := json.Marshal(routeError{Detail: http.StatusText(status)})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

func (w *routeErrorWriter) Write(p []byte) (int, error) {
	if w.replaced {
		return len(p), nil // the mux's plain-text body, already replaced
	}
	return w.ResponseWriter.Write(p)
}

// routeError is FastAPI's error body, {"detail": "..."}.
type routeError struct {
	Detail string `json:"detail"`
}

func (a *API) health(w http.ResponseWriter, r *http.Request) {
	if !a.ready.Load() {
		msg := "Starting: the default contexts are not ready yet"
		if what, ok := a.starting.Load().(string); ok {
			msg += ": " + what
		}
		writeText(w, http.StatusServiceUnavailable, msg)
		return
	}
	writeJSON(w, "OK")
}

// SetStarting says what start-up is doing, for /health until ready.
func (a *API) SetStarting(what string) { a.starting.Store(what) }

// openAPI serves the API description (docs/openapi.json, embedded). It is
// not secret, but it follows the token's scope like every route but /health:
// with scope "all" nothing but the readiness probe answers without the token.
func (a *API) openAPI(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = io.WriteString(w, docs.OpenAPI())
}

// readBody reads the whole body up to the configured limit; past it the
// answer is 413, past the server's ReadTimeout 408. (net/http lifts the read
// deadline once the body is read, so it never cuts the response stream.)
func (a *API) readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, a.maxBodyBytes))
	if err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			writeText(w, http.StatusRequestTimeout, fmt.Sprintf("Request body not received in time (setting %s)", settings.EnvVar("read-timeout")))
			return nil, false
		}
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			writeText(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("Request body too large: the limit is %d bytes (setting %s)", a.maxBodyBytes, settings.EnvVar("max-body-bytes")))
			return nil, false
		}
		writeText(w, http.StatusBadRequest, "Failed to read the request body: "+err.Error())
		return nil, false
	}
	return body, true
}

// statusOf maps engine errors to HTTP statuses. Never 502: the SDKs read it
// as "the sandbox timed out".
func statusOf(err error) int {
	switch core.KindOf(err) {
	case core.KindInvalid:
		return http.StatusBadRequest
	case core.KindNotFound:
		return http.StatusNotFound
	case core.KindQueueFull:
		return http.StatusTooManyRequests
	case core.KindRejected:
		return http.StatusForbidden
	case core.KindUnavailable:
		return http.StatusServiceUnavailable
	case core.KindTooLarge:
		return http.StatusRequestEntityTooLarge
	case core.KindGone:
		return http.StatusGone
	case core.KindUnsupported:
		return http.StatusNotImplemented
	}
	return http.StatusInternalServerError
}

func (a *API) writeError(w http.ResponseWriter, r *http.Request, err error) {
	status := statusOf(err)
	if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
		return // the client left while we worked for it: nobody to answer
	}
	msg := err.Error()
	var ce *core.Error
	if !errors.As(err, &ce) {
		msg = "Internal error: " + msg
	}
	level := slog.LevelInfo
	if status >= 500 {
		level = slog.LevelError
	}
	a.log.Log(r.Context(), level, "request failed", "method", r.Method, "path", core.Clip(r.URL.Path), "status", status, "err", msg)
	writeText(w, status, msg)
}

// jsonProblem describes a decoding error without echoing the body (it may
// hold code or secrets).
func jsonProblem(err error) string {
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) {
		if typeErr.Field == "" {
			return "the body must be a JSON object"
		}
		return fmt.Sprintf("field %q must not be a JSON %s", typeErr.Field, typeErr.Value)
	}
	var syntaxErr *json.SyntaxError
	if errors.As(err, &syntaxErr) {
		return fmt.Sprintf("malformed JSON at byte %d: %v", syntaxErr.Offset, err)
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return "malformed JSON: unexpected end of input"
	}
	return err.Error()
}

func writeText(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, msg)
}

func writeJSON(w http.ResponseWriter, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		writeText(w, http.StatusInternalServerError, "Internal error: encode response: "+err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
}
