package core

import (
	"context"
	"fmt"
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

// Execution is one accepted execution. Its outputs are read with Next; they are
// buffered inside the engine, so a slow or vanished reader never holds the
// kernel (invariant 1): past Config.MaxOutputBytes the engine drops output and
// says so in the stream.
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

	out outputQueue

	// Owned by the context's loop, for the Observer's outcome.
	queuedAt   time.Time
	errorSent  bool // an error line was pushed
	hostEnded  bool // the host ended it (end), not the kernel
	timedOut   bool
	clientLeft bool // the client left while it ran
	finished   bool // ExecutionFinished was reported
}

// finish reports x's outcome to the observer, once.
func (x *Execution) finish(obs Observer, outcome Outcome, ran time.Duration) {
	if x.finished {
		return
	}
	x.finished = true
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

// ID is the execution's unique id.
func (x *Execution) ID() string { return x.id }

// ContextID is the id of the context the execution runs in.
func (x *Execution) ContextID() string { return x.context.info.ID }

// Next blocks until at least one output is available, appends every available
// output to dst and returns it. After the last output (always an
// end_of_execution line, unless the client left) it returns io.EOF. It returns
// ctx.Err() when ctx ends first; nothing is lost then.
func (x *Execution) Next(ctx context.Context, dst []Output) ([]Output, error) {
	return x.out.next(ctx, dst)
}

// outputQueue is the buffer between the engine (producer) and the client
// stream (consumer). The producer never blocks.
type outputQueue struct {
	mu       sync.Mutex
	items    []Output
	bytes    int
	max      int
	closed   bool
	dropped  int // outputs dropped since the reader last caught up
	droppedB int
	ready    chan struct{} // capacity 1: "something changed"
}

func newOutputQueue(max int) outputQueue {
	return outputQueue{max: max, ready: make(chan struct{}, 1)}
}

func outputSize(o Output) int {
	n := 64 + len(o.Text) + len(o.Traceback) + len(o.ErrValue)
	for k, v := range o.Bundle {
		n += len(k) + len(v)
	}
	return n
}

// push adds o. Errors and the end line are always kept; other output past the
// byte budget is counted and dropped.
func (q *outputQueue) push(o Output) {
	size := outputSize(o)
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return
	}
	essential := o.Type == OutError || o.Type == OutEndOfExecution
	if !essential && q.max > 0 && q.bytes+size > q.max {
		q.dropped++
		q.droppedB += size
		q.mu.Unlock()
		return
	}
	if q.dropped > 0 {
		q.appendDropNotice()
	}
	q.items = append(q.items, o)
	q.bytes += size
	q.mu.Unlock()
	q.signal()
}

// appendDropNotice tells the reader, in band, what was lost. Called with mu held.
func (q *outputQueue) appendDropNotice() {
	q.items = append(q.items, Output{
		Type:      OutStderr,
		Text:      fmt.Sprintf("[kernelhost] %d outputs (%d bytes) were dropped: the client read slower than the kernel wrote and the per-execution buffer was full\n", q.dropped, q.droppedB),
		Timestamp: now(),
	})
	q.dropped, q.droppedB = 0, 0
}

func (q *outputQueue) signal() {
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

// close marks the end: no more outputs; readers get io.EOF after draining.
func (q *outputQueue) close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	q.signal()
}

func (q *outputQueue) next(ctx context.Context, dst []Output) ([]Output, error) {
	for {
		q.mu.Lock()
		if len(q.items) > 0 {
			dst = append(dst, q.items...)
			clear(q.items)
			q.items = q.items[:0]
			q.bytes = 0
			q.mu.Unlock()
			return dst, nil
		}
		closed := q.closed
		q.mu.Unlock()
		if closed {
			return dst, io.EOF
		}
		select {
		case <-q.ready:
		case <-ctx.Done():
			return dst, ctx.Err()
		}
	}
}
