// Package mcptest checks kernelhost's MCP tools through a real MCP client
// (the Go SDK's) on any transport: the /mcp tests of hostcmd/server
// (streamable HTTP) and the `kernelhost mcp` tests of hostcmd (stdio) run
// the same checks.
package mcptest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// callTool runs one tool and fails the test on a protocol error.
func callTool(t testing.TB, s *mcp.ClientSession, tool string, args map[string]any) *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("%s %v: %v", tool, args, err)
	}
	return res
}

// Texts joins the result's text content.
func Texts(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text + "\n")
		}
	}
	return b.String()
}

// structured decodes the result's structured content.
func structured(t testing.TB, res *mcp.CallToolResult) map[string]any {
	t.Helper()
	raw, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("structured content %s: %v", raw, err)
	}
	return m
}

// Run is run_code that must succeed; it returns the result.
func Run(t testing.TB, s *mcp.ClientSession, args map[string]any) *mcp.CallToolResult {
	t.Helper()
	res := callTool(t, s, "run_code", args)
	if res.IsError {
		t.Fatalf("run_code %v: isError: %s", args, Texts(res))
	}
	return res
}

// NewClient is a Go SDK client whose progress notifications' messages go
// to the returned channel (dropped when it is full).
func NewClient() (*mcp.Client, <-chan string) {
	progress := make(chan string, 100)
	c := mcp.NewClient(&mcp.Implementation{Name: "kernelhost-test", Version: "1"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			select {
			case progress <- req.Params.Message:
			default:
			}
		},
	})
	return c, progress
}

// Tools checks every tool on a session of a NewClient whose host runs
// python with matplotlib (Debian's), node, bash and R. The subtests run in
// this order on one session: later ones rely on the default context that
// earlier ones used (it must go on after an error, a clipped output...).
func Tools(t *testing.T, s *mcp.ClientSession, progress <-chan string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	t.Run("list tools", func(t *testing.T) { checkToolList(t, ctx, s) })
	t.Run("python prints and returns", func(t *testing.T) { checkPythonPrintsAndReturns(t, s) })
	t.Run("python state across calls", func(t *testing.T) { checkPythonStateAcrossCalls(t, s) })
	t.Run("python chart", func(t *testing.T) { checkPythonChart(t, s) })
	t.Run("python raises", func(t *testing.T) { checkPythonRaises(t, s) })
	t.Run("other languages", func(t *testing.T) { checkOtherLanguages(t, s) })
	t.Run("env vars kept to one call", func(t *testing.T) { checkEnvVarsKeptToOneCall(t, s) })
	t.Run("contexts", func(t *testing.T) { checkContexts(t, s) })
	t.Run("bad input is a tool error", func(t *testing.T) { checkBadInput(t, s) })
	t.Run("megabytes of output are clipped", func(t *testing.T) { checkOutputClipped(t, s) })
	t.Run("progress", func(t *testing.T) { checkProgress(t, ctx, s, progress) })
	t.Run("cancellation interrupts", func(t *testing.T) { checkCancel(t, s, progress) })
}

// checkToolList checks that the session lists exactly the six tools, each
// with a description and an input schema: a client picks tools by those.
func checkToolList(t *testing.T, ctx context.Context, s *mcp.ClientSession) {
	list, err := s.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range list.Tools {
		names = append(names, tool.Name)
		if tool.Description == "" || tool.InputSchema == nil {
			t.Errorf("tool %s has no description or input schema", tool.Name)
		}
	}
	slices.Sort(names)
	if want := []string{"create_context", "delete_context", "fork_context", "list_contexts", "restart_context", "run_code"}; !slices.Equal(names, want) {
		t.Fatalf("tools %v, want %v", names, want)
	}
}

// checkPythonPrintsAndReturns checks that stdout and the main result reach
// both the structured content and the text content, which is all some clients
// read.
func checkPythonPrintsAndReturns(t *testing.T, s *mcp.ClientSession) {
	res := Run(t, s, map[string]any{"code": "print('hello from mcp')\n6*7"})
	out := structured(t, res)
	if out["stdout"] != "hello from mcp\n" {
		t.Errorf("stdout %q", out["stdout"])
	}
	results, _ := out["results"].([]any)
	if len(results) != 1 || results[0].(map[string]any)["text"] != "42" || results[0].(map[string]any)["is_main_result"] != true {
		t.Errorf("results %v, want the main result 42", results)
	}
	if txt := Texts(res); !strings.Contains(txt, "hello from mcp") || !strings.Contains(txt, "Result:\n42") {
		t.Errorf("text content %q", txt)
	}
}

