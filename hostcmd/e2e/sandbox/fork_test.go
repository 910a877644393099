package sandbox_test

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kernelhost/kernelhost/hostcmd/internal/hosttest"
	"github.com/kernelhost/kernelhost/hostcmd/settings"
	"github.com/kernelhost/kernelhost/internal/testkit"
	"github.com/kernelhost/kernelhost/transports/subprocess"
)

// unsandboxed runs the subprocess transport linked in without a sandbox,
// where python contexts can be forked.
func unsandboxed(c *settings.Config) {
	c.Transport = subprocess.New(subprocess.Options{Sandbox: subprocess.SandboxOptions{Mode: subprocess.SandboxOff}})
}

// unsandboxedViaPlugin runs the subprocess transport through its plugin,
// as the kernelhost binary does, without a sandbox (Debian's python, no
// fork server, as every ViaPlugin host: contexts are forked from their own
// interpreters).
func unsandboxedViaPlugin(c *settings.Config) {
	hosttest.ViaPlugin(c)
	c.SetTransportSetting("sandbox", "off")
	c.SetTransportSetting("python", testkit.DebianPython)
}

// withForkGlobal gives every context the global env var KH_FORK_GLOBAL=g.
func withForkGlobal(c *settings.Config) {
	c.GlobalEnv = map[string]string{"KH_FORK_GLOBAL": "g"}
}

// POST /contexts/{id}/fork answers a new context with a copy of the
// source's variables, functions, imports and cwd, and a new context's env
// (the interpreter's start env and the global env vars: none of an
// execution's env vars, nor what the source's cells did to os.environ);
// afterwards the two go their own ways. A fork asked
// for while an execution runs waits for it and copies what it left. An
// unknown context is 404, a bash context 501 naming bash. The same with
// the transport linked in and through its plugin (the fork call of the
// plugin protocol).
func TestForkContext(t *testing.T) {
	t.Parallel()
	for _, mode := range []struct {
		name string
		set  func(*settings.Config)
	}{{"in-process", unsandboxed}, {"plugin", unsandboxedViaPlugin}} {
		t.Run(mode.name, func(t *testing.T) {
			h := hosttest.Start(t, mode.set, withForkGlobal)
			if tr, ok := h.Engine.Transport().(*subprocess.Transport); ok {
				t.Cleanup(func() { _ = tr.Close() })
			}
			testForkContext(t, h)
		})
	}
}

