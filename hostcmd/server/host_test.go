package server_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kernelhost/kernelhost/hostcmd/settings"
)

func TestHealthAndDefaultContexts(t *testing.T) {
	t.Parallel()
	eachTransport(t, func(t *testing.T, start func(...func(*settings.Config)) *testHost) {
		h := start()
		status, body := h.do("GET", "/health", "")
		if status != 200 || body != `"OK"` {
			t.Fatalf("GET /health: %d %q, want 200 %q", status, body, `"OK"`)
		}
		ctxs := h.contexts()
		want := []string{"python"}
		if _, err := exec.LookPath("node"); err == nil {
			want = append(want, "javascript")
		}
		if len(ctxs) != len(want) {
			t.Fatalf("contexts: %+v, want defaults %v", ctxs, want)
		}
		for i, c := range ctxs {
			if c.Language != want[i] || c.Cwd != h.cwd || c.ID == "" {
				t.Errorf("context %d: %+v, want language %s, cwd %s", i, c, want[i], h.cwd)
			}
		}
	})
}

func TestStateAcrossExecutions(t *testing.T) {
	t.Parallel()
	eachTransport(t, func(t *testing.T, start func(...func(*settings.Config)) *testHost) {
		h := start()
		noError(t, h.run(map[string]any{"code": "x = 41"}))
		lines := h.run(map[string]any{"code": "x + 1"})
		if got := mainResult(t, lines); got != "42" {
			t.Fatalf("x + 1 = %q, want 42", got)
		}
		// language "python" and no language are the same kernel
		if got := mainResult(t, h.run(map[string]any{"code": "x", "language": "python"})); got != "41" {
			t.Fatalf(`x with language "python" = %q, want 41`, got)
		}
		if first := lines[0]; first.typ() != "number_of_executions" {
			t.Fatalf("first line %v, want number_of_executions", first)
		}
	})
}

func TestStreamingOrder(t *testing.T) {
	t.Parallel()
	eachTransport(t, func(t *testing.T, start func(...func(*settings.Config)) *testHost) {
		h := start()
		lines := h.run(map[string]any{"code": "import sys\nprint('a', flush=True)\nprint('b', flush=True)\nprint('c', file=sys.stderr, flush=True)\n1+1"})
		var kinds []string
		for _, l := range lines {
			if k := l.typ(); len(kinds) == 0 || kinds[len(kinds)-1] != k {
				kinds = append(kinds, k)
			}
		}
		want := "number_of_executions stdout stderr result end_of_execution"
		if got := strings.Join(kinds, " "); got != want {
			t.Fatalf("line kinds %q, want %q", got, want)
		}
		if got := stdout(lines); got != "a\nb\n" {
			t.Fatalf("stdout %q", got)
		}
		if got := mainResult(t, lines); got != "2" {
			t.Fatalf("result %q, want 2", got)
		}
	})
}

