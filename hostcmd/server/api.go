package server

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kernelhost/kernelhost/core"
	"github.com/kernelhost/kernelhost/core/engine"
	"github.com/kernelhost/kernelhost/docs"
)

// api serves the code-interpreter HTTP API (docs/api-contract.md) on an engine.
type api struct {
	engine       *engine.Engine
	log          *slog.Logger
	maxBodyBytes int64
	keepalive    time.Duration
	ready        atomic.Bool  // the default contexts exist
	starting     atomic.Value // string: what start-up is doing, for /health
	token        []byte       // Config.AccessToken; empty: no check
	tokenScope   string       // ScopeAll or ScopeExecute
	metrics      *metrics     // nil: no /metrics (Config.DisableMetrics)
	browser      *browserGuard
	writeTimeout time.Duration // a stream's client must take each write within it
	// closing is done once the host shuts down (beginShutdown).
	closing       context.Context
	beginShutdown context.CancelFunc
}

// shutdownWriteGrace is what a stream's client gets to take the stream's
// last lines once the host shuts down: a stalled one does not hold the
// shutdown for writeTimeout.
const shutdownWriteGrace = time.Second

// writeGuard sets a stream's write deadline: writeTimeout from each write,
// or shutdownWriteGrace once the host shuts down, whichever comes first.
type writeGuard struct {
	mu      sync.Mutex
	rc      *http.ResponseController
	timeout time.Duration
	closing bool
	stop    func() bool
}

func (a *api) writeDeadline(rc *http.ResponseController) *writeGuard {
	g := &writeGuard{rc: rc, timeout: a.writeTimeout}
	g.stop = context.AfterFunc(a.closing, func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		g.closing = true
		_ = g.rc.SetWriteDeadline(time.Now().Add(shutdownWriteGrace))
	})
	return g
}

// arm gives the next write its deadline.
func (g *writeGuard) arm() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.closing {
		_ = g.rc.SetWriteDeadline(time.Now().Add(g.timeout))
	}
}

// route is one entry of the API's route table: an HTTP method, a ServeMux
// path pattern ({id} is a path parameter) and the handler.
type route struct {
	method, pattern string
	handle          func(*api, http.ResponseWriter, *http.Request)
}

// routes is every route the API serves, the one list that handler registers
// and that docs/openapi.json describes (a test holds the two equal both ways).
var routes = []route{
	{"GET", "/health", (*api).health},
	{"POST", "/execute", (*api).execute},
	{"GET", "/contexts", (*api).listContexts},
	{"POST", "/contexts", (*api).createContext},
	{"DELETE", "/contexts/{id}", (*api).deleteContext},
	{"POST", "/contexts/{id}/restart", (*api).restartContext},
	{"POST", "/contexts/{id}/interrupt", (*api).interruptContext},
	{"GET", "/executions/{id}", (*api).executionState},
	{"GET", "/executions/{id}/stream", (*api).resumeExecution},
	{"GET", "/metrics", (*api).serveMetrics},
	{"GET", "/openapi.json", (*api).openAPI},
}

