package jupyter_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kernelhost/kernelhost/core/engine"
	"github.com/kernelhost/kernelhost/hostcmd/internal/hosttest"
	"github.com/kernelhost/kernelhost/hostcmd/settings"
	"github.com/kernelhost/kernelhost/transports/jupyter/jupytertest"
	"github.com/kernelhost/kernelhost/transports/transporttest"
)

// The host end to end on the Jupyter transport: every test below runs as a
// subtest of TestJupyterHost against one real Jupyter Server (jupytertest:
// loopback, token auth, IOPub rate limits off), with the transport linked in
// and, where it says so, through the kernelhost-transport-jupyter plugin.

func TestJupyterHost(t *testing.T) {
	t.Parallel()
	srv := jupytertest.Shared(t)
	modes := []struct {
		name string
		set  func(*settings.Config)
	}{{"in-process", hosttest.JupyterInProcess(t, srv)}, {"plugin", hosttest.JupyterViaPlugin(srv)}}
	for _, tc := range []struct {
		name    string
		test    func(t *testing.T, start func(...func(*settings.Config)) *hosttest.Host)
		viaBoth bool // also through the plugin (each plugin start costs a process and a kernel)
	}{
		{"Basics", testJupyterBasics, true},
		{"MIMEBundles", testJupyterMIME, false},
		{"EnvVars", testJupyterEnvVars, true},
		{"Cwd", testJupyterCwd, false},
		{"ContextsLifecycle", testJupyterLifecycle, false},
		{"Interrupt", testJupyterInterrupt, false},
		{"DisconnectInterrupts", testJupyterDisconnectInterrupts, true},
		{"DisconnectContinues", testJupyterDisconnectContinues, false},
		{"OverlapNeverLeaks", testJupyterOverlap, false},
		{"TooLarge", testJupyterTooLarge, true},
		{"ForkUnsupported", testJupyterForkUnsupported, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, m := range modes {
				if m.name == "plugin" && !tc.viaBoth {
					continue
				}
				t.Run(m.name, func(t *testing.T) {
					tc.test(t, func(configure ...func(*settings.Config)) *hosttest.Host {
						t.Helper()
						return hosttest.Start(t, append([]func(*settings.Config){m.set}, configure...)...)
					})
				})
			}
		})
	}
	// Through the plugin only, as `make run-jupyter` runs.
	t.Run("Concurrent8x50", func(t *testing.T) {
		testJupyterConcurrent8x50(t, hosttest.Start(t, hosttest.JupyterViaPlugin(srv)))
	})
}

// testJupyterForkUnsupported: the jupyter transport cannot fork a kernel,
// linked in or through its plugin (which has no core.Forker to ask): 501
// naming it, and the context runs on.
func testJupyterForkUnsupported(t *testing.T, start func(...func(*settings.Config)) *hosttest.Host) {
	h := start()
	hosttest.NoError(t, h.Run(map[string]any{"code": "x = 41"}))
	id := h.DefaultID("python")
	if status, text := h.Do("POST", "/contexts/"+id+"/fork", ""); status != http.StatusNotImplemented || !strings.Contains(text, "jupyter transport cannot fork") {
		t.Fatalf("fork: %d %s, want 501 saying the jupyter transport cannot fork", status, text)
	}
	if got := hosttest.MainResult(t, h.Run(map[string]any{"code": "x + 1"})); got != "42" {
		t.Fatalf("x + 1 = %q after the refused fork, want 42", got)
	}
}