// The first line of a long execution reaches the client while the code still
// runs: the code waits for a file that the test creates only after reading it.
func TestFirstLineArrivesBeforeTheEnd(t *testing.T) {
	t.Parallel()
	eachTransport(t, func(t *testing.T, start func(...func(*settings.Config)) *testHost) {
		h := start()
		flag := filepath.Join(t.TempDir(), "go-on")
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		s := h.start(ctx, map[string]any{"code": fmt.Sprintf(
			"import os, time\nprint('first', flush=True)\nwhile not os.path.exists(%q):\n    time.sleep(0.005)\nprint('second')", flag)})
		if l := s.until("stdout"); l.str("text") != "first\n" {
			t.Fatalf("first stdout line %v", l)
		}
		if err := os.WriteFile(flag, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if got := stdout(s.rest()); got != "second\n" {
			t.Fatalf("rest of stdout %q, want second", got)
		}
	})
}

func TestErrors(t *testing.T) {
	t.Parallel()
	eachTransport(t, func(t *testing.T, start func(...func(*settings.Config)) *testHost) {
		h := start()
		lines := h.run(map[string]any{"code": "print('before')\nxyz"})
		e := onlyError(t, lines)
		if e.str("name") != "NameError" || e.str("value") != "name 'xyz' is not defined" {
			t.Fatalf("error line %v", e)
		}
		if _, ok := e["traceback"].(string); !ok {
			t.Fatalf("error line without a traceback string: %v", e)
		}
		if stdout(lines) != "before\n" {
			t.Fatalf("stdout %q", stdout(lines))
		}
		// the context keeps working
		if got := mainResult(t, h.run(map[string]any{"code": "1+1"})); got != "2" {
			t.Fatalf("after an error: 1+1 = %q", got)
		}
	})
}

// envValues must round-trip exactly (docs/api-contract.md §7.4).
var envValues = []string{
	`single ' quote`, `double " quote`, `back\slash \n \\`, "new\nline", "trailing newline\n\n",
	"$(echo injected) `echo backtick` ${HOME}", "\ttab\t", "", "non-ASCII: héllo ünïcödé 中文",
	"astral: 😀 𝄞", "x'; import shutil; '", "\r\ncrlf",
}

func envMap() map[string]string {
	m := map[string]string{}
	for i, v := range envValues {
		m[fmt.Sprintf("KH_TEST_%d", i)] = v
	}
	return m
}

func TestEnvVarsPython(t *testing.T) {
	t.Parallel()
	eachTransport(t, func(t *testing.T, start func(...func(*settings.Config)) *testHost) {
		h := start(func(c *settings.Config) { c.GlobalEnv = map[string]string{"KH_TEST_0": "global value"} })
		env := envMap()
		code := "import os, json\nprint(json.dumps({k: os.environ.get(k) for k in sorted(os.environ) if k.startswith('KH_TEST_')}))"
		lines := h.run(map[string]any{"code": code, "env_vars": env})
		noError(t, lines)
		var got map[string]string
		if err := json.Unmarshal([]byte(stdout(lines)), &got); err != nil {
			t.Fatalf("decode %q: %v", stdout(lines), err)
		}
		for k, v := range env {
			if got[k] != v {
				t.Errorf("%s = %q, want %q", k, got[k], v)
			}
		}
		// Gone in the next execution; the global value is back.
		lines = h.run(map[string]any{"code": code})
		got = nil
		if err := json.Unmarshal([]byte(stdout(lines)), &got); err != nil {
			t.Fatalf("decode %q: %v", stdout(lines), err)
		}
		if len(got) != 1 || got["KH_TEST_0"] != "global value" {
			t.Fatalf("after the execution: %q, want only the global KH_TEST_0", got)
		}
	})
}

func TestEnvVarsBash(t *testing.T) {
	t.Parallel()
	eachTransport(t, func(t *testing.T, start func(...func(*settings.Config)) *testHost) {
		h := start()
		env := envMap()
		var code strings.Builder
		for i := range envValues {
			// base64 keeps every byte, trailing newlines included
			fmt.Fprintf(&code, "printf '%%s' \"${KH_TEST_%d-UNSET}\" | base64 -w0; echo\n", i)
		}
		lines := h.run(map[string]any{"code": code.String(), "language": "bash", "env_vars": env})
		noError(t, lines)
		out := strings.Split(strings.TrimSuffix(stdout(lines), "\n"), "\n")
		if len(out) != len(envValues) {
			t.Fatalf("bash printed %d lines, want %d: %q", len(out), len(envValues), stdout(lines))
		}
		for i, v := range envValues {
			b, err := base64.StdEncoding.DecodeString(out[i])
			if err != nil {
				t.Fatalf("line %d: %v", i, err)
			}
			if string(b) != v {
				t.Errorf("KH_TEST_%d = %q, want %q", i, b, v)
			}
		}
		lines = h.run(map[string]any{"code": "env | grep -c '^KH_TEST_' || true", "language": "bash"})
		if got := strings.TrimSpace(stdout(lines)); got != "0" {
			t.Fatalf("per-request env vars left in bash: %q", got)
		}
	})
}

func TestCwd(t *testing.T) {
	t.Parallel()
	eachTransport(t, func(t *testing.T, start func(...func(*settings.Config)) *testHost) {
		testCwd(t, start(), t.TempDir())
	})
}

// testCwd: code of a context created with dir as its cwd runs there, code
// of the default context in the host's cwd; a missing cwd is a 400 that
// names it and leaves no context.
func testCwd(t *testing.T, h *testHost, dir string) {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"language": "python", "cwd": dir})
	c := h.createContext(string(body))
	if c.Cwd != dir || c.Language != "python" {
		t.Fatalf("created %+v, want cwd %s", c, dir)
	}
	if got := stdout(h.run(map[string]any{"code": "import os; print(os.getcwd())", "context_id": c.ID})); got != dir+"\n" {
		t.Fatalf("cwd %q, want %q", got, dir)
	}
	if got := stdout(h.run(map[string]any{"code": "import os; print(os.getcwd())"})); got != h.cwd+"\n" {
		t.Fatalf("default context cwd %q, want %s", got, h.cwd)
	}
	before := h.contexts()
	status, text := h.do("POST", "/contexts", `{"cwd":"/does/not/exist"}`)
	if status != http.StatusBadRequest || !strings.Contains(text, "/does/not/exist") {
		t.Fatalf("missing cwd: %d %q, want 400 naming it", status, text)
	}
	if after := h.contexts(); len(after) != len(before) {
		t.Fatalf("a failed create left a context: %+v", after)
	}
}

