package subprocess

import (
	"bytes"
	"encoding/json"
	"unicode/utf8"

	"github.com/kernelhost/kernelhost/core"
)

// streamPrefix starts every stream message of the python and node drivers,
// which write the fields in this order: name, parent_id, text.
var streamPrefix = []byte(`{"type":"stream","name":"`)

// parseStream decodes a line in the drivers' stream message layout without
// reflection: a burst of prints is a line each, and encoding/json would
// cost about as much as the print itself. ok is false for any other line,
// which then goes through encoding/json.
func parseStream(line []byte) (m core.Message, ok bool) {
	rest, ok := bytes.CutPrefix(line, streamPrefix)
	if !ok {
		return m, false
	}
	switch {
	case bytes.HasPrefix(rest, []byte(`stdout"`)):
		m.Name, rest = "stdout", rest[len(`stdout"`):]
	case bytes.HasPrefix(rest, []byte(`stderr"`)):
		m.Name, rest = "stderr", rest[len(`stderr"`):]
	default:
		return m, false
	}
	if rest, ok = bytes.CutPrefix(rest, []byte(`,"parent_id":`)); !ok {
		return m, false
	}
	if m.ParentID, rest, ok = jsonString(rest); !ok {
		return m, false
	}
	if rest, ok = bytes.CutPrefix(rest, []byte(`,"text":`)); !ok {
		return m, false
	}
	if m.Text, rest, ok = jsonString(rest); !ok || string(rest) != "}" {
		return m, false
	}
	m.Type = core.MsgStream
	return m, true
}

// jsonString decodes the JSON string at the start of b and returns the rest.
// It decodes the escapes print output has (\n, \t, \", \\ ...) itself
// and leaves \u escapes and invalid UTF-8 to encoding/json.
func jsonString(b []byte) (s string, rest []byte, ok bool) {
	if len(b) == 0 || b[0] != '"' {
		return "", nil, false
	}
	var out []byte // the decoded text, once an escape was seen
	high, from := false, 1
	for i := 1; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"':
			if high && !utf8.Valid(b[1:i]) {
				return viaJSON(b[:i+1], b[i+1:])
			}
			if out == nil {
				return string(b[1:i]), b[i+1:], true
			}
			return string(append(out, b[from:i]...)), b[i+1:], true
		case c == '\\':
			if i+1 >= len(b) {
				return "", nil, false
			}
			r := jsonEscapes[b[i+1]]
			if r == 0 {
				// \u: find the end of the string, then let encoding/json decode it.
				for j := i + 2; j < len(b); j++ {
					if b[j] == '\\' {
						j++
					} else if b[j] == '"' {
						return viaJSON(b[:j+1], b[j+1:])
					}
				}
				return "", nil, false
			}
			out = append(append(out, b[from:i]...), r)
			i++
			from = i + 1
		case c < 0x20:
			return "", nil, false // not valid JSON: let encoding/json report it
		case c >= 0x80:
			high = true
		}
	}
	return "", nil, false
}

// jsonEscapes maps the byte after a backslash to what it stands for, for
// every JSON escape but \u; 0 for the rest.
var jsonEscapes = [256]byte{'"': '"', '\\': '\\', '/': '/', 'b': '\b', 'f': '\f', 'n': '\n', 'r': '\r', 't': '\t'}

func viaJSON(quoted, rest []byte) (string, []byte, bool) {
	var s string
	if err := json.Unmarshal(quoted, &s); err != nil {
		return "", nil, false
	}
	return s, rest, true
}
