package server_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/kernelhost/kernelhost/core/engine"
	"github.com/kernelhost/kernelhost/hostcmd/internal/hosttest"
	"github.com/kernelhost/kernelhost/hostcmd/settings"
)

var updateGolden = flag.Bool("update", false, "rewrite testdata/ndjson/*.ndjson from this run")

// goldenCases are fixed executions whose NDJSON streams are kept in
// testdata/ndjson/NAME.ndjson: each case runs its requests in a fresh context
// of its language, so execution counts start at 1, and its golden file holds
// the streams one after another.
var goldenCases = []struct {
	name     string
	language string
	requests []map[string]any
}{
	{"python-stdout", "python", []map[string]any{
		{"code": "import sys\nprint('hello')\nprint('w\\u00f6rld \\u2713 \\U0001f600')\nprint('to stderr', file=sys.stderr)"},
	}},
	{"python-result", "python", []map[string]any{
		{"code": "x = 41"},
		{"code": "x + 1"},
		{"code": "'quotes are stripped'"},
		{"code": "{'list': [1, 2.0, None], 'text': 'caf\\u00e9'}"},
	}},
	{"python-display", "python", []map[string]any{
		// A display_data and a main result, their MIME bundles flattened into
		// fields; the JSON value keeps the kernel's spelling (0.0, null).
		{"code": "class Point:\n    def __repr__(self): return 'Point(0.0, 1)'\n    def _repr_html_(self): return '<b>Point</b>'\n    def _repr_json_(self): return {'x': 0.0, 'y': 1, 'tag': None}\n\ndisplay(Point())\nPoint()"},
	}},
	{"python-error", "python", []map[string]any{
		{"code": "print('before')\n1 / 0\nprint('never')"},
		{"code": "undefined_name"},
	}},
	{"python-env", "python", []map[string]any{
		{"code": "import os\nprint(repr(os.environ['GREETING']))", "env_vars": map[string]string{"GREETING": "h\u00e9llo 'quoted' \"double\"\n"}},
		{"code": "import os\nprint(os.environ.get('GREETING'))"},
	}},
	{"javascript", "javascript", []map[string]any{
		{"code": "console.log('hi from node'); 6 * 7"},
		{"code": "throw new TypeError('bad thing')"},
	}},
	{"bash", "bash", []map[string]any{
		// fd 1 and fd 2 are two pipes, read by two goroutines: their
		// relative order is not kept, so each request writes to one.
		{"code": "echo out; echo 'more out'"},
		{"code": "echo err >&2"},
	}},
}

// TestNDJSONGolden runs goldenCases through a host on the subprocess
// transport, linked in and through its plugin (one golden file serves both:
// the boundary must not change a byte), and compares the normalised streams
// (normaliseStream) with the golden files. After an intended change to the
// stream, rewrite them with
//
//	go test ./hostcmd/server/ -run TestNDJSONGolden -update
//
// and review the diff: it is the change a client sees.
func TestNDJSONGolden(t *testing.T) {
	t.Parallel()
	hosttest.EachTransport(t, func(t *testing.T, start func(...func(*settings.Config)) *hosttest.Host) {
		testNDJSONGolden(t, start())
	})
}

func testNDJSONGolden(t *testing.T, h *hosttest.Host) {
	for _, tc := range goldenCases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := h.CreateContext(`{"language":"` + tc.language + `"}`)
			var got []byte
			for _, req := range tc.requests {
				// A copy: goldenCases is shared by the linked-in and the
				// plugin host's subtests, which run at once.
				req = maps.Clone(req)
				req["context_id"] = ctx.ID
				body, err := json.Marshal(req)
				if err != nil {
					t.Fatal(err)
				}
				status, text := h.Do("POST", "/execute", string(body))
				if status != 200 {
					t.Fatalf("POST /execute %s: %d %s", body, status, text)
				}
				hosttest.ParseStream(t, []byte(text)) // the framing rules hold before normalising
				got = append(got, normaliseStream(t, []byte(text))...)
			}
			path := filepath.Join("testdata", "ndjson", tc.name+".ndjson")
			if *updateGolden {
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (go test ./hostcmd/server/ -run TestNDJSONGolden -update writes it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("stream differs from %s (-update rewrites it; review the diff)\ngot:\n%s\nwant:\n%s", path, got, want)
			}
		})
	}
}

var (
	timestampField = regexp.MustCompile(`"timestamp":"[^"]*"`)
	tracebackField = regexp.MustCompile(`"traceback":"(?:[^"\\]|\\.)+"`)
)

// normaliseStream makes a stream comparable from run to run and machine to
// machine, and leaves every other byte as the host wrote it:
//   - timestamps become "<timestamp>";
//   - a non-empty traceback becomes "<traceback>" (its text depends on the
//     interpreter's version);
//   - keepalive lines are dropped (they come only after 5 s of silence);
//   - consecutive stdout (or stderr) lines are merged into one, encoded by
//     engine.AppendLine as the host encodes lines: how an interpreter's writes
//     are split into stream messages depends on timing.
func normaliseStream(t *testing.T, raw []byte) []byte {
	t.Helper()
	var out []byte
	var pending *engine.Output // stream text being merged
	flush := func() {
		if pending != nil {
			out = engine.AppendLine(out, *pending)
			pending = nil
		}
	}
	for _, l := range bytes.SplitAfter(raw, []byte("\n")) {
		if len(l) == 0 {
			continue
		}
		var head struct {
			Type string `json:"type"`
			Text string `json:"text"`
		}
		if err := json.Unmarshal(l, &head); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		switch typ := engine.OutputType(head.Type); typ {
		case engine.OutKeepalive:
			continue
		case engine.OutStdout, engine.OutStderr:
			if pending != nil && pending.Type == typ {
				pending.Text += head.Text
				continue
			}
			flush()
			pending = &engine.Output{Type: typ, Text: head.Text, Timestamp: "<timestamp>"}
			continue
		}
		flush()
		l = timestampField.ReplaceAll(l, []byte(`"timestamp":"<timestamp>"`))
		l = tracebackField.ReplaceAll(l, []byte(`"traceback":"<traceback>"`))
		out = append(out, l...)
	}
	flush()
	return out
}