func TestContextsLifecycle(t *testing.T) {
	t.Parallel()
	eachTransport(t, func(t *testing.T, start func(...func(*settings.Config)) *testHost) {
		h := start()
		defaults := h.contexts()
		a := h.createContext(`{}`)
		b := h.createContext(`{"language":"bash"}`)
		if a.Language != "python" || b.Language != "bash" {
			t.Fatalf("languages %q %q", a.Language, b.Language)
		}
		listed := h.contexts()
		if len(listed) != len(defaults)+2 || listed[len(listed)-2] != a || listed[len(listed)-1] != b {
			t.Fatalf("listing %+v, want the defaults then %+v, %+v", listed, a, b)
		}

		// restart: state gone, listing unchanged
		noError(t, h.run(map[string]any{"code": "x = 1", "context_id": a.ID}))
		if status, body := h.do("POST", "/contexts/"+a.ID+"/restart", ""); status != 200 || body != "null" {
			t.Fatalf("restart: %d %q", status, body)
		}
		e := onlyError(t, h.run(map[string]any{"code": "x", "context_id": a.ID}))
		if e.str("name") != "NameError" || e.str("value") != "name 'x' is not defined" {
			t.Fatalf("after restart: %v", e)
		}
		if after := h.contexts(); fmt.Sprint(after) != fmt.Sprint(listed) {
			t.Fatalf("restart moved the listing: %+v, was %+v", after, listed)
		}

		// delete: gone, then 404 everywhere
		if status, body := h.do("DELETE", "/contexts/"+a.ID, ""); status != 200 || body != "null" {
			t.Fatalf("delete: %d %q", status, body)
		}
		h.requireContextGone(a.ID)
		if after := h.contexts(); len(after) != len(listed)-1 || after[len(after)-1] != b {
			t.Fatalf("listing after delete: %+v", after)
		}
		// b is unaffected
		if got := stdout(h.run(map[string]any{"code": "echo ok", "context_id": b.ID})); got != "ok\n" {
			t.Fatalf("bash context after deleting another: %q", got)
		}
	})
}

func TestDeleteDefaultContext(t *testing.T) {
	t.Parallel()
	h := startHost(t)
	id := h.defaultID("python")
	if status, _ := h.do("DELETE", "/contexts/"+id, ""); status != 200 {
		t.Fatalf("delete default: %d", status)
	}
	// the next context-less execution transparently gets a new default
	if got := mainResult(t, h.run(map[string]any{"code": "1+1"})); got != "2" {
		t.Fatalf("after deleting the default: %q", got)
	}
	if newID := h.defaultID("python"); newID == id {
		t.Fatalf("default context id unchanged after delete")
	}
}

func TestInterrupt(t *testing.T) {
	t.Parallel()
	eachTransport(t, func(t *testing.T, start func(...func(*settings.Config)) *testHost) {
		h := start()
		id := h.defaultID("python")
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		s := h.start(ctx, map[string]any{"code": "import time\nprint('sleeping', flush=True)\ntime.sleep(60)"})
		s.until("stdout") // the code is running
		began := time.Now()
		if status, body := h.do("POST", "/contexts/"+id+"/interrupt", ""); status != 200 || body != "null" {
			t.Fatalf("interrupt: %d %q", status, body)
		}
		rest := s.rest()
		// The cell sleeps 60 s: ending within 15 s is ending by the
		// interrupt, with room for a loaded machine.
		if took := time.Since(began); took > 15*time.Second {
			t.Fatalf("the interrupted execution ended %s after the interrupt, want well under the cell's 60 s", took)
		}
		if e := onlyError(t, rest); e.str("name") != "KeyboardInterrupt" {
			t.Fatalf("error %v, want KeyboardInterrupt", e)
		}
		if got := mainResult(t, h.run(map[string]any{"code": "1+1"})); got != "2" {
			t.Fatalf("after the interrupt: %q", got)
		}
	})
}

// A client that leaves mid-execution does not hold the context: with the
// interrupt policy the next execution runs at once.
func TestDisconnectMidExecution(t *testing.T) {
	t.Parallel()
	eachTransport(t, func(t *testing.T, start func(...func(*settings.Config)) *testHost) {
		h := start()
		ctx, cancel := context.WithCancel(context.Background())
		s := h.start(ctx, map[string]any{"code": "import time\nprint('sleeping', flush=True)\ntime.sleep(60)"})
		s.until("stdout")
		cancel() // drop the connection
		began := time.Now()
		if got := mainResult(t, h.run(map[string]any{"code": "1+1"})); got != "2" {
			t.Fatalf("after a disconnect: %q", got)
		}
		// Waiting for the abandoned cell would take its 60 s.
		if took := time.Since(began); took > 15*time.Second {
			t.Fatalf("the next execution took %s after a disconnect", took)
		}
	})
}