// checkPythonStateAcrossCalls checks that the default context keeps its
// variables from one call to the next.
func checkPythonStateAcrossCalls(t *testing.T, s *mcp.ClientSession) {
	Run(t, s, map[string]any{"code": "kept = 'across calls'"})
	res := Run(t, s, map[string]any{"code": "kept", "language": "python"})
	if !strings.Contains(Texts(res), "across calls") {
		t.Fatalf("state lost: %s", Texts(res))
	}
}

// checkPythonChart checks that a matplotlib figure comes back as PNG image
// content and as a structured chart.
func checkPythonChart(t *testing.T, s *mcp.ClientSession) {
	res := Run(t, s, map[string]any{"code": "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [4, 1, 9])\nplt.title('mcp chart')\nplt.show()"})
	var png []byte
	for _, c := range res.Content {
		if img, ok := c.(*mcp.ImageContent); ok && img.MIMEType == "image/png" {
			png = img.Data
		}
	}
	if !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) {
		t.Fatalf("no PNG image content: %v", res.Content)
	}
	results, _ := structured(t, res)["results"].([]any)
	if len(results) != 1 {
		t.Fatalf("results %v", results)
	}
	chart, _ := results[0].(map[string]any)["chart"].(map[string]any)
	if chart["title"] != "mcp chart" || chart["type"] != "line" {
		t.Fatalf("structured chart %v", chart)
	}
}

// checkPythonRaises checks that an exception is a tool error (isError) with
// its name and traceback, and that the context goes on after it.
func checkPythonRaises(t *testing.T, s *mcp.ClientSession) {
	res := callTool(t, s, "run_code", map[string]any{"code": "def f():\n    return 1 / 0\nf()"})
	if !res.IsError {
		t.Fatalf("isError not set: %s", Texts(res))
	}
	e, _ := structured(t, res)["error"].(map[string]any)
	if e["name"] != "ZeroDivisionError" || !strings.Contains(e["traceback"].(string), "f()") {
		t.Fatalf("error %v", e)
	}
	if txt := Texts(res); !strings.Contains(txt, "ZeroDivisionError") {
		t.Fatalf("text content %q", txt)
	}
	Run(t, s, map[string]any{"code": "1"}) // the context goes on
}

// checkOtherLanguages runs one cell in each of the other languages the host
// runs.
func checkOtherLanguages(t *testing.T, s *mcp.ClientSession) {
	for lang, c := range map[string]struct{ code, want string }{
		"javascript": {"const v = [1, 2, 3].map(x => x * 2); console.log(v.join(','))", "2,4,6"},
		"bash":       {"echo from-bash-$((6*7))", "from-bash-42"},
		"r":          {"cat(sum(1:10), '\\n')", "55"},
	} {
		t.Run(lang, func(t *testing.T) {
			res := Run(t, s, map[string]any{"code": c.code, "language": lang})
			if !strings.Contains(Texts(res), c.want) {
				t.Fatalf("%s: %s", lang, Texts(res))
			}
		})
	}
}

// checkEnvVarsKeptToOneCall checks that env_vars reach the call they are
// given to and no later one.
func checkEnvVarsKeptToOneCall(t *testing.T, s *mcp.ClientSession) {
	res := Run(t, s, map[string]any{"code": "import os\nprint(os.environ.get('MCP_SECRET'))", "env_vars": map[string]any{"MCP_SECRET": "s3cret"}})
	if structured(t, res)["stdout"] != "s3cret\n" {
		t.Fatalf("env var not set: %s", Texts(res))
	}
	res = Run(t, s, map[string]any{"code": "import os\nprint(os.environ.get('MCP_SECRET'))"})
	if structured(t, res)["stdout"] != "None\n" {
		t.Fatalf("env var outlived its call: %s", Texts(res))
	}
}

// checkContexts drives a created context through its life: isolated state,
// listed, forked (where the host can), restarted, deleted.
func checkContexts(t *testing.T, s *mcp.ClientSession) {
	created := structured(t, callTool(t, s, "create_context", map[string]any{"language": "python"}))
	id, _ := created["id"].(string)
	if id == "" || created["language"] != "python" {
		t.Fatalf("create_context: %v", created)
	}
	Run(t, s, map[string]any{"code": "mine = 1", "context_id": id})
	if res := callTool(t, s, "run_code", map[string]any{"code": "mine"}); !res.IsError {
		t.Fatalf("a created context's state reached the default one: %s", Texts(res))
	}
	list := structured(t, callTool(t, s, "list_contexts", nil))
	if !strings.Contains(mustJSON(list), id) {
		t.Fatalf("list_contexts lacks %s: %v", id, list)
	}
	// A fork copies the state, where the host can fork (not while
	// sandboxed: then the error says so).
	if res := callTool(t, s, "fork_context", map[string]any{"context_id": id}); res.IsError {
		if !strings.Contains(Texts(res), "sandbox") && !strings.Contains(Texts(res), "cannot fork") {
			t.Fatalf("fork_context failed without saying why: %s", Texts(res))
		}
	} else {
		fork, _ := structured(t, res)["id"].(string)
		if got := structured(t, Run(t, s, map[string]any{"code": "print(mine)", "context_id": fork}))["stdout"]; got != "1\n" {
			t.Fatalf("the fork's copy of mine: %v", got)
		}
		callTool(t, s, "delete_context", map[string]any{"context_id": fork})
	}
	if res := callTool(t, s, "restart_context", map[string]any{"context_id": id}); res.IsError {
		t.Fatal(Texts(res))
	}
	if res := callTool(t, s, "run_code", map[string]any{"code": "mine", "context_id": id}); !res.IsError {
		t.Fatalf("state survived a restart: %s", Texts(res))
	}
	if res := callTool(t, s, "delete_context", map[string]any{"context_id": id}); res.IsError {
		t.Fatal(Texts(res))
	}
	if res := callTool(t, s, "run_code", map[string]any{"code": "1", "context_id": id}); !res.IsError || !strings.Contains(Texts(res), "not found") {
		t.Fatalf("a deleted context ran code: %s", Texts(res))
	}
}

