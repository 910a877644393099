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
	// InterruptWhenClientLeaves interrupts the code when ctx ends while it
	// runs, whatever Config.DisconnectPolicy says: for a client that ends
	// ctx to cancel and can never re-attach (an MCP tool call).
	InterruptWhenClientLeaves bool
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
	// interruptOnLeave: ExecRequest.InterruptWhenClientLeaves.
	interruptOnLeave bool

	// stopQueueWatch undoes the watch that takes the execution out of the
	// queue when its client leaves before it reached the kernel.
	stopQueueWatch func() bool
	// stopDetachWatch undoes the watch that detaches the first stream when
	// its client leaves.
	stopDetachWatch func() bool

	out      *outputLog
	firstGen uint64 // the generation of the stream Next reads

	// Owned by the context's loop (or, for an execution that never ran, by
	// whoever took it out of the queue).
	queuedAt  time.Time
	errorSent bool    // the stream has its one error line (docs/api-contract.md §5.2)
	outcome   Outcome // how it ends, as far as is known yet: see settle

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

// settle records something that decides how x ends. The most telling
// outcome wins, whatever the order things happened in: a timeout, then a
// client that left (under DisconnectInterrupt), then an end by the host, then
// an error from the code, then ok. Once x's stream has ended the outcome is
// fixed: it is what the stream told the client.
func (x *Execution) settle(o Outcome) {
	if outcomeRank(o) > outcomeRank(x.outcome) && !x.streamEnded() {
		x.outcome = o
	}
}

func outcomeRank(o Outcome) int {
	switch o {
	case OutcomeError:
		return 1
	case OutcomeAborted:
		return 2
	case OutcomeClientGone:
		return 3
	case OutcomeTimeout:
		return 4
	}
	return 0 // OutcomeOK
}

// pushError emits o, an error line, unless the stream already has one: each
// error line fires the SDK's onError, and docs/api-contract.md §5.2 allows one.
func (x *Execution) pushError(o Output) {
	if x.errorSent {
		return
	}
	x.errorSent = true
	x.settle(OutcomeError)
	x.out.push(o)
}

// end ends x's stream abnormally: an error line (unless the kernel already
// sent one; then the kernel's error is the outcome, not the host's end),
// then end_of_execution.
func (x *Execution) end(name, value string) {
	if !x.errorSent {
		x.settle(OutcomeAborted)
	}
	x.pushError(errorOutput(name, value, ""))
	x.endStream()
}

// endStream ends x's stream with end_of_execution, once. It is the moment x
// is finished: its state turns finished, with its outcome, and it is
// retained, before the end line is pushed, so that a client that has read the
// end finds it finished. The context may hold its slot a while longer (the
// env reset, a restart after an ignored interrupt): finish reports when it is
// done with it.
func (x *Execution) endStream() {
	if x.streamEnded() {
		return
	}
	x.code = "" // a retained execution keeps no code
	x.setStatus(StatusFinished, x.outcome)
	x.context.e.retain(x)
	x.out.push(Output{Type: OutEndOfExecution})
	x.out.close()
}

func (x *Execution) streamEnded() bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.state.Status == StatusFinished
}

// finish reports x to the observer once the context is done with it (every
// execution reaches it exactly once, on the one path that ended it). ran is
// how long x held the context, its env reset included; 0 if it never ran.
func (x *Execution) finish(obs Observer, ran time.Duration) {
	x.env = nil // a retained execution keeps no secrets
	obs.ExecutionFinished(x.context.info.ID, x.outcome, ran)
}
