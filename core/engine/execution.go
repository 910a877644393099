package engine

import (
	"context"
	"io"
	"sync"
	"time"
)

// ExecRequest is one /execute request as the engine sees it.
type ExecRequest struct {
	Code      string
	ContextID string            // run in this context, or
	Language  string            // in this language's default context (empty: python)
	EnvVars   map[string]string // per-execution env vars: applied for this execution only
	Metadata  map[string]string // passed to env-var policies (request id, remote address, …)
	// Timeout bounds the execution once its code reached the kernel (0: the
	// engine's Config.ExecutionTimeout). When it passes, the stream ends with
	// an ExecutionTimeout error line and the kernel is interrupted.
	Timeout time.Duration
}

// Execution is one accepted execution. Its outputs, numbered from 1 (Output.Seq),
// are buffered inside the engine, so a slow or vanished reader never holds the
// kernel (invariant 1). They are read by the one stream attached to it: first
// the client's own (Next), which detaches when its client goes away; then any
// stream a client attaches with Attach, to resume after a cut connection. After
// the execution ends the engine keeps it, and up to Config.ReplayBytes of its
// newest outputs, for Config.ReplayTTL.
type Execution struct {
	id      string
	ctx     context.Context // the client's: cancelled when it goes away
	context *Context
	env     map[string]string
	code    string
	timeout time.Duration // 0: none

	// stopQueueWatch undoes the watch that takes the execution out of the
	// queue when its client leaves before it reached the kernel.
	stopQueueWatch func() bool
	// stopDetachWatch undoes the watch that detaches the first stream when
	// its client leaves.
	stopDetachWatch func() bool

	out      *outputLog
	firstGen uint64 // the generation of the stream Next reads

	// Owned by the context's loop, for the Observer's outcome.
	queuedAt   time.Time
	errorSent  bool // an error line was pushed
	hostEnded  bool // the host ended it (end), not the kernel
	timedOut   bool
	clientLeft bool // the client left while it ran
	finished   bool // ExecutionFinished was reported

	mu    sync.Mutex // guards state
	state ExecutionState
}

// ExecutionState is what GET /executions/{id} reports.
type ExecutionState struct {
	ID        string    `json:"id"`
	ContextID string    `json:"context_id"`
	Status    string    `json:"status"`            // "queued", "running" or "finished"
	Outcome   Outcome   `json:"outcome,omitempty"` // once finished
	CreatedAt time.Time `json:"created_at"`
	// StartedAt and FinishedAt are null until then (and StartedAt stays
	// null for an execution that never ran).
	StartedAt  *time.Time `json:"started_at"`
	FinishedAt *time.Time `json:"finished_at"`
	// FirstSeq is the oldest output still buffered (LastSeq+1 when none is);
	// LastSeq the newest output so far (0: none yet).
	FirstSeq uint64 `json:"first_seq"`
	LastSeq  uint64 `json:"last_seq"`
	Attached bool   `json:"attached"` // a stream is reading it
}

// Execution statuses.
const (
	StatusQueued   = "queued"
	StatusRunning  = "running"
	StatusFinished = "finished"
)

// ID is the execution's unique id.
func (x *Execution) ID() string { return x.id }

// ContextID is the id of the context the execution runs in.
func (x *Execution) ContextID() string { return x.context.info.ID }

// Next reads the first stream, the one of the client that made the request.
// It blocks until at least one output is available, appends every available
// output to dst and returns it. After the last output (always an
// end_of_execution line) it returns io.EOF; once its client left (or another
// stream attached) ErrDetached. It returns ctx.Err() when ctx ends first;
// nothing is lost then.
func (x *Execution) Next(ctx context.Context, dst []Output) ([]Output, error) {
	dst, err := x.out.next(ctx, x.firstGen, dst)
	if err == io.EOF {
		x.stopDetachWatch() // all read: nothing is left to trim when the client leaves
	}
	return dst, err
}

// State is a snapshot of the execution's state.
func (x *Execution) State() ExecutionState {
	x.mu.Lock()
	s := x.state
	x.mu.Unlock()
	s.FirstSeq, s.LastSeq, s.Attached = x.out.state()
	return s
}

func (x *Execution) setStatus(status string, outcome Outcome) {
	t := time.Now().UTC()
	x.mu.Lock()
	defer x.mu.Unlock()
	x.state.Status = status
	switch status {
	case StatusRunning:
		x.state.StartedAt = &t
	case StatusFinished:
		x.state.FinishedAt = &t
		x.state.Outcome = outcome
	}
}

// Stream is a reader attached to an execution with Attach.
type Stream struct {
	x   *Execution
	gen uint64
}

// Attach attaches a new stream that reads the outputs after sequence number
// after (0: from the first), those buffered and then the rest as they come.
// The stream attached before it, if any, gets ErrDetached. Errors: KindInvalid
// if after is past the last output; KindGone if
// outputs after it are no longer buffered.
func (x *Execution) Attach(after uint64) (*Stream, error) {
	gen, err := x.out.attach(after)
	if err != nil {
		return nil, err
	}
	return &Stream{x: x, gen: gen}, nil
}

// Next is like Execution.Next for this stream.
func (s *Stream) Next(ctx context.Context, dst []Output) ([]Output, error) {
	return s.x.out.next(ctx, s.gen, dst)
}

// Close detaches the stream (if still attached): the execution goes on, and
// its outputs are kept for a later Attach, within Config.ReplayBytes.
func (s *Stream) Close() { s.x.out.detach(s.gen) }

// finish records x's outcome and reports it to the observer, once.
func (x *Execution) finish(obs Observer, outcome Outcome, ran time.Duration) {
	if x.finished {
		return
	}
	x.finished = true
	x.env, x.code = nil, "" // a retained execution keeps no secrets or code
	x.setStatus(StatusFinished, outcome)
	x.context.e.retain(x)
	obs.ExecutionFinished(x.context.info.ID, outcome, ran)
}

// outcome is how x ended, once it ran.
func (x *Execution) outcome(policy DisconnectPolicy) Outcome {
	switch {
	case x.timedOut:
		return OutcomeTimeout
	case x.clientLeft && policy == DisconnectInterrupt:
		return OutcomeClientGone
	case x.hostEnded:
		return OutcomeAborted
	case x.errorSent:
		return OutcomeError
	}
	return OutcomeOK
}