// testJupyterBasics: defaults, state across executions, the order of stdout,
// stderr and the result, and an error that leaves the context working.
func testJupyterBasics(t *testing.T, start func(...func(*settings.Config)) *hosttest.Host) {
	h := start()
	if ctxs := h.Contexts(); len(ctxs) != 1 || ctxs[0].Language != "python" || ctxs[0].Cwd != h.Cwd() {
		t.Fatalf("contexts %+v, want one python default in %s (the server has no javascript kernel)", ctxs, h.Cwd())
	}
	hosttest.NoError(t, h.Run(map[string]any{"code": "x = 41"}))
	lines := h.Run(map[string]any{"code": "x + 1"})
	if got := hosttest.MainResult(t, lines); got != "42" {
		t.Fatalf("x + 1 = %q, want 42", got)
	}
	if first := lines[0]; first.Type() != "number_of_executions" {
		t.Fatalf("first line %v, want number_of_executions", first)
	}

	lines = h.Run(map[string]any{"code": "import sys\nprint('a', flush=True)\nprint('b', flush=True)\nprint('c', file=sys.stderr, flush=True)\n1+1"})
	var kinds []string
	for _, l := range lines {
		if k := l.Type(); len(kinds) == 0 || kinds[len(kinds)-1] != k {
			kinds = append(kinds, k)
		}
	}
	if got, want := strings.Join(kinds, " "), "number_of_executions stdout stderr result end_of_execution"; got != want {
		t.Fatalf("line kinds %q, want %q", got, want)
	}
	if got := hosttest.Stdout(lines); got != "a\nb\n" {
		t.Fatalf("stdout %q", got)
	}

	lines = h.Run(map[string]any{"code": "print('before')\nxyz"})
	e := hosttest.OnlyError(t, lines)
	if e.Str("name") != "NameError" || e.Str("value") != "name 'xyz' is not defined" || e.Str("traceback") == "" {
		t.Fatalf("error line %v", e)
	}
	if hosttest.Stdout(lines) != "before\n" {
		t.Fatalf("stdout before the error %q", hosttest.Stdout(lines))
	}
	if got := hosttest.MainResult(t, h.Run(map[string]any{"code": "x"})); got != "41" {
		t.Fatalf("after an error: x = %q, want 41", got)
	}
}

// testJupyterTooLarge: code larger than the Jupyter server's websocket
// message limit (10 MiB) but within the host's body limit (16 MiB) ends in a
// CodeTooLarge error, in-process and through the plugin alike (the kind must
// cross the plugin boundary), and the context keeps working.
func testJupyterTooLarge(t *testing.T, start func(...func(*settings.Config)) *hosttest.Host) {
	h := start()
	lines := h.Run(map[string]any{"code": "x = '" + strings.Repeat("a", 11<<20) + "'"})
	e := hosttest.OnlyError(t, lines)
	if e.Str("name") != "CodeTooLarge" || !strings.Contains(e.Str("value"), "accepts websocket messages of at most") {
		t.Fatalf("error line %v, want CodeTooLarge with the transport's message", e)
	}
	if got := hosttest.MainResult(t, h.Run(map[string]any{"code": "1 + 1"})); got != "2" {
		t.Fatalf("after the refused request: 1 + 1 = %q", got)
	}
}

// onePixelPNG is a 1×1 PNG.
const onePixelPNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="

// testJupyterMIME: display_data and the main result carry their MIME bundles
// to the result lines: HTML, and PNG from matplotlib when the kernel's Python
// has it, else from IPython.display.Image.
func testJupyterMIME(t *testing.T, start func(...func(*settings.Config)) *hosttest.Host) {
	h := start()
	code := fmt.Sprintf(`import base64
from IPython.display import HTML, Image, display
display(HTML('<b>shown</b>'))
try:
    import io, matplotlib
    matplotlib.use('agg')
    import matplotlib.pyplot as plt
    fig = plt.figure(figsize=(1, 1))
    plt.plot([0, 1], [1, 0])
    buf = io.BytesIO()
    fig.savefig(buf, format='png')
    display(Image(data=buf.getvalue(), format='png'))
except ImportError:
    display(Image(data=base64.b64decode(%q), format='png'))
HTML('<i>main</i>')`, onePixelPNG)
	lines := h.Run(map[string]any{"code": code})
	hosttest.NoError(t, lines)
	results := hosttest.OfType(lines, "result")
	if len(results) != 3 {
		t.Fatalf("want 3 result lines (HTML, PNG, main HTML), got %d: %v", len(results), results)
	}
	if r := results[0]; r.Str("html") != "<b>shown</b>" || r["is_main_result"] == true {
		t.Errorf("displayed HTML: %v", r)
	}
	png, err := base64.StdEncoding.DecodeString(results[1].Str("png"))
	if err != nil || !strings.HasPrefix(string(png), "\x89PNG\r\n\x1a\n") {
		t.Errorf("displayed image: png field is not a base64 PNG (%v): %v", err, results[1])
	}
	if r := results[2]; r.Str("html") != "<i>main</i>" || r["is_main_result"] != true || !strings.Contains(r.Str("text"), "HTML object") {
		t.Errorf("main result: %v", r)
	}
}

