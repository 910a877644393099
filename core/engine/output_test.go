package engine

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/kernelhost/kernelhost/core"
)

func TestAppendLineFollowsTheFramingRules(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   Output
		want string
	}{
		{"stdout with non-ASCII, astral and line separators",
			Output{Type: OutStdout, Text: "€ 😀 \u2028\u0085\"\\\n\x01", Timestamp: "2025-05-01T10:00:00.123456Z"},
			`{"type":"stdout","text":"\u20ac \ud83d\ude00 \u2028\u0085\"\\\n\u0001","timestamp":"2025-05-01T10:00:00.123456Z"}`},
		{"number of executions", Output{Type: OutNumberOfExecutions, ExecutionCount: 7}, `{"type":"number_of_executions","execution_count":7}`},
		{"error", errorOutput("NameError", "name 'x' is not defined", "tb\nline"), `{"type":"error","name":"NameError","value":"name 'x' is not defined","traceback":"tb\nline"}`},
		{"end", Output{Type: OutEndOfExecution}, `{"type":"end_of_execution"}`},
		{"result keeps kernel numbers, nulls and puts unknown MIME types in extra",
			Output{Type: OutResult, IsMainResult: true, Bundle: map[string]json.RawMessage{
				"text/plain":          json.RawMessage(`"'bar'"`),
				"application/json":    json.RawMessage("{\"x\": 0.0,\n \"y\": null, \"big\": 12345678901234567890, \"s\": \"é\"}"),
				"e2b/chart":           json.RawMessage(`{"x_unit":null}`),
				"application/vnd.foo": json.RawMessage(`{"a":1}`),
			}},
			`{"type":"result","json":{"x": 0.0, "y": null, "big": 12345678901234567890, "s": "\u00e9"},"extra":{"application/vnd.foo":{"a":1}},"chart":{"x_unit":null},"text":"bar","is_main_result":true}`},
		{"raw latex has no text field", Output{Type: OutResult, Bundle: map[string]json.RawMessage{"text/latex": json.RawMessage(`"\\text{x}"`)}},
			`{"type":"result","latex":"\\text{x}","extra":{},"is_main_result":false}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := string(AppendLine(nil, tc.in))
			if !strings.HasSuffix(got, "}\n") || strings.Count(got, "\n") != 1 {
				t.Fatalf("not exactly one line: %q", got)
			}
			for _, c := range []byte(got) {
				if c >= 0x80 {
					t.Fatalf("non-ASCII byte in %q", got)
				}
			}
			if !json.Valid([]byte(got)) {
				t.Fatalf("invalid JSON: %s", got)
			}
			// Field order inside a result line follows MIME-type order; compare as JSON.
			var gotV, wantV any
			_ = json.Unmarshal([]byte(got), &gotV)
			if err := json.Unmarshal([]byte(tc.want), &wantV); err != nil {
				t.Fatal(err)
			}
			if gs, ws := mustJSON(gotV), mustJSON(wantV); gs != ws {
				t.Fatalf("got  %s\nwant %s", got, tc.want)
			}
			if tc.in.Type == OutResult && strings.Contains(tc.want, "0.0") && !strings.Contains(got, `"x": 0.0`) {
				t.Fatalf("number spelling changed: %s", got)
			}
		})
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func TestStripQuotes(t *testing.T) {
	for in, want := range map[string]string{
		`'bar'`: "bar", `"x"`: "x", `'`: "", `'a\nb'`: `a\nb`, `[1] "bar"`: `[1] "bar"`, `'a"`: `'a"`, ``: ``,
	} {
		if got := stripQuotes(in); got != want {
			t.Errorf("stripQuotes(%q) = %q, want %q", in, got, want)
		}
	}
}

// The python snippets are decoded by the fake kernel's literal parser; these
// values must come back byte for byte (invariant 7).
func TestPythonLiteralsRoundTrip(t *testing.T) {
	for _, v := range []string{"", "plain", `it's "q" \ \\`, "line\nbreak\n", "tab\tcr\r", "$(rm -rf /) `x`", "ünï 😀 \u2028 \u0085 \x7f \x01", "'; import os; '"} {
		got, err := decodePyString(pyString(v))
		if err != nil || got != v {
			t.Errorf("pyString(%q) = %s decodes to %q, %v", v, pyString(v), got, err)
		}
		if strings.ContainsAny(pyString(v), "\n\r") {
			t.Errorf("pyString(%q) spans lines", v)
		}
	}
}

func TestSnippetsEncodeNeverSplice(t *testing.T) {
	v := "a'b\"c\\d\ne$(x)😀"
	for lang, want := range map[string]string{
		"bash":       `\export K='a'\''b"c\d` + "\n" + `e$(x)😀'`,
		"javascript": `process.env["K"] = "a'b\"c\\d\ne$(x)😀";`,
		"r":          `Sys.setenv("K" = "a'b\"c\\d\ne$(x)\U{0001f600}")`,
		"java":       javaEnvBlock(`java.lang.System.setProperty("K", "a'b\"c\\d\ne$(x)😀"); if (e != null) e.put("K", "a'b\"c\\d\ne$(x)😀");`),
		"python":     `__import__('os').environ.__setitem__('K', 'a\'b"c\\d\ne$(x)😀')`,
	} {
		if got := languageSnippets[lang].setEnv("K", v); got != want {
			t.Errorf("%s:\n got  %s\n want %s", lang, got, want)
		}
	}
	if got := javaString("\x01" + "7"); got != `"\0017"` {
		t.Errorf("java control escape = %s", got)
	}
}