func testForkContext(t *testing.T, h *hosttest.Host) {
	sub := filepath.Join(h.Cwd(), "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	src := h.CreateContext(`{"language":"python"}`).ID
	home := hosttest.Stdout(h.Run(map[string]any{"context_id": src, "code": "import os\nprint(os.environ['HOME'], os.environ['KH_FORK_GLOBAL'])"}))
	if !strings.HasSuffix(home, " g\n") {
		t.Fatalf("a new context's HOME and global env var: %q", home)
	}
	h.Run(map[string]any{"context_id": src, "code": "import os, json\nx = 41\ndef f(): return x + 1\nos.chdir('sub')\n" +
		"os.environ['MINE'] = 'x'\nos.environ.pop('HOME')\nos.environ['KH_FORK_GLOBAL'] = 'changed'", "env_vars": map[string]string{"KH_REQUEST_ONLY": "1"}})
	status, text := h.Do("POST", "/contexts/"+src+"/fork", "")
	if status != http.StatusOK {
		t.Fatalf("fork: %d %s", status, text)
	}
	fork := decodeContext(t, text)
	if fork.ID == src || fork.Language != "python" {
		t.Fatalf("fork answered %+v", fork)
	}
	probe := "print(f(), json.dumps(x), os.getcwd(), os.environ.get('KH_REQUEST_ONLY'))"
	if got := hosttest.Stdout(h.Run(map[string]any{"context_id": fork.ID, "code": probe + "\nx = 1"})); got != "42 41 "+sub+" None\n" {
		t.Fatalf("fork sees %q", got)
	}
	env := "print(os.environ.get('MINE'), os.environ.get('HOME'), os.environ.get('KH_FORK_GLOBAL'))"
	if got := hosttest.Stdout(h.Run(map[string]any{"context_id": fork.ID, "code": env})); got != "None "+home {
		t.Fatalf("the fork's MINE, HOME and global env var: %q, want a new context's (None %s)", got, strings.TrimSuffix(home, "\n"))
	}
	if got := hosttest.Stdout(h.Run(map[string]any{"context_id": src, "code": "print(f())\n" + env})); got != "42\nx None changed\n" {
		t.Fatalf("source after the fork's write: %q, want what its cells left", got)
	}

	// A fork while an execution runs waits for it, and for the reset of
	// the execution's env vars.
	started := filepath.Join(t.TempDir(), "started")
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		h.Run(map[string]any{"context_id": src, "code": "import time\nopen(" + strconv.Quote(started) + ", 'w').close()\ntime.sleep(1)\ny = 5",
			"env_vars": map[string]string{"KH_BUSY_ONLY": "1"}})
	}()
	awaitFile(t, started)
	status, text = h.Do("POST", "/contexts/"+src+"/fork", "")
	wg.Wait()
	if status != http.StatusOK {
		t.Fatalf("fork of a busy context: %d %s", status, text)
	}
	if got := hosttest.Stdout(h.Run(map[string]any{"context_id": decodeContext(t, text).ID, "code": "print(y, os.environ.get('KH_BUSY_ONLY'))"})); got != "5 None\n" {
		t.Fatalf("the fork made while a cell ran sees %q, want y = 5 that the cell left and none of its env vars", got)
	}

	if status, text := h.Do("POST", "/contexts/nope/fork", ""); status != http.StatusNotFound {
		t.Fatalf("fork of an unknown context: %d %s", status, text)
	}
	bash := h.CreateContext(`{"language":"bash"}`).ID
	if status, text := h.Do("POST", "/contexts/"+bash+"/fork", ""); status != http.StatusNotImplemented || !strings.Contains(text, "bash") {
		t.Fatalf("fork of a bash context: %d %s, want 501 naming bash", status, text)
	}
}

