package policy

import (
	"errors"
	"fmt"
	"strings"
)

// What went wrong with a module; a *ModuleError matches one of these with
// errors.Is.
var (
	// ErrLoad: the file could not be read, compiled or instantiated, or it
	// does not implement the ABI.
	ErrLoad = errors.New("load failed")
	// ErrDeadline: the call ran past its per-call deadline and was stopped.
	ErrDeadline = errors.New("deadline exceeded")
	// ErrCanceled: the caller's context ended before the module answered.
	ErrCanceled = errors.New("canceled")
	// ErrTrap: the module trapped, exited or made an invalid host call.
	ErrTrap = errors.New("trapped")
	// ErrMemoryLimit: the module failed after reaching the memory cap.
	ErrMemoryLimit = errors.New("memory limit reached")
	// ErrBadOutput: the answer was missing, too large or not a valid v1 output.
	ErrBadOutput = errors.New("bad output")
	// ErrFailed: the module returned a non-zero status (its own failure).
	ErrFailed = errors.New("failed")
)

// ErrClosed is returned by Evaluate and Reload after Close.
var ErrClosed = errors.New("policy chain closed")

// ModuleError is every error about one module. Its message names the module
// and its file and says what happened in one line, fit for an HTTP 403 body.
type ModuleError struct {
	Module string // the module's name (its file name without .wasm)
	Path   string // the .wasm file
	Kind   error  // one of the Err* values above
	Detail string // what happened, one line
	Err    error  // the underlying error, if any
}

func (e *ModuleError) Error() string {
	return fmt.Sprintf("policy %s (%s): %v: %s", e.Module, e.Path, e.Kind, e.Detail)
}

// Unwrap lets errors.Is match both the Kind and the underlying error.
func (e *ModuleError) Unwrap() []error {
	if e.Err == nil {
		return []error{e.Kind}
	}
	return []error{e.Kind, e.Err}
}

// firstLine keeps a wazero error's first line: its wasm stack trace follows on
// the next lines and does not belong in a client's error message.
func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return s
}

// clip bounds text a module controls before it goes into an error message.
func clip(s string, n int) string {
	s = strings.ToValidUTF8(firstLine(s), "?")
	if len(s) > n {
		s = s[:n] + "..."
	}
	return s
}