// testJupyterEnvVars: every transporttest.EnvValues value reaches the kernel's
// os.environ exactly, and is gone (the global value back) afterwards.
func testJupyterEnvVars(t *testing.T, start func(...func(*settings.Config)) *hosttest.Host) {
	h := start(func(c *settings.Config) { c.GlobalEnv = map[string]string{"KH_TEST_0": "global 'value'\n"} })
	env := map[string]string{}
	for i, v := range transporttest.EnvValues() {
		env[fmt.Sprintf("KH_TEST_%d", i)] = v
	}
	code := "import os, json\nprint(json.dumps({k: os.environ[k] for k in os.environ if k.startswith('KH_TEST_')}))"
	got := func(lines []hosttest.Line) map[string]string {
		t.Helper()
		hosttest.NoError(t, lines)
		var m map[string]string
		if err := json.Unmarshal([]byte(hosttest.Stdout(lines)), &m); err != nil {
			t.Fatalf("decode %q: %v", hosttest.Stdout(lines), err)
		}
		return m
	}
	during := got(h.Run(map[string]any{"code": code, "env_vars": env}))
	if len(during) != len(env) {
		t.Errorf("the kernel saw %d KH_TEST_ vars, want %d: %q", len(during), len(env), during)
	}
	for k, v := range env {
		if during[k] != v {
			t.Errorf("%s = %q, want %q", k, during[k], v)
		}
	}
	if after := got(h.Run(map[string]any{"code": code})); len(after) != 1 || after["KH_TEST_0"] != "global 'value'\n" {
		t.Fatalf("after the execution: %q, want only the global KH_TEST_0", after)
	}
}

// testJupyterCwd: a context's cwd (quotes, $(…), non-ASCII) is where its code
// runs; a missing cwd is a 400 that names it and leaves no context.
func testJupyterCwd(t *testing.T, start func(...func(*settings.Config)) *hosttest.Host) {
	h := start()
	dir := filepath.Join(t.TempDir(), `it's a "dir" $(x) ü 中文`)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	hosttest.CheckCwd(t, h, dir)
}

// testJupyterLifecycle: create, list, restart (state gone, listing kept),
// delete (404 everywhere), and the other context is unaffected.
func testJupyterLifecycle(t *testing.T, start func(...func(*settings.Config)) *hosttest.Host) {
	h := start()
	defaults := h.Contexts()
	a, b := h.CreateContext(`{}`), h.CreateContext(`{"language":"python"}`)
	listed := h.Contexts()
	if len(listed) != len(defaults)+2 || listed[len(listed)-2] != a || listed[len(listed)-1] != b {
		t.Fatalf("listing %+v, want the defaults then %+v, %+v", listed, a, b)
	}
	hosttest.NoError(t, h.Run(map[string]any{"code": "x = 1", "context_id": a.ID}))
	hosttest.NoError(t, h.Run(map[string]any{"code": "y = 2", "context_id": b.ID}))
	if status, body := h.Do("POST", "/contexts/"+a.ID+"/restart", ""); status != 200 || body != "null" {
		t.Fatalf("restart: %d %q", status, body)
	}
	if e := hosttest.OnlyError(t, h.Run(map[string]any{"code": "x", "context_id": a.ID})); e.Str("value") != "name 'x' is not defined" {
		t.Fatalf("after restart: %v", e)
	}
	if after := h.Contexts(); fmt.Sprint(after) != fmt.Sprint(listed) {
		t.Fatalf("restart changed the listing: %+v, was %+v", after, listed)
	}
	if status, body := h.Do("DELETE", "/contexts/"+a.ID, ""); status != 200 || body != "null" {
		t.Fatalf("delete: %d %q", status, body)
	}
	h.RequireContextGone(a.ID)
	if got := hosttest.MainResult(t, h.Run(map[string]any{"code": "y", "context_id": b.ID})); got != "2" {
		t.Fatalf("the other context after a delete: y = %q", got)
	}
}

