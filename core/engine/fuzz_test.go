package engine

import (
	"encoding/json"
	"strings"
	"testing"
)

// FuzzAppendLine: whatever a kernel sends, every line is one line of
// ASCII-only, valid JSON with a type, and text survives the trip exactly
// (the framing rules of docs/api-contract.md §5.1).
func FuzzAppendLine(f *testing.F) {
	f.Add("hello\n", `{"x": 0.0, "y": null}`, "NameError")
	f.Add("€ 😀 \u2028\u0085 \x00 \xff", `[1, "é", {"a": [null]}]`, "'quoted'")
	f.Add("", "not json", "")
	f.Fuzz(func(t *testing.T, text, rawJSON, name string) {
		outs := []Output{
			{Type: OutStdout, Text: text, Timestamp: "t"},
			{Type: OutResult, Bundle: map[string]json.RawMessage{"application/json": json.RawMessage(rawJSON), "text/plain": mustMarshal(text), "x/custom": json.RawMessage(rawJSON)}},
			errorOutput(name, text, text),
		}
		for _, o := range outs {
			line := AppendLine(nil, o)
			if !strings.HasSuffix(string(line), "\n") || strings.Count(string(line), "\n") != 1 {
				t.Fatalf("not one line: %q", line)
			}
			for _, c := range line {
				if c >= 0x80 {
					t.Fatalf("non-ASCII byte in %q", line)
				}
			}
			var v map[string]json.RawMessage
			if err := json.Unmarshal(line, &v); err != nil {
				t.Fatalf("invalid JSON %q: %v", line, err)
			}
			if string(v["type"]) != `"`+string(o.Type)+`"` {
				t.Fatalf("type: %s", v["type"])
			}
			if o.Type == OutStdout {
				var got string
				_ = json.Unmarshal(v["text"], &got)
				var want string // invalid UTF-8 becomes U+FFFD per byte, as encoding/json does
				_ = json.Unmarshal(mustMarshal(text), &want)
				if got != want {
					t.Fatalf("text %q came back as %q", want, got)
				}
			}
			if o.Type == OutResult && json.Valid([]byte(rawJSON)) {
				var want, got any
				_ = json.Unmarshal([]byte(rawJSON), &want)
				_ = json.Unmarshal(v["json"], &got)
				if mustJSON(want) != mustJSON(got) {
					t.Fatalf("json value %s came back as %s", rawJSON, v["json"])
				}
			}
		}
	})
}

func mustMarshal(s string) json.RawMessage {
	b, _ := json.Marshal(s)
	return b
}

// FuzzPythonLiteral: every valid value encodes to one line that decodes back
// exactly (the fake kernel's decoder follows Python's rules for the escapes
// pyString writes).
func FuzzPythonLiteral(f *testing.F) {
	for _, v := range []string{"", "it's", "a\\b\nc", "😀\u2028", "\x7f\x01"} {
		f.Add(v)
	}
	f.Fuzz(func(t *testing.T, v string) {
		if ValidateEnvValue("K", v) != nil {
			return
		}
		lit := pyString(v)
		if strings.ContainsAny(lit, "\n\r") {
			t.Fatalf("pyString(%q) spans lines: %s", v, lit)
		}
		got, err := decodePyString(lit)
		if err != nil || got != v {
			t.Fatalf("pyString(%q) = %s decodes to %q, %v", v, lit, got, err)
		}
	})
}