// checkBadInput checks that an unknown language is a tool error that names
// it, not a protocol error.
func checkBadInput(t *testing.T, s *mcp.ClientSession) {
	res := callTool(t, s, "run_code", map[string]any{"code": "1", "language": "cobol"})
	if !res.IsError || !strings.Contains(Texts(res), "cobol") {
		t.Fatalf("want an error naming the language: %s", Texts(res))
	}
}

// checkOutputClipped checks that megabytes of stdout come back as their head
// and tail with a note between, small enough for a model's context.
func checkOutputClipped(t *testing.T, s *mcp.ClientSession) {
	res := Run(t, s, map[string]any{"code": "print('first line')\nfor i in range(100000):\n    print('x' * 50)\nprint('last line')"})
	out, _ := structured(t, res)["stdout"].(string)
	if len(out) > 300<<10 || !strings.HasPrefix(out, "first line\n") || !strings.HasSuffix(out, "last line\n") || !strings.Contains(out, "bytes of stdout left out here") {
		t.Fatalf("stdout of %d bytes, want the head, a note and the tail within 300 KiB: %.200q", len(out), out)
	}
	Run(t, s, map[string]any{"code": "1"})
}

// checkProgress checks that output is streamed as progress notifications
// while the call runs.
func checkProgress(t *testing.T, ctx context.Context, s *mcp.ClientSession, progress <-chan string) {
	params := &mcp.CallToolParams{Name: "run_code", Arguments: map[string]any{"code": "for i in range(3):\n    print('line', i, flush=True)"}}
	params.SetProgressToken("progress-test")
	if _, err := s.CallTool(ctx, params); err != nil {
		t.Fatal(err)
	}
	// An output chunk is one notification; the kernel may send the
	// three lines as one chunk or several.
	var got string
	timeout := time.After(time.Minute)
	for got != "line 0\nline 1\nline 2\n" {
		select {
		case msg := <-progress:
			got += msg
		case <-timeout:
			t.Fatalf("progress messages %q, want the three lines", got)
		}
	}
}

// waitProgress returns the next progress message, skipping others until
// want (bounded).
func waitProgress(t testing.TB, progress <-chan string, want string) string {
	t.Helper()
	timeout := time.After(time.Minute)
	for {
		select {
		case msg := <-progress:
			if msg == want {
				return msg
			}
		case <-timeout:
			t.Fatalf("no progress notification %q", want)
		}
	}
}

// StartSpinning starts `while True: pass` in the python default context
// and returns once it runs (its progress line arrived), with the call's
// cancel and its outcome.
func StartSpinning(t testing.TB, s *mcp.ClientSession, progress <-chan string) (context.CancelFunc, <-chan error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		params := &mcp.CallToolParams{Name: "run_code", Arguments: map[string]any{"code": "print('spinning', flush=True)\nwhile True: pass"}}
		params.SetProgressToken("spin")
		_, err := s.CallTool(ctx, params)
		done <- err
	}()
	waitProgress(t, progress, "spinning\n")
	return cancel, done
}

// checkCancel cancels a call of `while True: pass` once it runs and checks that
// the next call on the same context works and sees the state from before.
func checkCancel(t testing.TB, s *mcp.ClientSession, progress <-chan string) {
	t.Helper()
	Run(t, s, map[string]any{"code": "before_cancel = 'kept'"})
	cancel, done := StartSpinning(t, s, progress)
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled call: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the cancelled call did not return")
	}
	res := Run(t, s, map[string]any{"code": "before_cancel"})
	if !strings.Contains(Texts(res), "kept") {
		t.Fatalf("after the cancellation: %s", Texts(res))
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