// handler returns the API's routes behind the Host and Origin checks
// (browser.go) and the access token.
func (a *api) handler() http.Handler {
	mux := http.NewServeMux()
	for _, rt := range routes {
		mux.HandleFunc(rt.method+" "+rt.pattern, func(w http.ResponseWriter, r *http.Request) {
			rt.handle(a, w, r)
		})
	}
	return withRequestLog(a.log, a.browser.wrap(a.authorize(jsonRouteErrors(mux))))
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

// authorize requires the access token, when one is configured, on every
// route but /health (readiness probes carry no credentials), or with
// ScopeExecute only on the execution routes: /execute and /executions/...
// (an execution's output and its live stream are as private as the code
// that made them). CORS preflights never carry credentials and are answered
// by cors before this. The comparison takes constant time.
//
// "Authorization: Bearer <token>" works on every route. On /execute,
// "X-Access-Token: <token>" works too: it is the one credential the official
// SDKs send (their envd access token, only on /execute; docs/api-contract.md §1.1),
// so a host whose token is the sandbox's envd token and whose scope is
// execute serves the SDKs unchanged.
func (a *api) authorize(next http.Handler) http.Handler {
	if len(a.token) == 0 {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		isExecute := r.URL.Path == "/execute"
		isExecution := isExecute || strings.HasPrefix(r.URL.Path, "/executions/")
		if r.URL.Path == "/health" || (a.tokenScope == ScopeExecute && !isExecution) {
			next.ServeHTTP(w, r)
			return
		}
		if a.tokenMatches(bearer(r.Header.Get("Authorization"))) ||
			(isExecute && a.tokenMatches(r.Header.Get("X-Access-Token"))) {
			next.ServeHTTP(w, r)
			return
		}
		// The log names the route, never the presented value.
		a.log.InfoContext(r.Context(), "request refused: missing or wrong access token", "method", r.Method, "path", core.Clip(r.URL.Path), "remote_addr", r.RemoteAddr)
		w.Header().Set("WWW-Authenticate", `Bearer realm="kernelhost"`)
		writeText(w, http.StatusUnauthorized, "Unauthorized: send the host's access token as \"Authorization: Bearer <token>\" (setting "+EnvVar("access-token")+")")
	})
}

// tokenMatches compares in constant time (for equal lengths; the length of
// the token is not a secret worth a timing-safe comparison of lengths).
func (a *api) tokenMatches(got string) bool {
	return got != "" && subtle.ConstantTimeCompare([]byte(got), a.token) == 1
}

// bearer returns the credentials of an "Authorization: Bearer x" header
// (the scheme is case-insensitive, RFC 7235), or "".
func bearer(h string) string {
	scheme, cred, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimSpace(cred)
}