func TestEnvKeyValidation(t *testing.T) {
	for key, ok := range map[string]bool{"A": true, "_a1": true, "PATH_2": true, "": false, "1A": false, "A-B": false, "A B": false, "Ä": false, "a=b": false} {
		if err := validateEnvKey(key); (err == nil) != ok {
			t.Errorf("validateEnvKey(%q) = %v", key, err)
		}
	}
}

// The kernel-side cwd choice quotes every path as chdir does (checked by
// hand with python3, node, bash, Rscript and jshell on a directory named
// like v below: each entered it and printed it).
func TestChdirFirstEncodesNeverSplice(t *testing.T) {
	v := "/a'b\"c\\d\ne$(x)😀"
	for lang, want := range map[string]string{
		"python":     `(lambda o, ds: (next((o.chdir(d) for d in ds if o.path.isdir(d)), None), print(o.getcwd())))(__import__('os'), ('/x', '/a\'b"c\\d\ne$(x)😀',))`,
		"javascript": `((ds) => { for (const d of ds) { try { process.chdir(d); break; } catch (e) { } } console.log(process.cwd()); })(["/x", "/a'b\"c\\d\ne$(x)😀"]);`,
		"r":          `local({ for (d in c("/x", "/a'b\"c\\d\ne$(x)\U{0001f600}")) if (dir.exists(d) && !inherits(try(setwd(d), silent = TRUE), "try-error")) break; cat(getwd(), "\n", sep = "") })`,
		"java":       `{ for (java.lang.String d : new java.lang.String[] {"/x", "/a'b\"c\\d\ne$(x)😀"}) { if (new java.io.File(d).isDirectory()) { java.lang.System.setProperty("user.dir", d); break; } } java.lang.System.out.println(java.lang.System.getProperty("user.dir")); }`,
		"bash":       `for __kh_d in '/x' '/a'\''b"c\d` + "\n" + `e$(x)😀'; do if [[ -d $__kh_d ]] && cd -- "$__kh_d"; then break; fi; done; \unset -v __kh_d; pwd`,
	} {
		if got := languageSnippets[lang].chdirFirst([]string{"/x", v}); got != want {
			t.Errorf("%s:\n got  %s\n want %s", lang, got, want)
		}
	}
	if languageSnippets["typescript"].chdirFirst == nil {
		t.Error("typescript has no chdirFirst")
	}
}

// messageOutput is the whole translation of kernel messages into stream
// lines: one row per message type and reply status.
func TestMessageOutput(t *testing.T) {
	clock := func() string { return "NOW" }
	bundle := map[string]json.RawMessage{"text/plain": json.RawMessage(`"2"`)}
	tb := []string{"Traceback", "NameError: x"}
	for _, tc := range []struct {
		name string
		in   core.Message
		want Output
		ok   bool
	}{
		{"execute_input", core.Message{Type: core.MsgExecuteInput, ExecutionCount: 7},
			Output{Type: OutNumberOfExecutions, ExecutionCount: 7}, true},
		{"stdout keeps the kernel's clock", core.Message{Type: core.MsgStream, Name: "stdout", Text: "a\n", Timestamp: "T1"},
			Output{Type: OutStdout, Text: "a\n", Timestamp: "T1"}, true},
		{"stderr without a clock gets now", core.Message{Type: core.MsgStream, Name: "stderr", Text: "b\n"},
			Output{Type: OutStderr, Text: "b\n", Timestamp: "NOW"}, true},
		{"an unknown stream name is stdout", core.Message{Type: core.MsgStream, Name: "other", Text: "c", Timestamp: "T"},
			Output{Type: OutStdout, Text: "c", Timestamp: "T"}, true},
		{"execute_result is the main result", core.Message{Type: core.MsgExecuteResult, Data: bundle, ExecutionCount: 1},
			Output{Type: OutResult, Bundle: bundle, IsMainResult: true}, true},
		{"display_data is another result", core.Message{Type: core.MsgDisplayData, Data: bundle},
			Output{Type: OutResult, Bundle: bundle}, true},
		{"error", core.Message{Type: core.MsgError, EName: "NameError", EValue: "x", Traceback: tb},
			Output{Type: OutError, ErrName: "NameError", ErrValue: "x", Traceback: "Traceback\nNameError: x"}, true},
		{"reply error", core.Message{Type: core.MsgExecuteReply, Status: core.ReplyError, EName: "E", EValue: "v", Traceback: tb},
			Output{Type: OutError, ErrName: "E", ErrValue: "v", Traceback: "Traceback\nNameError: x"}, true},
		{"reply aborted", core.Message{Type: core.MsgExecuteReply, Status: core.ReplyAborted},
			Output{Type: OutError, ErrName: "ExecutionAborted", ErrValue: "Execution was aborted"}, true},
		{"reply abort (old kernels)", core.Message{Type: core.MsgExecuteReply, Status: "abort"},
			Output{Type: OutError, ErrName: "ExecutionAborted", ErrValue: "Execution was aborted"}, true},
		{"reply ok", core.Message{Type: core.MsgExecuteReply, Status: core.ReplyOK}, Output{}, false},
		{"status", core.Message{Type: core.MsgStatus, State: core.StateIdle}, Output{}, false},
		{"update_display_data", core.Message{Type: core.MsgUpdateDisplayData, Data: bundle}, Output{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := messageOutput(tc.in, clock)
			if ok != tc.ok || !reflect.DeepEqual(got, tc.want) {
				t.Errorf("messageOutput(%+v) = %+v, %v; want %+v, %v", tc.in, got, ok, tc.want, tc.ok)
			}
		})
	}
}
