package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kernelhost/kernelhost/hostcmd/internal/hosttest"
	"github.com/kernelhost/kernelhost/hostcmd/server"
	"github.com/kernelhost/kernelhost/hostcmd/settings"
	"github.com/kernelhost/kernelhost/internal/testkit"
)

// copyModule copies a built module into dir under name, so a test can put a
// .config file next to it.
func copyModule(t *testing.T, src, dir, name string) string {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(dir, name)
	if err := os.WriteFile(dst, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return dst
}

// execStatus sends an execution and returns the status and the whole body.
func execStatus(h *hosttest.Host, req map[string]any) (int, string) {
	b, _ := json.Marshal(req)
	return h.Do("POST", "/execute", string(b))
}

// envOf runs code printing the env var key (or <unset>) and returns it.
func envOf(t *testing.T, h *hosttest.Host, key string, env map[string]string) string {
	t.Helper()
	lines := h.Run(map[string]any{"code": fmt.Sprintf("import os; print(os.environ.get(%q, '<unset>'))", key), "env_vars": env})
	hosttest.NoError(t, lines)
	return strings.TrimSuffix(hosttest.Stdout(lines), "\n")
}

// The example denylist policy over HTTP: a refused key is a 403 naming it and
// the code never runs; an injected default is what the code sees.
func TestPolicyDenylist(t *testing.T) {
	t.Parallel()
	hosttest.EachTransport(t, func(t *testing.T, start func(...func(*settings.Config)) *hosttest.Host) {
		dir := t.TempDir()
		mod := copyModule(t, hosttest.Denylist(t), dir, "denylist.wasm")
		testkit.WriteFile(t, filepath.Join(dir, "denylist.config"), `{"defaults":{"TZ":"UTC"}}`)
		h := start(func(c *settings.Config) { c.Policies = mod })

		marker := filepath.Join(t.TempDir(), "ran")
		status, body := execStatus(h, map[string]any{
			"code":     fmt.Sprintf("open(%q, 'w').close()", marker),
			"env_vars": map[string]string{"LD_PRELOAD": "/tmp/evil.so", "APP_OK": "1"},
		})
		if status != http.StatusForbidden || !strings.Contains(body, "LD_PRELOAD") || !strings.Contains(body, "denylist") {
			t.Fatalf("LD_PRELOAD: %d %q, want 403 naming the key and the policy", status, body)
		}
		if strings.Contains(body, "/tmp/evil.so") {
			t.Fatalf("the 403 echoes the refused value: %q", body)
		}
		if _, err := os.Stat(marker); !os.IsNotExist(err) {
			t.Fatalf("the refused execution ran (marker: %v)", err)
		}
		if got := envOf(t, h, "LD_PRELOAD", nil); got != "<unset>" {
			t.Fatalf("the interpreter sees LD_PRELOAD=%q", got)
		}

		// injected when the request does not set it, the request's own otherwise
		if got := envOf(t, h, "TZ", map[string]string{"APP_X": "1"}); got != "UTC" {
			t.Fatalf("TZ = %q, want the injected UTC", got)
		}
		if got := envOf(t, h, "TZ", map[string]string{"TZ": "Europe/Paris"}); got != "Europe/Paris" {
			t.Fatalf("TZ = %q, want the request's Europe/Paris", got)
		}
		// the policy runs on every execution, env vars or not
		if got := envOf(t, h, "TZ", nil); got != "UTC" {
			t.Fatalf("TZ without env vars = %q, want UTC", got)
		}
	})
}

// A hostile module (it spins when it sees env vars): those executions get a
// 403 naming the module, within its deadline; the others keep working.
func TestPolicyHostileModule(t *testing.T) {
	t.Parallel()
	loop := hosttest.LoopWasm(t)
	h := hosttest.Start(t, hosttest.ViaPlugin, func(c *settings.Config) { c.Policies = hosttest.Denylist(t) + "," + loop })
	for i := range 2 {
		began := time.Now()
		status, body := execStatus(h, map[string]any{"code": "1", "env_vars": map[string]string{"A": "1"}})
		if status != http.StatusForbidden || !strings.Contains(body, "policy loop") || !strings.Contains(body, "deadline") {
			t.Fatalf("call %d: %d %q, want 403 naming the loop module and its deadline", i, status, body)
		}
		if took := time.Since(began); took > 5*time.Second {
			t.Fatalf("call %d took %s; the module's deadline is 1s", i, took)
		}
		if got := hosttest.MainResult(t, h.Run(map[string]any{"code": "1+1"})); got != "2" {
			t.Fatalf("an execution without env vars after the hostile call: %q", got)
		}
	}
}

// A module that does not load is a start-up error naming the file.
func TestPolicyBrokenAtStart(t *testing.T) {
	t.Parallel()
	bad := filepath.Join(t.TempDir(), "broken.wasm")
	testkit.WriteFile(t, bad, "not wasm")
	// Only a bound against a hang: a start under CI's load (the transport,
	// then each module instantiated under -race) took over 30 s.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, err := server.Start(ctx, settings.Config{
		Addr: "127.0.0.1:0", DefaultCwd: t.TempDir(), Policies: hosttest.Denylist(t) + "," + bad,
		PolicyOptions: hosttest.PolicyOptions(),
		Logger:        slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err == nil || !strings.Contains(err.Error(), bad) {
		t.Fatalf("error %v, want one naming %s", err, bad)
	}
	for _, missing := range []string{"@" + filepath.Join(t.TempDir(), "nolist"), filepath.Join(t.TempDir(), "nofile.wasm")} {
		_, err = server.Start(ctx, settings.Config{
			Addr: "127.0.0.1:0", DefaultCwd: t.TempDir(), Policies: missing,
			PolicyOptions: hosttest.PolicyOptions(),
			Logger:        slog.New(slog.NewTextHandler(io.Discard, nil)),
		})
		if name := strings.TrimPrefix(missing, "@"); err == nil || !strings.Contains(err.Error(), name) {
			t.Fatalf("error %v, want one naming %s", err, name)
		}
	}
}

// ReloadPolicies (SIGHUP in the binary) picks up a changed config and a
// changed module list; a failed reload keeps the policies in use.
func TestPolicyReload(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	mod := copyModule(t, hosttest.Denylist(t), dir, "denylist.wasm")
	list := filepath.Join(dir, "policies.list")
	testkit.WriteFile(t, list, "# nothing yet\n")
	h := hosttest.Start(t, hosttest.ViaPlugin, func(c *settings.Config) { c.Policies = "@" + list })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	reload := func(want ...string) {
		t.Helper()
		mods, err := h.ReloadPolicies(ctx)
		if err != nil || strings.Join(mods, ",") != strings.Join(want, ",") {
			t.Fatalf("reload: %v %v, want modules %v", mods, err, want)
		}
	}
	preload := map[string]any{"code": "1", "env_vars": map[string]string{"LD_PRELOAD": "x"}}
	if status, body := execStatus(h, preload); status != 200 {
		t.Fatalf("with an empty list: %d %q", status, body)
	}

	testkit.WriteFile(t, list, "denylist.wasm # relative to the list file\n")
	reload("denylist")
	if status, body := execStatus(h, preload); status != http.StatusForbidden {
		t.Fatalf("after adding denylist: %d %q, want 403", status, body)
	}

	// a changed config, same list: reloaded in place
	testkit.WriteFile(t, filepath.Join(dir, "denylist.config"), `{"deny":["SECRET"],"deny_prefixes":[]}`)
	reload("denylist")
	if status, body := execStatus(h, preload); status != 200 {
		t.Fatalf("after the config allowed LD_PRELOAD: %d %q", status, body)
	}
	if status, body := execStatus(h, map[string]any{"code": "1", "env_vars": map[string]string{"SECRET": "x"}}); status != http.StatusForbidden || !strings.Contains(body, "SECRET") {
		t.Fatalf("SECRET after the config change: %d %q, want 403", status, body)
	}

	// a broken config or module: the error names it, the old set serves on
	testkit.WriteFile(t, filepath.Join(dir, "denylist.config"), `{"deny":`)
	if status, body := execStatus(h, map[string]any{"code": "1", "env_vars": map[string]string{"SECRET": "x"}}); status != http.StatusForbidden {
		t.Fatalf("before reloading a bad config: %d %q", status, body)
	}
	bad := filepath.Join(dir, "broken.wasm")
	testkit.WriteFile(t, bad, "not wasm")
	testkit.WriteFile(t, list, mod+"\n"+bad+"\n")
	if _, err := h.ReloadPolicies(ctx); err == nil || !strings.Contains(err.Error(), bad) {
		t.Fatalf("reload with a broken module: %v, want an error naming %s", err, bad)
	}
	if status, body := execStatus(h, map[string]any{"code": "1", "env_vars": map[string]string{"SECRET": "x"}}); status != http.StatusForbidden || !strings.Contains(body, "SECRET") {
		t.Fatalf("after a failed reload: %d %q, want the old set's 403", status, body)
	}
	if got := hosttest.MainResult(t, h.Run(map[string]any{"code": "1+1"})); got != "2" {
		t.Fatalf("after a failed reload: %q", got)
	}
	testkit.WriteFile(t, list, "")
	reload()
	if status, body := execStatus(h, preload); status != 200 {
		t.Fatalf("after emptying the list: %d %q", status, body)
	}
}