// testJupyterInterrupt: POST /interrupt ends running code with
// KeyboardInterrupt at once, and the context keeps its state.
func testJupyterInterrupt(t *testing.T, start func(...func(*settings.Config)) *hosttest.Host) {
	h := start()
	id := h.DefaultID("python")
	hosttest.NoError(t, h.Run(map[string]any{"code": "kept = 7"}))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := h.Start(ctx, map[string]any{"code": "import time\nprint('sleeping', flush=True)\ntime.sleep(60)"})
	s.Until("stdout")
	began := time.Now()
	if status, body := h.Do("POST", "/contexts/"+id+"/interrupt", ""); status != 200 || body != "null" {
		t.Fatalf("interrupt: %d %q", status, body)
	}
	rest := s.Rest()
	// The cell sleeps 60 s: ending within 15 s is ending by the interrupt,
	// with room for a loaded machine.
	if took := time.Since(began); took > 15*time.Second {
		t.Fatalf("the interrupted execution ended %s after the interrupt", took)
	}
	if e := hosttest.OnlyError(t, rest); e.Str("name") != "KeyboardInterrupt" {
		t.Fatalf("error %v, want KeyboardInterrupt", e)
	}
	if got := hosttest.MainResult(t, h.Run(map[string]any{"code": "kept"})); got != "7" {
		t.Fatalf("after the interrupt: kept = %q", got)
	}
}

// disconnectAfter starts code on the default context as an SDK client does
// and drops the connection after d (the scenario of the upstream bug: a
// client that times out and goes away). It returns when it disconnected.
func disconnectAfter(t *testing.T, h *hosttest.Host, code string, d time.Duration) time.Time {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s := h.Start(ctx, map[string]any{"code": code})
	if l := s.Next(); l.Type() != "number_of_executions" {
		cancel()
		t.Fatalf("first line %v, want number_of_executions (the code runs)", l)
	}
	<-time.After(d) // the client's own timeout: the scenario, not a wait for an event
	cancel()
	return time.Now()
}

// runHello runs print('hello') on the default context and returns its lines
// and when it completed. The request's deadline is within: a request that
// hangs fails the test ("read stream: context deadline exceeded") instead of
// hanging it.
func runHello(t *testing.T, h *hosttest.Host, within time.Duration) (lines []hosttest.Line, done time.Time) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	lines = h.Start(ctx, map[string]any{"code": "print('hello')"}).Rest()
	return lines, time.Now()
}

// The upstream bug, end to end, with the default interrupt policy: the next
// request on the context completes soon after the disconnect. The cell
// sleeps 60 s, so a context held by it would free only then; freed, the next
// request runs after the interrupt, or after the restart the engine falls
// back to when ipykernel swallows the interrupt (the interrupt grace, 5 s,
// and a kernel start, several seconds on a loaded machine). 30 s tells the
// two apart with room on both sides.
func testJupyterDisconnectInterrupts(t *testing.T, start func(...func(*settings.Config)) *hosttest.Host) {
	h := start()
	gone := disconnectAfter(t, h, "import time; time.sleep(60)", time.Second)
	lines, done := runHello(t, h, 45*time.Second)
	if took := done.Sub(gone); took > 30*time.Second {
		t.Fatalf("print('hello') completed %s after the disconnect, want well under the cell's 60 s", took)
	}
	hosttest.NoError(t, lines)
	if got := hosttest.Stdout(lines); got != "hello\n" {
		t.Fatalf("stdout %q, want hello", got)
	}
}

// With the continue policy the abandoned code runs to its end, and the next
// request completes right after it: not before, and never hanging.
func testJupyterDisconnectContinues(t *testing.T, start func(...func(*settings.Config)) *hosttest.Host) {
	h := start(func(c *settings.Config) { c.DisconnectPolicy = engine.DisconnectContinue })
	const sleep = 5 * time.Second
	sent := time.Now()
	gone := disconnectAfter(t, h, "import time; time.sleep(5)", time.Second)
	lines, done := runHello(t, h, sleep+10*time.Second)
	hosttest.NoError(t, lines)
	if got := hosttest.Stdout(lines); got != "hello\n" {
		t.Fatalf("stdout %q, want hello", got)
	}
	if done.Before(sent.Add(sleep)) {
		t.Fatalf("print('hello') completed %s after the request, before the 5 s sleep could end: the code was stopped", done.Sub(sent))
	}
	if late := done.Sub(sent.Add(sleep)); late > 3*time.Second {
		t.Fatalf("print('hello') completed %s after the sleep ended", late)
	}
	t.Logf("disconnected after %s; hello completed %s after the request", gone.Sub(sent), done.Sub(sent))
}

