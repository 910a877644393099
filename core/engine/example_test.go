package engine_test

import (
	"encoding/json"
	"fmt"

	"github.com/kernelhost/kernelhost/core/engine"
)

// AppendLine writes one output as the contract's NDJSON line: ASCII only,
// MIME values passed through as the kernel sent them, and the text/plain
// quotes of a string result stripped.
func ExampleAppendLine() {
	lines := []engine.Output{
		{Type: engine.OutStdout, Text: "naïve café ✓\n", Timestamp: "2026-01-01T00:00:00Z"},
		{Type: engine.OutResult, IsMainResult: true, Bundle: map[string]json.RawMessage{
			"text/plain":       json.RawMessage(`"'a string'"`),
			"application/json": json.RawMessage(`{"x": 0.0, "y": null}`),
		}},
		{Type: engine.OutError, ErrName: "ZeroDivisionError", ErrValue: "division by zero"},
	}
	var b []byte
	for _, o := range lines {
		b = engine.AppendLine(b, o)
	}
	fmt.Print(string(b))
	// Output:
	// {"type":"stdout","text":"na\u00efve caf\u00e9 \u2713\n","timestamp":"2026-01-01T00:00:00Z"}
	// {"type":"result","json":{"x": 0.0, "y": null},"text":"a string","extra":{},"is_main_result":true}
	// {"type":"error","name":"ZeroDivisionError","value":"division by zero","traceback":""}
}
