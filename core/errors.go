package core

import "errors"

// ErrorKind classifies the errors the engine returns before an execution starts,
// so that a front end can map them to a status code without parsing text.
type ErrorKind int

const (
	KindInternal    ErrorKind = iota // something broke on our side (HTTP 500)
	KindInvalid                      // the request itself is wrong (HTTP 400)
	KindNotFound                     // no such context (HTTP 404)
	KindQueueFull                    // the context's queue is full; try again later (HTTP 429)
	KindRejected                     // an env-var policy refused the request (HTTP 403)
	KindUnavailable                  // the engine is shutting down, or a part it needs is not back yet (HTTP 503)
	KindTooLarge                     // the request is larger than a limit (HTTP 413)
	KindGone                         // what was asked for existed but is no longer kept (HTTP 410)
	KindUnsupported                  // the transport or language cannot do what was asked (HTTP 501)
)

// Error is an engine error with a kind and a message meant for the client.
type Error struct {
	Kind ErrorKind
	Msg  string // human-readable, shown to the client verbatim
	Err  error  // the cause, if any
}

func (e *Error) Error() string { return e.Msg }
func (e *Error) Unwrap() error { return e.Err }

// KindOf returns the kind of err, KindInternal for errors that are not *Error.
func KindOf(err error) ErrorKind {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	return KindInternal
}