func (a *api) health(w http.ResponseWriter, r *http.Request) {
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

// setStarting says what start-up is doing, for /health until ready.
func (a *api) setStarting(what string) { a.starting.Store(what) }

// openAPI serves the API description (docs/openapi.json, embedded). It is
// not secret, but it follows the token's scope like every route but /health:
// with scope "all" nothing but the readiness probe answers without the token.
func (a *api) openAPI(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = io.WriteString(w, docs.OpenAPI())
}

// executeRequest is the /execute body. Pointers tell absent and null apart
// from empty; a *string map value rejects null values.
type executeRequest struct {
	Code      *string            `json:"code"`
	ContextID *string            `json:"context_id"`
	Language  *string            `json:"language"`
	EnvVars   map[string]*string `json:"env_vars"`
	// Timeout (seconds) bounds this execution's run, overriding the host's
	// execution timeout; 0 or absent: the host's. An extension: the SDKs
	// never send it.
	Timeout *float64 `json:"timeout"`
}

// maxTimeoutSeconds keeps a timeout inside time.Duration (about 292 years).
const maxTimeoutSeconds = float64(math.MaxInt64/int64(time.Second)) - 1

// minTimeoutSeconds is the shortest timeout taken: a smaller positive one
// (1e-12) would round to a zero Duration, which means "none", the opposite
// of what was asked; and no execution finishes in less anyway.
const minTimeoutSeconds = 0.001

func (a *api) execute(w http.ResponseWriter, r *http.Request) {
	if !requireJSON(w, r) {
		a.metrics.invalid()
		return
	}
	body, ok := a.readBody(w, r)
	if !ok {
		a.metrics.invalid()
		return
	}
	var req executeRequest
	if err := json.Unmarshal(body, &req); err != nil {
		a.invalidExecute(w, "Invalid request body: "+jsonProblem(err))
		return
	}
	if req.Code == nil {
		a.invalidExecute(w, `Invalid request body: "code" is required and must be a string`)
		return
	}
	env := make(map[string]string, len(req.EnvVars))
	for k, v := range req.EnvVars {
		if v == nil {
			a.invalidExecute(w, fmt.Sprintf("Invalid request body: env_vars[%s] must be a string", core.Quote(k)))
			return
		}
		env[k] = *v
	}
	var timeout time.Duration
	if req.Timeout != nil {
		if t := *req.Timeout; t != 0 && (t < minTimeoutSeconds || t > maxTimeoutSeconds) {
			a.invalidExecute(w, fmt.Sprintf(`Invalid request body: "timeout" must be 0 (the host's) or a number of seconds from %g to %.0f`, minTimeoutSeconds, maxTimeoutSeconds))
			return
		}
		timeout = time.Duration(*req.Timeout * float64(time.Second))
	}
	if req.ContextID != nil {
		setContextID(r.Context(), *req.ContextID)
	}
	// The engine sees the client leave through client. It is r.Context()
	// except once another stream took this execution over (a re-attach):
	// then this connection's end is not the client leaving.
	client, leave := context.WithCancel(context.WithoutCancel(r.Context()))
	takenOver := false
	defer func() {
		if !takenOver {
			leave()
		}
	}()
	x, err := a.engine.Execute(client, engine.ExecRequest{
		Code:      *req.Code,
		ContextID: deref(req.ContextID),
		Language:  deref(req.Language),
		EnvVars:   env,
		Metadata:  requestMetadata(r),
		Timeout:   timeout,
	})
	if err != nil {
		a.metrics.refused(err)
		a.writeError(w, r, err)
		return
	}
	setContextID(r.Context(), x.ContextID())
	setExecutionID(r.Context(), x.ID())
	w.Header().Set(executionIDHeader, x.ID())
	takenOver = a.stream(w, r, x.Next, wantSeq(r))
}

// invalidExecute answers 422 to an /execute body the engine never sees.
func (a *api) invalidExecute(w http.ResponseWriter, msg string) {
	a.metrics.invalid()
	writeText(w, http.StatusUnprocessableEntity, msg)
}

// stream writes the outputs next returns as NDJSON, one flush per batch of
// available outputs, and a keepalive line after a.keepalive of silence.
// Headers go out at once, before the execution waits for its context
// (docs/api-contract.md §4.2). withSeq adds each output's sequence number
// ("seq"), for clients that may resume the stream (GET
// /executions/{id}/stream).
//
// It returns when the stream ended, the client left, or (takenOver true)
// another stream attached to the execution.
func (a *api) stream(w http.ResponseWriter, r *http.Request, next func(context.Context, []engine.Output) ([]engine.Output, error), withSeq bool) (takenOver bool) {
	h := w.Header()
	h.Set("Content-Type", "application/x-ndjson")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no") // tell buffering proxies to pass lines through
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	deadline := a.writeDeadline(rc)
	defer deadline.stop()
	deadline.arm()
	if err := rc.Flush(); err != nil {
		return // the client is gone; the engine sees r.Context() end
	}
	appendLine := engine.AppendLine
	if withSeq {
		appendLine = engine.AppendLineSeq
	}
	var (
		outs []engine.Output
		line []byte
		err  error
	)
	for {
		wait, cancel := context.WithTimeout(r.Context(), a.keepalive)
		outs, err = next(wait, outs[:0])
		cancel()
		line = line[:0]
		for _, o := range outs {
			line = appendLine(line, o)
		}
		switch {
		case err == nil || err == io.EOF:
		case r.Context().Err() != nil:
			return // the client left; the engine applies the disconnect policy
		case errors.Is(err, engine.ErrSlowReader):
			// Cut to release what was buffered for this client: the
			// execution goes on, to be re-attached (as after a take-over).
			line = appendLine(line, engine.Output{Type: engine.OutError, ErrName: errNameTooSlow,
				ErrValue: fmt.Sprintf("This client read slower than the kernel wrote and the host's buffer for slow clients is full (setting %s): this stream ends here; the execution goes on, re-attach with GET /executions/{id}/stream?after=<the last seq read>", EnvVar("max-buffered-bytes"))})
			line = appendLine(line, engine.Output{Type: engine.OutEndOfExecution})
			err, takenOver = io.EOF, true
		case errors.Is(err, engine.ErrDetached):
			// Another client re-attached: this stream ends here, on purpose,
			// so with an error line and end_of_execution (not numbered: they
			// are not the execution's outputs).
			line = appendLine(line, engine.Output{Type: engine.OutError, ErrName: errNameDetached,
				ErrValue: "Another client re-attached to this execution (GET /executions/{id}/stream); this stream ends here"})
			line = appendLine(line, engine.Output{Type: engine.OutEndOfExecution})
			err, takenOver = io.EOF, true
		default: // silence: a keepalive line makes a vanished client visible
			line = appendLine(line, engine.Output{Type: engine.OutKeepalive})
		}
		if len(line) > 0 {
			// A client that takes no bytes for writeTimeout is gone: the
			// write fails, the handler returns and the disconnect policy
			// applies, instead of the stream pinning its buffer for ever.
			deadline.arm()
			n, werr := w.Write(line)
			a.metrics.streamed(n)
			if werr != nil {
				return
			}
			if ferr := rc.Flush(); ferr != nil {
				return
			}
		}
		if err == io.EOF {
			return
		}
	}
}

func (a *api) listContexts(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, a.engine.Contexts())
}

