package engine

import (
	"encoding/json"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/kernelhost/kernelhost/core"
)

// OutputType is the `type` of one line of an /execute stream.
type OutputType string

const (
	OutNumberOfExecutions OutputType = "number_of_executions"
	OutStdout             OutputType = "stdout"
	OutStderr             OutputType = "stderr"
	OutResult             OutputType = "result"
	OutError              OutputType = "error"
	OutKeepalive          OutputType = "keepalive"
	OutEndOfExecution     OutputType = "end_of_execution"
	// outUnexpectedEnd is part of the wire enum but never written: the SDKs
	// would ignore it and report success. Abnormal ends are an error line
	// followed by end_of_execution.
	outUnexpectedEnd OutputType = "unexpected_end_of_execution"
)

// Output is one event of an execution's stream, one NDJSON line on the wire.
type Output struct {
	Type OutputType
	// Seq numbers an execution's outputs from 1 without gaps (keepalive
	// lines, which are not part of it, have 0). The SDKs' stream has no seq
	// field; AppendLineSeq writes it for clients that resume streams.
	Seq uint64

	ExecutionCount int    // number_of_executions
	Text           string // stdout, stderr
	Timestamp      string // stdout, stderr: ISO-8601

	// result
	Bundle       map[string]json.RawMessage // the kernel's MIME bundle, raw
	IsMainResult bool

	// error
	ErrName, ErrValue, Traceback string
}

// Error names the engine uses for abnormal ends (the table of docs/api-contract.md §5.4).
const (
	errNameRestarting    = "ContextRestarting"
	errNameAborted       = "ExecutionAborted"
	errNameConnection    = "WebSocketError"
	errNameUnexpectedEnd = "UnexpectedEndOfExecution"
	errNameKernelDied    = "KernelDied"
	errNameEnvVars       = "EnvVarsError"
	errNameContextSetup  = "ContextSetupError"
	errNameTimeout       = "ExecutionTimeout"
	errNameCancelled     = "ExecutionCancelled"
)

// errorOutput builds an error line.
func errorOutput(name, value, traceback string) Output {
	return Output{Type: OutError, ErrName: name, ErrValue: value, Traceback: traceback}
}

// messageOutput translates one kernel message of an execution into the line
// its stream gets for it, if any:
//
//	execute_input                      → number_of_executions
//	stream                             → stdout, or stderr for Name "stderr"
//	execute_result, display_data       → result (main for execute_result)
//	error                              → error
//	execute_reply with status error    → error
//	execute_reply with status aborted  → error ExecutionAborted
//
// and nothing for the others (status, update_display_data, an ok reply). A
// stream line keeps the kernel's timestamp, else gets now(). A stream holds
// one error line at most: the caller drops those after the first.
func messageOutput(m core.Message, now func() string) (Output, bool) {
	switch m.Type {
	case core.MsgExecuteInput:
		return Output{Type: OutNumberOfExecutions, ExecutionCount: m.ExecutionCount}, true
	case core.MsgStream:
		t := OutStdout
		if m.Name == "stderr" {
			t = OutStderr
		}
		ts := m.Timestamp
		if ts == "" {
			ts = now()
		}
		return Output{Type: t, Text: m.Text, Timestamp: ts}, true
	case core.MsgExecuteResult, core.MsgDisplayData:
		return Output{Type: OutResult, Bundle: m.Data, IsMainResult: m.Type == core.MsgExecuteResult}, true
	case core.MsgError:
		return errorOutput(m.EName, m.EValue, strings.Join(m.Traceback, "\n")), true
	case core.MsgExecuteReply:
		switch m.Status {
		case core.ReplyError:
			return errorOutput(m.EName, m.EValue, strings.Join(m.Traceback, "\n")), true
		case core.ReplyAborted, "abort":
			return errorOutput(errNameAborted, "Execution was aborted", ""), true
		}
	}
	return Output{}, false
}

// mimeFields maps MIME types to the result line's top-level fields. Every other
// MIME type goes into "extra".
var mimeFields = map[string]string{
	"text/plain":             "text",
	"text/html":              "html",
	"text/markdown":          "markdown",
	"image/svg+xml":          "svg",
	"image/png":              "png",
	"image/jpeg":             "jpeg",
	"application/pdf":        "pdf",
	"text/latex":             "latex",
	"application/json":       "json",
	"application/javascript": "javascript",
	"e2b/data":               "data",
	"e2b/chart":              "chart",
}

// AppendLine appends o as one NDJSON line, newline included, to dst.
//
// The line follows the framing rules of docs/api-contract.md §5.1: ASCII-only JSON (every
// non-ASCII code point escaped as \uXXXX, surrogate pairs above U+FFFF), raw
// kernel values (numbers, nulls) passed through unchanged, absent fields
// omitted, and no blank lines.
func AppendLine(dst []byte, o Output) []byte {
	return appendLine(dst, o, false)
}

