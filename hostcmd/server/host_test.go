package server_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kernelhost/kernelhost/hostcmd/internal/hosttest"
	"github.com/kernelhost/kernelhost/hostcmd/settings"
)

func TestHealthAndDefaultContexts(t *testing.T) {
	t.Parallel()
	hosttest.EachTransport(t, func(t *testing.T, start func(...func(*settings.Config)) *hosttest.Host) {
		h := start()
		status, body := h.Do("GET", "/health", "")
		if status != 200 || body != `"OK"` {
			t.Fatalf("GET /health: %d %q, want 200 %q", status, body, `"OK"`)
		}
		ctxs := h.Contexts()
		want := []string{"python"}
		if _, err := exec.LookPath("node"); err == nil {
			want = append(want, "javascript")
		}
		if len(ctxs) != len(want) {
			t.Fatalf("contexts: %+v, want defaults %v", ctxs, want)
		}
		for i, c := range ctxs {
			if c.Language != want[i] || c.Cwd != h.Cwd() || c.ID == "" {
				t.Errorf("context %d: %+v, want language %s, cwd %s", i, c, want[i], h.Cwd())
			}
		}
	})
}

func TestStateAcrossExecutions(t *testing.T) {
	t.Parallel()
	hosttest.EachTransport(t, func(t *testing.T, start func(...func(*settings.Config)) *hosttest.Host) {
		h := start()
		hosttest.NoError(t, h.Run(map[string]any{"code": "x = 41"}))
		lines := h.Run(map[string]any{"code": "x + 1"})
		if got := hosttest.MainResult(t, lines); got != "42" {
			t.Fatalf("x + 1 = %q, want 42", got)
		}
		// language "python" and no language are the same kernel
		if got := hosttest.MainResult(t, h.Run(map[string]any{"code": "x", "language": "python"})); got != "41" {
			t.Fatalf(`x with language "python" = %q, want 41`, got)
		}
		if first := lines[0]; first.Type() != "number_of_executions" {
			t.Fatalf("first line %v, want number_of_executions", first)
		}
	})
}

func TestStreamingOrder(t *testing.T) {
	t.Parallel()
	hosttest.EachTransport(t, func(t *testing.T, start func(...func(*settings.Config)) *hosttest.Host) {
		h := start()
		lines := h.Run(map[string]any{"code": "import sys\nprint('a', flush=True)\nprint('b', flush=True)\nprint('c', file=sys.stderr, flush=True)\n1+1"})
		var kinds []string
		for _, l := range lines {
			if k := l.Type(); len(kinds) == 0 || kinds[len(kinds)-1] != k {
				kinds = append(kinds, k)
			}
		}
		want := "number_of_executions stdout stderr result end_of_execution"
		if got := strings.Join(kinds, " "); got != want {
			t.Fatalf("line kinds %q, want %q", got, want)
		}
		if got := hosttest.Stdout(lines); got != "a\nb\n" {
			t.Fatalf("stdout %q", got)
		}
		if got := hosttest.MainResult(t, lines); got != "2" {
			t.Fatalf("result %q, want 2", got)
		}
	})
}