type createContextRequest struct {
	Language *string `json:"language"`
	Cwd      *string `json:"cwd"`
}

func (a *api) createContext(w http.ResponseWriter, r *http.Request) {
	body, ok := a.readBody(w, r)
	if !ok {
		return
	}
	var req createContextRequest
	if len(bytes.TrimSpace(body)) > 0 {
		if err := json.Unmarshal(body, &req); err != nil {
			writeText(w, http.StatusUnprocessableEntity, "Invalid request body: "+jsonProblem(err))
			return
		}
	}
	// A cwd that is not a directory where the kernel runs (which, for a remote
	// Jupyter Server, is not this machine) is the transport's or the cwd
	// snippet's KindInvalid error: 400.
	info, err := a.engine.CreateContext(r.Context(), deref(req.Language), deref(req.Cwd))
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	setContextID(r.Context(), info.ID)
	writeJSON(w, info)
}

func (a *api) deleteContext(w http.ResponseWriter, r *http.Request) {
	a.control(w, r, a.engine.Delete)
}

func (a *api) restartContext(w http.ResponseWriter, r *http.Request) {
	a.control(w, r, a.engine.Restart)
}

func (a *api) interruptContext(w http.ResponseWriter, r *http.Request) {
	a.control(w, r, a.engine.Interrupt)
}

// control runs a bodiless operation on the context named in the path. The
// SDKs send Content-Type: application/json with an empty body: ignored.
func (a *api) control(w http.ResponseWriter, r *http.Request, op func(context.Context, string) error) {
	setContextID(r.Context(), r.PathValue("id"))
	if err := op(r.Context(), r.PathValue("id")); err != nil {
		a.writeError(w, r, err)
		return
	}
	writeJSON(w, nil)
}

// readBody reads the whole body up to the configured limit; past it the
// answer is 413, past the server's ReadTimeout 408. (net/http lifts the read
// deadline once the body is read, so it never cuts the response stream.)
func (a *api) readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, a.maxBodyBytes))
	if err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			writeText(w, http.StatusRequestTimeout, fmt.Sprintf("Request body not received in time (setting %s)", EnvVar("read-timeout")))
			return nil, false
		}
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			writeText(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("Request body too large: the limit is %d bytes (setting %s)", a.maxBodyBytes, EnvVar("max-body-bytes")))
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
	}
	return http.StatusInternalServerError
}

func (a *api) writeError(w http.ResponseWriter, r *http.Request, err error) {
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

// requestMetadata is what env-var policies see of the request: the id that
// withRequestLog gave it (the same one as in the logs and the response).
func requestMetadata(r *http.Request) map[string]string {
	return map[string]string{"request_id": requestIDOf(r.Context()), "remote_addr": r.RemoteAddr}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
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
