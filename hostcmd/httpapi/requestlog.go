package httpapi

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/kernelhost/kernelhost/core"
)

// requestIDHeader carries a request's id, in from the client (when it is a
// sane token) and always back out.
const requestIDHeader = "X-Request-Id"

// maxRequestIDLen bounds an id taken from a client: it lands on every log
// line of the request.
const maxRequestIDLen = 128

// requestIDs are the ids of the request being served. The request's
// context.Context carries a pointer to them, so that the ids learnt while
// serving it (its context, its execution) reach every later log line that is
// given that context. Guarded: whoever logs with the request's context may
// do it from another goroutine (the engine keeps it as the execution's).
type requestIDs struct {
	request string // set once, before the pointer is shared

	mu                 sync.Mutex
	context, execution string
}

type requestIDsKey struct{}

func idsOf(ctx context.Context) *requestIDs {
	ids, _ := ctx.Value(requestIDsKey{}).(*requestIDs)
	return ids
}

// setContextID records the context a request works on, for its log lines.
func setContextID(ctx context.Context, id string) {
	if ids := idsOf(ctx); ids != nil {
		ids.mu.Lock()
		ids.context = core.Clip(id)
		ids.mu.Unlock()
	}
}

// setExecutionID records the execution a request started, for its log lines.
func setExecutionID(ctx context.Context, id string) {
	if ids := idsOf(ctx); ids != nil {
		ids.mu.Lock()
		ids.execution = id
		ids.mu.Unlock()
	}
}

// requestIDOf is the id of the request served with ctx, "" outside one.
func requestIDOf(ctx context.Context) string {
	if ids := idsOf(ctx); ids != nil {
		return ids.request
	}
	return ""
}

// saneRequestID accepts an incoming id of 1 to 128 printable ASCII
// characters without spaces (what tracing systems send); anything else
// (control characters, non-ASCII, megabytes) is replaced by a generated id.
// The log handlers quote what needs quoting.
func saneRequestID(id string) bool {
	if id == "" || len(id) > maxRequestIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c <= ' ' || c > '~' {
			return false
		}
	}
	return true
}

// WithRequestLog gives every request an id (the client's X-Request-Id when
// sane, else a new UUID), echoes it in the response, puts it in the
// request's context for the log lines written while serving it, and logs
// one line per request once it is served.
func WithRequestLog(log *slog.Logger, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		began := time.Now()
		id := r.Header.Get(requestIDHeader)
		if !saneRequestID(id) {
			id = uuid.NewString()
		}
		w.Header().Set(requestIDHeader, id)
		ctx := context.WithValue(r.Context(), requestIDsKey{}, &requestIDs{request: id})
		sw := &statusWriter{ResponseWriter: w}
		next.ServeHTTP(sw, r.WithContext(ctx))
		// Debug: a line per request (and per stream) is too much at info for
		// a host that serves executions all day; failures have their own line.
		log.DebugContext(ctx, "request served", "method", r.Method, "path", core.Clip(r.URL.Path),
			"status", sw.status(), "duration", time.Since(began).Round(time.Microsecond))
	})
}

// statusWriter remembers the status a handler answered, for the request's
// log line. Unwrap lets http.ResponseController reach the connection's
// Flush, which /execute streams need.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Flush flushes the writer below: connect-go (the sandbox API's streams)
// asks for an http.Flusher itself rather than through Unwrap.
func (w *statusWriter) Flush() { _ = http.NewResponseController(w.ResponseWriter).Flush() }

func (w *statusWriter) status() int {
	if w.code == 0 {
		return http.StatusOK
	}
	return w.code
}

// RequestIDHandler adds request_id, context_id and execution_id, as far as
// they are known, to every record logged with a request's context (the
// slog ...Context methods). Records logged without one pass unchanged. An
// id the logger or the record already carries (the engine's context loggers
// carry context_id) is not added twice.
type RequestIDHandler struct {
	slog.Handler
	hasContextID, hasExecutionID bool // added by WithAttrs
}

func (h RequestIDHandler) Handle(ctx context.Context, r slog.Record) error {
	if ids := idsOf(ctx); ids != nil {
		ids.mu.Lock()
		contextID, executionID := ids.context, ids.execution
		ids.mu.Unlock()
		if h.hasContextID || hasAttr(r, "context_id") {
			contextID = ""
		}
		if h.hasExecutionID || hasAttr(r, "execution_id") {
			executionID = ""
		}
		r = r.Clone()
		r.AddAttrs(slog.String("request_id", ids.request))
		if contextID != "" {
			r.AddAttrs(slog.String("context_id", contextID))
		}
		if executionID != "" {
			r.AddAttrs(slog.String("execution_id", executionID))
		}
	}
	return h.Handler.Handle(ctx, r)
}

func (h RequestIDHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	out := RequestIDHandler{Handler: h.Handler.WithAttrs(attrs), hasContextID: h.hasContextID, hasExecutionID: h.hasExecutionID}
	for _, a := range attrs {
		out.hasContextID = out.hasContextID || a.Key == "context_id"
		out.hasExecutionID = out.hasExecutionID || a.Key == "execution_id"
	}
	return out
}

// WithGroup: ids added under a group would read group.request_id; the ones
// added later keep that, which is what slog does for every attribute.
func (h RequestIDHandler) WithGroup(name string) slog.Handler {
	return RequestIDHandler{Handler: h.Handler.WithGroup(name), hasContextID: h.hasContextID, hasExecutionID: h.hasExecutionID}
}

func hasAttr(r slog.Record, key string) bool {
	found := false
	r.Attrs(func(a slog.Attr) bool {
		found = a.Key == key
		return !found
	})
	return found
}