// AppendLineSeq is AppendLine with o.Seq as a "seq" field after "type" (none
// on lines with Seq 0). It is for clients that asked for sequence numbers:
// the JS SDK would show an unknown field of a result line in result.extra.
func AppendLineSeq(dst []byte, o Output) []byte {
	return appendLine(dst, o, true)
}

func appendLine(dst []byte, o Output, withSeq bool) []byte {
	dst = append(dst, `{"type":`...)
	dst = appendString(dst, string(o.Type))
	if withSeq && o.Seq != 0 {
		dst = append(dst, `,"seq":`...)
		dst = strconv.AppendUint(dst, o.Seq, 10)
	}
	switch o.Type {
	case OutNumberOfExecutions:
		dst = append(dst, `,"execution_count":`...)
		dst = strconv.AppendInt(dst, int64(o.ExecutionCount), 10)
	case OutStdout, OutStderr:
		dst = append(dst, `,"text":`...)
		dst = appendString(dst, o.Text)
		dst = append(dst, `,"timestamp":`...)
		dst = appendString(dst, o.Timestamp)
	case OutResult:
		dst = appendResult(dst, o)
	case OutError:
		dst = append(dst, `,"name":`...)
		dst = appendString(dst, o.ErrName)
		dst = append(dst, `,"value":`...)
		dst = appendString(dst, o.ErrValue)
		dst = append(dst, `,"traceback":`...)
		dst = appendString(dst, o.Traceback)
	}
	return append(dst, "}\n"...)
}

func appendResult(dst []byte, o Output) []byte {
	// Sorted keys keep lines reproducible (golden files, tests).
	var extra []string
	for _, mime := range sortedKeys(o.Bundle) {
		raw := o.Bundle[mime]
		field, known := mimeFields[mime]
		if !known {
			extra = append(extra, mime)
			continue
		}
		dst = append(dst, ',')
		dst = appendString(dst, field)
		dst = append(dst, ':')
		if mime == "text/plain" {
			dst = appendString(dst, stripQuotes(rawString(raw)))
			continue
		}
		dst = appendRawASCII(dst, raw)
	}
	dst = append(dst, `,"extra":{`...)
	for i, mime := range extra {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendString(dst, mime)
		dst = append(dst, ':')
		dst = appendRawASCII(dst, o.Bundle[mime])
	}
	dst = append(dst, `},"is_main_result":`...)
	return strconv.AppendBool(dst, o.IsMainResult)
}

// rawString decodes a raw JSON string; a value of any other kind is kept as its
// JSON text so nothing is lost.
func rawString(raw json.RawMessage) string {
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return string(raw)
	}
	return s
}

// stripQuotes drops the first and last character of a text/plain value that
// starts and ends with the same quote (docs/api-contract.md §5.3).
func stripQuotes(s string) string {
	if len(s) > 0 && (s[0] == '\'' || s[0] == '"') && s[len(s)-1] == s[0] {
		if len(s) == 1 {
			return ""
		}
		return s[1 : len(s)-1]
	}
	return s
}

const hexDigits = "0123456789abcdef"

// appendString appends s as an ASCII-only JSON string literal.
func appendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c < utf8.RuneSelf && c != '"' && c != '\\' {
			i++
			continue
		}
		dst = append(dst, s[start:i]...)
		if c < utf8.RuneSelf {
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = appendU(dst, rune(c))
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		dst = appendEscapedRune(dst, r) // invalid bytes become U+FFFD, as encoding/json does
		i += size
		start = i
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

func appendEscapedRune(dst []byte, r rune) []byte {
	if r > 0xFFFF {
		r -= 0x10000
		dst = appendU(dst, 0xD800+(r>>10))
		return appendU(dst, 0xDC00+(r&0x3FF))
	}
	return appendU(dst, r)
}

func appendU(dst []byte, r rune) []byte {
	return append(dst, '\\', 'u', hexDigits[r>>12&0xF], hexDigits[r>>8&0xF], hexDigits[r>>4&0xF], hexDigits[r&0xF])
}

// appendRawASCII appends a raw JSON value with every non-ASCII code point
// escaped. In valid JSON non-ASCII can only stand inside strings, so escaping
// it wherever it occurs keeps the value identical. Invalid raw JSON (which a
// kernel should never send) is passed as a JSON string so the line stays valid.
func appendRawASCII(dst []byte, raw json.RawMessage) []byte {
	if len(raw) == 0 {
		return append(dst, "null"...)
	}
	if !json.Valid(raw) {
		return appendString(dst, string(raw))
	}
	for i := 0; i < len(raw); {
		c := raw[i]
		switch {
		case c == '\n' || c == '\r':
			// whitespace between tokens: drop it so a value never splits a line
			i++
		case c < utf8.RuneSelf:
			dst = append(dst, c)
			i++
		default:
			r, size := utf8.DecodeRune(raw[i:])
			dst = appendEscapedRune(dst, r)
			i += size
		}
	}
	return dst
}

// now is the time a stream line gets when the kernel sent none.
func now() string { return time.Now().UTC().Format("2006-01-02T15:04:05.000000Z07:00") }