// Through the plugin as `make run` serves it (interpreters sandboxed, the
// default preload), new python contexts are forked from the template (they
// start with pandas loaded), and a fork of a live one is a copy in its
// sandbox: the fork answers what testForkContext asks (variables, cwd, a
// new context's env, the running cell's end), source and copy show
// one family in GET /contexts and /metrics, and the copy outlives its
// deleted source.
func TestForkContextSandboxedViaPlugin(t *testing.T) {
	t.Parallel()
	hosttest.NeedSandbox(t)
	testkit.NeedPythonModules(t, testkit.DebianPython, "numpy", "pandas", "matplotlib", "IPython")
	h := hosttest.Start(t, hosttest.ViaPlugin, hosttest.WithForkTemplate, withForkGlobal, func(c *settings.Config) {
		c.SetTransportSetting("sandbox", "on")
		c.SetTransportSetting("python", testkit.DebianPython)
	})
	deadline := time.Now().Add(3 * time.Minute)
	for hosttest.Metrics(t, h, nil).Metric("kernelhost_interpreters", "language", "python", "role", "fork-template") == nil {
		if time.Now().After(deadline) {
			t.Fatal("no fork template in /metrics after 3 minutes")
		}
		time.Sleep(50 * time.Millisecond) // the template's preload is not awaitable from here
	}
	if m := hosttest.Metrics(t, h, nil).Metric("kernelhost_fork_template_failing", "language", "python"); m == nil || m.GetGauge().GetValue() != 0 {
		t.Errorf("kernelhost_fork_template_failing with a template running: %v, want 0", m)
	}
	src := h.CreateContext(`{"language":"python"}`).ID
	if got := hosttest.Stdout(h.Run(map[string]any{"context_id": src, "code": "import sys, os\nx = 41\nprint('pandas' in sys.modules, os.getpid())"})); got != "True 2\n" {
		t.Fatalf("a new context under the sandbox: %q, want one forked from the template (pandas loaded), pid 2 in its sandbox", got)
	}
	status, text := h.Do("POST", "/contexts/"+src+"/fork", "")
	if status != http.StatusOK {
		t.Fatalf("fork of a sandboxed context: %d %s", status, text)
	}
	cp := decodeContext(t, text)
	families := map[string]string{}
	for _, c := range h.Contexts() {
		families[c.ID] = c.Family
	}
	if families[src] == "" || families[cp.ID] != families[src] || cp.Family != families[src] {
		t.Fatalf("families in GET /contexts %v and the fork's answer %q: want the source's and the copy's the same", families, cp.Family)
	}
	if got := hosttest.Stdout(h.Run(map[string]any{"context_id": cp.ID, "code": "print(x + 1, os.getpid() > 2)"})); got != "42 True\n" {
		t.Fatalf("the copy: %q, want the source's x in another process of its sandbox", got)
	}
	m := hosttest.Metrics(t, h, nil)
	if n := m.Value(t, "kernelhost_family_members", "language", "python", "family", cp.Family); n != 2 {
		t.Errorf("kernelhost_family_members of the family: %v, want 2", n)
	}
	if pss := m.Value(t, "kernelhost_family_memory_bytes", "language", "python", "family", cp.Family, "kind", "pss"); pss <= 0 {
		t.Errorf("kernelhost_family_memory_bytes pss of the family: %v", pss)
	}
	if m.Metric("kernelhost_context_limit", "resource", "memory_bytes") == nil {
		t.Error("no kernelhost_context_limit in /metrics")
	}
	if status, text := h.Do("DELETE", "/contexts/"+src, ""); status != http.StatusOK {
		t.Fatalf("delete the source: %d %s", status, text)
	}
	if got := hosttest.Stdout(h.Run(map[string]any{"context_id": cp.ID, "code": "print(x)"})); got != "41\n" {
		t.Fatalf("the copy after its source's delete: %q", got)
	}
	testForkContext(t, h)
}

// /metrics reports each role's interpreters' memory three ways, through the
// plugin as the binary runs it: a context's PSS and USS are above 0 and at
// most its RSS.
func TestInterpreterMemoryMetrics(t *testing.T) {
	t.Parallel()
	h := hosttest.Start(t, hosttest.ViaPlugin)
	h.Run(map[string]any{"code": "1"}) // the default python context's interpreter is there
	s := hosttest.Metrics(t, h, nil)
	if n := s.Value(t, "kernelhost_interpreters", "language", "python", "role", "context"); n < 1 {
		t.Fatalf("%v python context interpreters", n)
	}
	kind := func(k string) float64 {
		return s.Value(t, "kernelhost_interpreter_memory_bytes", "language", "python", "role", "context", "kind", k)
	}
	rss, pss, uss := kind("rss"), kind("pss"), kind("uss")
	if pss <= 0 || uss <= 0 || pss > rss || uss > pss {
		t.Fatalf("rss %v, pss %v, uss %v: want 0 < uss <= pss <= rss", rss, pss, uss)
	}
}

func decodeContext(t *testing.T, text string) hosttest.ContextInfo {
	t.Helper()
	var c hosttest.ContextInfo
	if err := json.Unmarshal([]byte(text), &c); err != nil {
		t.Fatalf("%v: %s", err, text)
	}
	return c
}

// awaitFile waits (bounded) until path exists.
func awaitFile(t *testing.T, path string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(path); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not made after 30 s", path)
		}
		time.Sleep(10 * time.Millisecond) // a file has nothing to wait on
	}
}
