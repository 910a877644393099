package engine

import "time"

// Outcome is how an execution ended, as an Observer sees it.
type Outcome string

const (
	// OutcomeOK: the code ran to the end without an error.
	OutcomeOK Outcome = "ok"
	// OutcomeError: the code raised (the kernel reported an error).
	OutcomeError Outcome = "error"
	// OutcomeTimeout: the execution timeout passed and the code was interrupted.
	OutcomeTimeout Outcome = "timeout"
	// OutcomeClientGone: the client left, before the code was sent (it never
	// ran) or while it ran under DisconnectInterrupt (it was interrupted).
	OutcomeClientGone Outcome = "client_gone"
	// OutcomeAborted: the host ended it: the context was restarted or removed,
	// the kernel died or was lost, or its env vars or cwd could not be applied.
	OutcomeAborted Outcome = "aborted"
)

// Observer is told what the engine does, for metrics. Its methods are called
// on the engine's goroutines, some with a context's lock held, so they must
// be quick and must not call back into the engine. Every execution that
// Execute accepted is reported exactly once by ExecutionFinished.
type Observer interface {
	// QueueDepth reports the number of executions waiting in a context's
	// queue (not counting the one running) each time it changes.
	QueueDepth(contextID string, depth int)
	// ExecutionStarted: an execution left the queue for the kernel after
	// waiting for the time given.
	ExecutionStarted(contextID string, waited time.Duration)
	// ExecutionFinished: an execution ended. ran is how long it held the
	// context (its env vars set and reset included); 0 if it never started.
	ExecutionFinished(contextID string, outcome Outcome, ran time.Duration)
	// ContextRemoved: the context is gone; nothing more is reported for it.
	ContextRemoved(contextID string)
	// MessagesLost: the transport announced n messages of an execution of
	// the context as lost on their way from the kernel (Message.Lost).
	MessagesLost(contextID string, n int)
	// KernelReplaced: the context's interpreter was replaced without the
	// client asking: reason is "died" (it crashed or exited; the server or
	// the engine brings a fresh one) or "gone" (the server no longer has it,
	// e.g. culled it as idle).
	KernelReplaced(contextID, reason string)
}

type nopObserver struct{}

func (nopObserver) QueueDepth(string, int)                           {}
func (nopObserver) ExecutionStarted(string, time.Duration)           {}
func (nopObserver) ExecutionFinished(string, Outcome, time.Duration) {}
func (nopObserver) ContextRemoved(string)                            {}
func (nopObserver) MessagesLost(string, int)                         {}
func (nopObserver) KernelReplaced(string, string)                    {}
