package httpapi

import (
	"fmt"
	"net/http"
	"strconv"

	"github.com/kernelhost/kernelhost/core"
)

// Resumable streams: every execution has an id (the X-Execution-Id header of
// its /execute response) and numbered outputs. A client whose connection was
// cut re-attaches with GET /executions/{id}/stream?after=SEQ and gets every
// output after SEQ, then the rest live; GET /executions/{id} tells its state.
// docs/operating.md has the details.

const (
	executionIDHeader = "X-Execution-Id"
	// errNameDetached ends a stream that another client took over.
	errNameDetached = "StreamDetached"
	// errNameTooSlow ends a stream cut for reading too slowly (the host's
	// buffer for slow clients, -max-buffered-bytes, was full).
	errNameTooSlow = "StreamTooSlow"
)

// wantSeq reports whether the client asked /execute for sequence numbers
// (?seq=true). They are off by default: the JS SDK would show an unknown field
// of a result line in result.extra. A client can also count the lines that
// are not keepalives: the n-th is output n.
func wantSeq(r *http.Request) bool {
	v, _ := strconv.ParseBool(r.URL.Query().Get("seq"))
	return v
}

func (a *API) executionState(w http.ResponseWriter, r *http.Request) {
	x, err := a.engine.Execution(r.PathValue("id"))
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	writeJSON(w, x.State())
}

// resumeExecution attaches a new stream to an execution, from the output
// after ?after= (default 0: from the first). The stream attached before, if
// any, ends with a StreamDetached error line.
func (a *API) resumeExecution(w http.ResponseWriter, r *http.Request) {
	var after uint64
	if v := r.URL.Query().Get("after"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			// 422 like every request the API refuses for its shape.
			writeText(w, http.StatusUnprocessableEntity, fmt.Sprintf("Invalid after=%s: want the sequence number of the last output received (0 or more)", core.Quote(v)))
			return
		}
		after = n
	}
	x, err := a.engine.Execution(r.PathValue("id"))
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	s, err := x.Attach(after)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	defer s.Close()
	w.Header().Set(executionIDHeader, x.ID())
	a.stream(w, r, s.Next, true)
}
