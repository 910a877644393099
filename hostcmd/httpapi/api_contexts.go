package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
)

func (a *API) listContexts(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, a.engine.Contexts())
}

type createContextRequest struct {
	Language *string `json:"language"`
	Cwd      *string `json:"cwd"`
}

func (a *API) createContext(w http.ResponseWriter, r *http.Request) {
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

func (a *API) deleteContext(w http.ResponseWriter, r *http.Request) {
	a.control(w, r, a.engine.Delete)
}

func (a *API) restartContext(w http.ResponseWriter, r *http.Request) {
	a.control(w, r, a.engine.Restart)
}

// forkContext answers a new context holding a copy of the context's state
// (engine.Fork).
func (a *API) forkContext(w http.ResponseWriter, r *http.Request) {
	setContextID(r.Context(), r.PathValue("id"))
	info, err := a.engine.Fork(r.Context(), r.PathValue("id"))
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	writeJSON(w, info)
}

func (a *API) interruptContext(w http.ResponseWriter, r *http.Request) {
	a.control(w, r, a.engine.Interrupt)
}

// control runs a bodiless operation on the context named in the path. The
// SDKs send Content-Type: application/json with an empty body: ignored.
func (a *API) control(w http.ResponseWriter, r *http.Request, op func(context.Context, string) error) {
	setContextID(r.Context(), r.PathValue("id"))
	if err := op(r.Context(), r.PathValue("id")); err != nil {
		a.writeError(w, r, err)
		return
	}
	writeJSON(w, nil)
}