func TestKeepalive(t *testing.T) {
	t.Parallel()
	h := startHost(t, func(c *settings.Config) { c.Keepalive = 50 * time.Millisecond })
	flag := filepath.Join(t.TempDir(), "go-on")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s := h.start(ctx, map[string]any{"code": fmt.Sprintf(
		"import os, time\nwhile not os.path.exists(%q):\n    time.sleep(0.005)\nprint('done')", flag)})
	s.until("keepalive")
	if err := os.WriteFile(flag, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if got := stdout(s.rest()); got != "done\n" {
		t.Fatalf("stdout %q", got)
	}
}

func TestNonASCIIOutput(t *testing.T) {
	t.Parallel()
	h := startHost(t)
	want := "héllo 😀 \x01 \"q\" \\ 中文\n"
	lines := h.run(map[string]any{"code": fmt.Sprintf("print(%q, end='')", want)})
	if got := stdout(lines); got != want {
		t.Fatalf("stdout %q, want %q", got, want)
	}
}

func TestShutdownEndsStreams(t *testing.T) {
	t.Parallel()
	eachTransport(t, func(t *testing.T, start func(...func(*settings.Config)) *testHost) {
		h := start()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		s := h.start(ctx, map[string]any{"code": "import time\nprint('sleeping', flush=True)\ntime.sleep(60)"})
		s.until("stdout")
		done := make(chan error, 1)
		go func() { done <- h.Shutdown(ctx) }()
		rest := s.rest()
		onlyError(t, rest)
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("shutdown: %v", err)
			}
		case <-ctx.Done():
			t.Fatal("shutdown did not return")
		}
		if _, err := h.client.Get(h.URL() + "/health"); err == nil {
			t.Fatal("the host still accepts connections after shutdown")
		}
	})
}

func TestJavaScript(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("node is not installed")
	}
	eachTransport(t, func(t *testing.T, start func(...func(*settings.Config)) *testHost) {
		h := start()
		lines := h.run(map[string]any{"code": "console.log('hi from node')", "language": "js"})
		noError(t, lines)
		if got := stdout(lines); got != "hi from node\n" {
			t.Fatalf("stdout %q", got)
		}
	})
}

// Without the default cwd (/home/user outside a sandbox) contexts start in a
// workspace directory of their own, created if missing and listed by GET
// /contexts, never in the host's own working directory (for make run, the
// repository: a cell saving kh-workspace-test.png left it there; issue 11 item 12).
func TestWorkspaceWhenDefaultCwdIsMissing(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		workspace string // the setting; "" is the default under XDG_DATA_HOME
	}{
		{"configured", filepath.Join(t.TempDir(), "a", "ws")},
		{"default", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := tc.workspace
			if want == "" {
				data := t.TempDir()
				t.Setenv("XDG_DATA_HOME", data)
				want = filepath.Join(data, "kernelhost", "workspace")
			}
			// Through the plugin, which gets the resolved default cwd (the
			// workspace) as a writable path, as the kernelhost binary does:
			// the linked-in test transport is made before the workspace
			// exists, and a context's cwd outside the writable paths is
			// read-only in its sandbox.
			h := startHost(t, viaPlugin, func(c *settings.Config) {
				c.DefaultCwd = filepath.Join(t.TempDir(), "no-such-home")
				c.Workspace = tc.workspace
			})
			for _, c := range h.contexts() {
				if c.Cwd != want {
					t.Errorf("GET /contexts: %s context in %q, want the workspace %s (the host's own directory is %s)", c.Language, c.Cwd, want, wd)
				}
			}
			if got := stdout(h.run(map[string]any{"code": "import os; open('kh-workspace-test.png', 'w').close(); print(os.getcwd())"})); got != want+"\n" {
				t.Fatalf("python cwd %q, want %s", got, want)
			}
			if _, err := os.Stat(filepath.Join(want, "kh-workspace-test.png")); err != nil {
				t.Fatalf("the file is not in the workspace: %v", err)
			}
			if _, err := os.Stat(filepath.Join(wd, "kh-workspace-test.png")); err == nil {
				os.Remove(filepath.Join(wd, "kh-workspace-test.png"))
				t.Fatalf("the file landed in the host's working directory %s", wd)
			}
			if fi, err := os.Stat(want); err != nil || fi.Mode().Perm() != 0o700 {
				t.Fatalf("workspace %s: %v, mode %v, want a 0700 directory", want, err, fi.Mode())
			}
		})
	}
}
