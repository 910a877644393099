package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"sync"
	"time"

	"github.com/kernelhost/kernelhost/core"
	"github.com/kernelhost/kernelhost/core/engine"
	"github.com/kernelhost/kernelhost/hostcmd/settings"
)

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

func (a *API) writeDeadline(rc *http.ResponseController) *writeGuard {
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

// MaxTimeoutSeconds is the largest "timeout" an /execute body may give:
// it keeps a timeout inside time.Duration (about 292 years).
const MaxTimeoutSeconds = float64(math.MaxInt64/int64(time.Second)) - 1

// minTimeoutSeconds is the shortest timeout taken: a smaller positive one
// (1e-12) would round to a zero Duration, which means "none", the opposite
// of what was asked; and no execution finishes in less anyway.
const minTimeoutSeconds = 0.001

func (a *API) execute(w http.ResponseWriter, r *http.Request) {
	req, ok := a.parseExecute(w, r)
	if !ok {
		return
	}
	if req.ContextID != "" {
		setContextID(r.Context(), req.ContextID)
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
	x, err := a.engine.Execute(client, req)
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

// parseExecute reads and checks an /execute request; when it is not one it
// answers (415, 413, 422) and ok is false.
func (a *API) parseExecute(w http.ResponseWriter, r *http.Request) (_ engine.ExecRequest, ok bool) {
	if !requireJSON(w, r) {
		a.metrics.invalid()
		return engine.ExecRequest{}, false
	}
	body, ok := a.readBody(w, r)
	if !ok {
		a.metrics.invalid()
		return engine.ExecRequest{}, false
	}
	req, problem := decodeExecute(body)
	if problem != "" {
		a.invalidExecute(w, "Invalid request body: "+problem)
		return engine.ExecRequest{}, false
	}
	req.Metadata = requestMetadata(r)
	return req, true
}

// decodeExecute decodes an /execute body; problem says what is wrong with
// it ("" if nothing).
func decodeExecute(body []byte) (_ engine.ExecRequest, problem string) {
	var req executeRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return engine.ExecRequest{}, jsonProblem(err)
	}
	if req.Code == nil {
		return engine.ExecRequest{}, `"code" is required and must be a string`
	}
	env := make(map[string]string, len(req.EnvVars))
	for k, v := range req.EnvVars {
		if v == nil {
			return engine.ExecRequest{}, fmt.Sprintf("env_vars[%s] must be a string", core.Quote(k))
		}
		env[k] = *v
	}
	var timeout time.Duration
	if req.Timeout != nil {
		if t := *req.Timeout; t != 0 && (t < minTimeoutSeconds || t > MaxTimeoutSeconds) {
			return engine.ExecRequest{}, fmt.Sprintf(`"timeout" must be 0 (the host's) or a number of seconds from %g to %.0f`, minTimeoutSeconds, MaxTimeoutSeconds)
		}
		timeout = time.Duration(*req.Timeout * float64(time.Second))
	}
	return engine.ExecRequest{
		Code:      *req.Code,
		ContextID: deref(req.ContextID),
		Language:  deref(req.Language),
		EnvVars:   env,
		Timeout:   timeout,
	}, ""
}

// invalidExecute answers 422 to an /execute body the engine never sees.
func (a *API) invalidExecute(w http.ResponseWriter, msg string) {
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
func (a *API) stream(w http.ResponseWriter, r *http.Request, next func(context.Context, []engine.Output) ([]engine.Output, error), withSeq bool) (takenOver bool) {
	rc, deadline, ok := a.openStream(w)
	defer deadline.stop()
	if !ok {
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
		end  bool
	)
	for {
		wait, cancel := context.WithTimeout(r.Context(), a.keepalive)
		outs, err = next(wait, outs[:0])
		cancel()
		line = line[:0]
		for _, o := range outs {
			line = appendLine(line, o)
		}
		if err != nil && err != io.EOF && r.Context().Err() != nil {
			return // the client left; the engine applies the disconnect policy
		}
		line, end, takenOver = streamTail(line, err, appendLine)
		last := end || len(outs) > 0 && outs[len(outs)-1].Type == engine.OutEndOfExecution
		if !a.writeLines(w, rc, deadline, line, !last) || end {
			return takenOver
		}
	}
}

// openStream sends the headers of an NDJSON stream at once; ok is false if
// the client is gone.
func (a *API) openStream(w http.ResponseWriter) (_ *http.ResponseController, _ *writeGuard, ok bool) {
	h := w.Header()
	h.Set("Content-Type", "application/x-ndjson")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no") // tell buffering proxies to pass lines through
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	deadline := a.writeDeadline(rc)
	deadline.arm()
	return rc, deadline, rc.Flush() == nil
}

// streamTail adds to line what err, next's error, calls for: nothing (more
// to come), the end (io.EOF), the lines that end a stream cut short (the
// client was too slow, or another one re-attached: takenOver, the execution
// goes on), or a keepalive line after silence.
func streamTail(line []byte, err error, appendLine func([]byte, engine.Output) []byte) (_ []byte, end, takenOver bool) {
	switch {
	case err == nil:
		return line, false, false
	case err == io.EOF:
		return line, true, false
	case errors.Is(err, engine.ErrSlowReader):
		// Cut to release what was buffered for this client: the execution
		// goes on, to be re-attached (as after a take-over).
		line = appendLine(line, engine.Output{Type: engine.OutError, ErrName: errNameTooSlow,
			ErrValue: fmt.Sprintf("This client read slower than the kernel wrote and the host's buffer for slow clients is full (setting %s): this stream ends here; the execution goes on, re-attach with GET /executions/{id}/stream?after=<the last seq read>", settings.EnvVar("max-buffered-bytes"))})
		return appendLine(line, engine.Output{Type: engine.OutEndOfExecution}), true, true
	case errors.Is(err, engine.ErrDetached):
		// Another client re-attached: this stream ends here, on purpose, so
		// with an error line and end_of_execution (not numbered: they are
		// not the execution's outputs).
		line = appendLine(line, engine.Output{Type: engine.OutError, ErrName: errNameDetached,
			ErrValue: "Another client re-attached to this execution (GET /executions/{id}/stream); this stream ends here"})
		return appendLine(line, engine.Output{Type: engine.OutEndOfExecution}), true, true
	default: // silence: a keepalive line makes a vanished client visible
		return appendLine(line, engine.Output{Type: engine.OutKeepalive}), false, false
	}
}

// writeLines writes line, if any, and flushes it if flush; false if the
// client is gone. A client that takes no bytes for writeTimeout is gone: the
// write fails, the handler returns and the disconnect policy applies,
// instead of the stream pinning its buffer for ever.
//
// The stream's last lines are not flushed here: net/http sends them with
// the response's end (the terminating chunk) in one write as the handler
// returns, where a flush would send them alone and the end in a second
// write, which the client waits for too (one write and one wake-up of the
// client fewer per execution).
func (a *API) writeLines(w http.ResponseWriter, rc *http.ResponseController, deadline *writeGuard, line []byte, flush bool) bool {
	if len(line) == 0 {
		return true
	}
	deadline.arm()
	n, err := w.Write(line)
	a.metrics.streamed(n)
	return err == nil && (!flush || rc.Flush() == nil)
}

// requestMetadata is what env-var policies see of the request: the id that
// WithRequestLog gave it (the same one as in the logs and the response).
func requestMetadata(r *http.Request) map[string]string {
	return map[string]string{"request_id": requestIDOf(r.Context()), "remote_addr": r.RemoteAddr}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