// The first line of a long execution reaches the client while the code still
// runs: the code waits for a file that the test creates only after reading it.
func TestFirstLineArrivesBeforeTheEnd(t *testing.T) {
	t.Parallel()
	hosttest.EachTransport(t, func(t *testing.T, start func(...func(*settings.Config)) *hosttest.Host) {
		h := start()
		flag := filepath.Join(t.TempDir(), "go-on")
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		s := h.Start(ctx, map[string]any{"code": fmt.Sprintf(
			"import os, time\nprint('first', flush=True)\nwhile not os.path.exists(%q):\n    time.sleep(0.005)\nprint('second')", flag)})
		if l := s.Until("stdout"); l.Str("text") != "first\n" {
			t.Fatalf("first stdout line %v", l)
		}
		if err := os.WriteFile(flag, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if got := hosttest.Stdout(s.Rest()); got != "second\n" {
			t.Fatalf("rest of stdout %q, want second", got)
		}
	})
}

func TestErrors(t *testing.T) {
	t.Parallel()
	hosttest.EachTransport(t, func(t *testing.T, start func(...func(*settings.Config)) *hosttest.Host) {
		h := start()
		lines := h.Run(map[string]any{"code": "print('before')\nxyz"})
		e := hosttest.OnlyError(t, lines)
		if e.Str("name") != "NameError" || e.Str("value") != "name 'xyz' is not defined" {
			t.Fatalf("error line %v", e)
		}
		if _, ok := e["traceback"].(string); !ok {
			t.Fatalf("error line without a traceback string: %v", e)
		}
		if hosttest.Stdout(lines) != "before\n" {
			t.Fatalf("stdout %q", hosttest.Stdout(lines))
		}
		// the context keeps working
		if got := hosttest.MainResult(t, h.Run(map[string]any{"code": "1+1"})); got != "2" {
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
	hosttest.EachTransport(t, func(t *testing.T, start func(...func(*settings.Config)) *hosttest.Host) {
		h := start(func(c *settings.Config) { c.GlobalEnv = map[string]string{"KH_TEST_0": "global value"} })
		env := envMap()
		code := "import os, json\nprint(json.dumps({k: os.environ.get(k) for k in sorted(os.environ) if k.startswith('KH_TEST_')}))"
		lines := h.Run(map[string]any{"code": code, "env_vars": env})
		hosttest.NoError(t, lines)
		var got map[string]string
		if err := json.Unmarshal([]byte(hosttest.Stdout(lines)), &got); err != nil {
			t.Fatalf("decode %q: %v", hosttest.Stdout(lines), err)
		}
		for k, v := range env {
			if got[k] != v {
				t.Errorf("%s = %q, want %q", k, got[k], v)
			}
		}
		// Gone in the next execution; the global value is back.
		lines = h.Run(map[string]any{"code": code})
		got = nil
		if err := json.Unmarshal([]byte(hosttest.Stdout(lines)), &got); err != nil {
			t.Fatalf("decode %q: %v", hosttest.Stdout(lines), err)
		}
		if len(got) != 1 || got["KH_TEST_0"] != "global value" {
			t.Fatalf("after the execution: %q, want only the global KH_TEST_0", got)
		}
	})
}

func TestEnvVarsBash(t *testing.T) {
	t.Parallel()
	hosttest.EachTransport(t, func(t *testing.T, start func(...func(*settings.Config)) *hosttest.Host) {
		h := start()
		env := envMap()
		var code strings.Builder
		for i := range envValues {
			// base64 keeps every byte, trailing newlines included
			fmt.Fprintf(&code, "printf '%%s' \"${KH_TEST_%d-UNSET}\" | base64 -w0; echo\n", i)
		}
		lines := h.Run(map[string]any{"code": code.String(), "language": "bash", "env_vars": env})
		hosttest.NoError(t, lines)
		out := strings.Split(strings.TrimSuffix(hosttest.Stdout(lines), "\n"), "\n")
		if len(out) != len(envValues) {
			t.Fatalf("bash printed %d lines, want %d: %q", len(out), len(envValues), hosttest.Stdout(lines))
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
		lines = h.Run(map[string]any{"code": "env | grep -c '^KH_TEST_' || true", "language": "bash"})
		if got := strings.TrimSpace(hosttest.Stdout(lines)); got != "0" {
			t.Fatalf("per-request env vars left in bash: %q", got)
		}
	})
}

func TestCwd(t *testing.T) {
	t.Parallel()
	hosttest.EachTransport(t, func(t *testing.T, start func(...func(*settings.Config)) *hosttest.Host) {
		hosttest.CheckCwd(t, start(), t.TempDir())
	})
}

func TestContextsLifecycle(t *testing.T) {
	t.Parallel()
	hosttest.EachTransport(t, func(t *testing.T, start func(...func(*settings.Config)) *hosttest.Host) {
		h := start()
		defaults := h.Contexts()
		a := h.CreateContext(`{}`)
		b := h.CreateContext(`{"language":"bash"}`)
		if a.Language != "python" || b.Language != "bash" {
			t.Fatalf("languages %q %q", a.Language, b.Language)
		}
		listed := h.Contexts()
		if len(listed) != len(defaults)+2 || listed[len(listed)-2] != a || listed[len(listed)-1] != b {
			t.Fatalf("listing %+v, want the defaults then %+v, %+v", listed, a, b)
		}

		// restart: state gone, listing unchanged
		hosttest.NoError(t, h.Run(map[string]any{"code": "x = 1", "context_id": a.ID}))
		if status, body := h.Do("POST", "/contexts/"+a.ID+"/restart", ""); status != 200 || body != "null" {
			t.Fatalf("restart: %d %q", status, body)
		}
		e := hosttest.OnlyError(t, h.Run(map[string]any{"code": "x", "context_id": a.ID}))
		if e.Str("name") != "NameError" || e.Str("value") != "name 'x' is not defined" {
			t.Fatalf("after restart: %v", e)
		}
		// A restarted context's family is a new one (a fresh sandbox):
		// its id, language, cwd and place stay.
		if after := h.Contexts(); fmt.Sprint(withoutFamily(after)) != fmt.Sprint(withoutFamily(listed)) {
			t.Fatalf("restart moved the listing: %+v, was %+v", after, listed)
		}

		// delete: gone, then 404 everywhere
		if status, body := h.Do("DELETE", "/contexts/"+a.ID, ""); status != 200 || body != "null" {
			t.Fatalf("delete: %d %q", status, body)
		}
		h.RequireContextGone(a.ID)
		if after := h.Contexts(); len(after) != len(listed)-1 || after[len(after)-1] != b {
			t.Fatalf("listing after delete: %+v", after)
		}
		// b is unaffected
		if got := hosttest.Stdout(h.Run(map[string]any{"code": "echo ok", "context_id": b.ID})); got != "ok\n" {
			t.Fatalf("bash context after deleting another: %q", got)
		}
	})
}

func TestDeleteDefaultContext(t *testing.T) {
	t.Parallel()
	h := hosttest.Start(t)
	id := h.DefaultID("python")
	if status, _ := h.Do("DELETE", "/contexts/"+id, ""); status != 200 {
		t.Fatalf("delete default: %d", status)
	}
	// the next context-less execution transparently gets a new default
	if got := hosttest.MainResult(t, h.Run(map[string]any{"code": "1+1"})); got != "2" {
		t.Fatalf("after deleting the default: %q", got)
	}
	if newID := h.DefaultID("python"); newID == id {
		t.Fatalf("default context id unchanged after delete")
	}
}

func TestInterrupt(t *testing.T) {
	t.Parallel()
	hosttest.EachTransport(t, func(t *testing.T, start func(...func(*settings.Config)) *hosttest.Host) {
		h := start()
		id := h.DefaultID("python")
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		s := h.Start(ctx, map[string]any{"code": "import time\nprint('sleeping', flush=True)\ntime.sleep(60)"})
		s.Until("stdout") // the code is running
		began := time.Now()
		if status, body := h.Do("POST", "/contexts/"+id+"/interrupt", ""); status != 200 || body != "null" {
			t.Fatalf("interrupt: %d %q", status, body)
		}
		rest := s.Rest()
		// The cell sleeps 60 s: ending within 15 s is ending by the
		// interrupt, with room for a loaded machine.
		if took := time.Since(began); took > 15*time.Second {
			t.Fatalf("the interrupted execution ended %s after the interrupt, want well under the cell's 60 s", took)
		}
		if e := hosttest.OnlyError(t, rest); e.Str("name") != "KeyboardInterrupt" {
			t.Fatalf("error %v, want KeyboardInterrupt", e)
		}
		if got := hosttest.MainResult(t, h.Run(map[string]any{"code": "1+1"})); got != "2" {
			t.Fatalf("after the interrupt: %q", got)
		}
	})
}

// A client that leaves mid-execution does not hold the context: with the
// interrupt policy the next execution runs at once.
func TestDisconnectMidExecution(t *testing.T) {
	t.Parallel()
	hosttest.EachTransport(t, func(t *testing.T, start func(...func(*settings.Config)) *hosttest.Host) {
		h := start()
		ctx, cancel := context.WithCancel(context.Background())
		s := h.Start(ctx, map[string]any{"code": "import time\nprint('sleeping', flush=True)\ntime.sleep(60)"})
		s.Until("stdout")
		cancel() // drop the connection
		began := time.Now()
		if got := hosttest.MainResult(t, h.Run(map[string]any{"code": "1+1"})); got != "2" {
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
	h := hosttest.Start(t, func(c *settings.Config) { c.Keepalive = 50 * time.Millisecond })
	flag := filepath.Join(t.TempDir(), "go-on")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s := h.Start(ctx, map[string]any{"code": fmt.Sprintf(
		"import os, time\nwhile not os.path.exists(%q):\n    time.sleep(0.005)\nprint('done')", flag)})
	s.Until("keepalive")
	if err := os.WriteFile(flag, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if got := hosttest.Stdout(s.Rest()); got != "done\n" {
		t.Fatalf("stdout %q", got)
	}
}

func TestNonASCIIOutput(t *testing.T) {
	t.Parallel()
	h := hosttest.Start(t)
	want := "héllo 😀 \x01 \"q\" \\ 中文\n"
	lines := h.Run(map[string]any{"code": fmt.Sprintf("print(%q, end='')", want)})
	if got := hosttest.Stdout(lines); got != want {
		t.Fatalf("stdout %q, want %q", got, want)
	}
}

func TestShutdownEndsStreams(t *testing.T) {
	t.Parallel()
	hosttest.EachTransport(t, func(t *testing.T, start func(...func(*settings.Config)) *hosttest.Host) {
		h := start()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		s := h.Start(ctx, map[string]any{"code": "import time\nprint('sleeping', flush=True)\ntime.sleep(60)"})
		s.Until("stdout")
		done := make(chan error, 1)
		go func() { done <- h.Shutdown(ctx) }()
		rest := s.Rest()
		hosttest.OnlyError(t, rest)
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("shutdown: %v", err)
			}
		case <-ctx.Done():
			t.Fatal("shutdown did not return")
		}
		if _, err := h.Client().Get(h.URL() + "/health"); err == nil {
			t.Fatal("the host still accepts connections after shutdown")
		}
	})
}

func TestJavaScript(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("node is not installed")
	}
	hosttest.EachTransport(t, func(t *testing.T, start func(...func(*settings.Config)) *hosttest.Host) {
		h := start()
		lines := h.Run(map[string]any{"code": "console.log('hi from node')", "language": "js"})
		hosttest.NoError(t, lines)
		if got := hosttest.Stdout(lines); got != "hi from node\n" {
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
			h := hosttest.Start(t, hosttest.ViaPlugin, func(c *settings.Config) {
				c.DefaultCwd = filepath.Join(t.TempDir(), "no-such-home")
				c.Workspace = tc.workspace
			})
			for _, c := range h.Contexts() {
				if c.Cwd != want {
					t.Errorf("GET /contexts: %s context in %q, want the workspace %s (the host's own directory is %s)", c.Language, c.Cwd, want, wd)
				}
			}
			if got := hosttest.Stdout(h.Run(map[string]any{"code": "import os; open('kh-workspace-test.png', 'w').close(); print(os.getcwd())"})); got != want+"\n" {
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

// withoutFamily is list without each context's family.
func withoutFamily(list []hosttest.ContextInfo) []hosttest.ContextInfo {
	out := slices.Clone(list)
	for i := range out {
		out[i].Family = ""
	}
	return out
}