// testJupyterOverlap: request A (env var SECRET) runs while request B (no env
// vars) is queued on the same context, 50 times; in every other round A ends
// with an error. B never sees SECRET and A's error never aborts B.
func testJupyterOverlap(t *testing.T, start func(...func(*settings.Config)) *hosttest.Host) {
	h := start()
	id := h.DefaultID("python")
	flag := filepath.Join(t.TempDir(), "go-on")
	const rounds = 50
	for i := range rounds {
		secret := fmt.Sprintf("s3cret-%d 'x' \"y\"", i)
		failing := i%2 == 1
		// A holds the kernel until B is queued behind it: the test creates
		// the flag file only after B's request was accepted.
		codeA := fmt.Sprintf("import os, time\nprint(os.environ['SECRET'] == %q, flush=True)\nwhile not os.path.exists(%q):\n    time.sleep(0.002)\nos.remove(%q)", secret, flag, flag)
		if failing {
			codeA += "\nraise ValueError('A fails')"
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		a := h.Start(ctx, map[string]any{"code": codeA, "context_id": id, "env_vars": map[string]string{"SECRET": secret}})
		if got := a.StdoutLine(); got != "True\n" {
			cancel()
			t.Fatalf("round %d: A did not see its SECRET: %q", i, got)
		}
		b := h.Start(ctx, map[string]any{"code": "import os\nprint(os.environ.get('SECRET', '<unset>'))", "context_id": id})
		if err := os.WriteFile(flag, nil, 0o600); err != nil {
			cancel()
			t.Fatal(err)
		}
		restA, restB := a.Rest(), b.Rest()
		cancel()
		if errs := hosttest.OfType(restA, "error"); failing != (len(errs) == 1) || len(errs) > 1 || failing && errs[0].Str("name") != "ValueError" {
			t.Fatalf("round %d: A's errors %v, want a ValueError: %v", i, errs, failing)
		}
		hosttest.NoError(t, restB)
		if got := hosttest.Stdout(restB); got != "<unset>\n" {
			t.Fatalf("round %d: B saw SECRET = %q", i, got)
		}
	}
}

// Kernel messages lost on the way (the kernel's IOPub queue overflowed) are
// announced on the execution's stderr and counted in /metrics, through the
// plugin as a host runs it.
func TestJupyterLostMessagesAnnouncedAndCounted(t *testing.T) {
	t.Parallel()
	srv := jupytertest.Start(t)
	if err := srv.UseOverflowingPython(); err != nil {
		t.Fatal(err)
	}
	h := hosttest.Start(t, hosttest.JupyterViaPlugin(srv))
	lines := h.Run(map[string]any{"code": "from IPython.display import display\nfor i in range(3000):\n    display(i)"})
	results := 0
	var notice string
	for _, l := range lines {
		switch l.Type() {
		case "result":
			results++
		case "stderr":
			notice += l.Str("text")
		}
	}
	// The kernel may also overflow while the host sets it up: that loss is
	// announced first (the setup's stderr reaches the first execution), the
	// execution's own last. The metric counts executions' losses.
	const announce = "kernelhost: messages of this execution were lost"
	at := strings.LastIndex(notice, announce)
	var lost int
	if at < 0 || !strings.HasPrefix(notice, announce) {
		t.Fatalf("%d of 3000 results; stderr %q, want the lost-messages notice", results, notice)
	}
	if _, err := fmt.Sscanf(notice[at+strings.Index(notice[at:], "(")+1:], "%d missing", &lost); err != nil {
		t.Fatalf("stderr %q: the execution's notice without its count: %v", notice, err)
	}
	if lost < 3000-results {
		t.Errorf("notice says %d lost, %d results did not arrive", lost, 3000-results)
	}
	if got := hosttest.Metrics(t, h, nil).Value(t, "kernelhost_kernel_messages_lost_total"); got != float64(lost) {
		t.Errorf("kernelhost_kernel_messages_lost_total = %v, want %d (the notices: %q)", got, lost, notice)
	}
}
