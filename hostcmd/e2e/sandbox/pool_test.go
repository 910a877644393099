package sandbox_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kernelhost/kernelhost/hostcmd/internal/hosttest"
	"github.com/kernelhost/kernelhost/hostcmd/settings"
	"github.com/kernelhost/kernelhost/internal/testkit"
)

// Through the real plugin with its default pools: /metrics reports the
// pooled python and javascript interpreters and their memory; a new context
// takes the pooled one; shutting the host down ends every interpreter the
// plugin started, pooled ones included.
func TestPoolThroughPlugin(t *testing.T) {
	t.Parallel()
	needNode(t)
	// The pool, not the fork template: ViaPlugin hosts have none (with one, a
	// python context comes from it once it is ready: TestForkContextSandboxedViaPlugin).
	h := hosttest.Start(t, hosttest.ViaPlugin)
	for _, lang := range []string{"python", "javascript"} {
		if rss := awaitPool(h, t, lang); rss < 1<<20 {
			t.Errorf("%s pool rss %v bytes, want an interpreter's", lang, rss)
		}
	}
	before := hosttest.Descendants(h.PluginPID())
	c := h.CreateContext(`{"language": "python"}`)
	pid := hosttest.PidOf(t, h, c.ID)
	if _, pooled := before[pid]; !pooled {
		t.Errorf("the new context runs pid %d, which was not running before it was created (pooled: %v)", pid, before)
	}
	all := hosttest.Descendants(h.PluginPID())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := h.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	pids := make([]int, 0, len(all))
	for p := range all {
		pids = append(pids, p)
	}
	testkit.AwaitGone(t, "the host's shutdown", 30*time.Second, pids...)
}

func needNode(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("node"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("node is not installed (Debian nodejs; make deps installs it)")
		}
		t.Skip("node is not installed")
	}
}

// awaitPool waits (bounded) until /metrics shows a ready lang interpreter
// in the pool of the default size 1, and returns the pool's memory.
func awaitPool(h *hosttest.Host, t *testing.T, lang string) (rss float64) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		s := hosttest.Metrics(t, h, nil)
		if m := s.Metric("kernelhost_pool_interpreters", "language", lang); m != nil && m.GetGauge().GetValue() == 1 {
			if size := s.Value(t, "kernelhost_pool_size", "language", lang); size != 1 {
				t.Fatalf("%s pool size %v, want the default 1", lang, size)
			}
			return s.Value(t, "kernelhost_pool_rss_bytes", "language", lang)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no ready %s interpreter in the pool's gauges after 60 s", lang)
		}
		time.Sleep(20 * time.Millisecond) // nothing to wait on over HTTP but the next scrape
	}
}

// The user's path (the SDK's createCodeContext({cwd}), through the real
// plugin with its default pools): a python or javascript context created in
// a directory of its own takes the pooled interpreter, and everything
// testkit.CwdProbe prints is what the same context prints on a host without pools.
// The python fork server is off here: with it, new python contexts are
// forks of its template instead (fork_test.go and transports/subprocess's
// fork tests check those, cwd included).
func TestPooledContextInItsOwnCwdThroughPlugin(t *testing.T) {
	t.Parallel()
	needNode(t)
	// The contexts' directories are in a workspace every sandbox may write,
	// where a pooled interpreter may be moved.
	workspace := t.TempDir()
	writable := func(c *settings.Config) {
		c.SetTransportSetting("sandbox-writable", workspace)
	}
	pooled := hosttest.Start(t, hosttest.ViaPlugin, writable)
	cold := hosttest.Start(t, hosttest.ViaPlugin, writable, func(c *settings.Config) { c.SetTransportSetting("interpreter-pool", "python=0,javascript=0") })
	for _, lang := range []string{"python", "javascript"} {
		t.Run(lang, func(t *testing.T) {
			dir := filepath.Join(workspace, lang)
			for name, text := range map[string]string{
				"data.txt":                        "data of " + dir,
				"khmod.py":                        "V = 'py-module'\n",
				"khmod.js":                        "module.exports = 'cjs-module';\n",
				"khesm.mjs":                       "export const v = 'es-module';\n",
				"node_modules/khpkg/package.json": `{"name": "khpkg", "main": "index.js"}`,
				"node_modules/khpkg/index.js":     "module.exports = 'package';\n",
			} {
				path := filepath.Join(dir, name)
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			body := fmt.Sprintf(`{"language": %q, "cwd": %q}`, lang, dir)
			awaitPool(pooled, t, lang)
			before := hosttest.Descendants(pooled.PluginPID())
			pc := pooled.CreateContext(body)
			pid := testkit.HostPidOfProbe(t, hosttest.Stdout(pooled.Run(map[string]any{"code": testkit.SelfPidProbe(lang), "context_id": pc.ID})))
			if _, ok := before[pid]; !ok {
				t.Errorf("the context runs pid %d, which was not running before it was created (pooled: %v)", pid, before)
			}
			cc := cold.CreateContext(body)
			if pc.Cwd != dir || cc.Cwd != dir {
				t.Errorf("contexts' cwd %q (pooled), %q (cold), want %q", pc.Cwd, cc.Cwd, dir)
			}
			if err := os.WriteFile(filepath.Join(dir, "khlate.py"), []byte("V = 'late'\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			probe := func(h *hosttest.Host, id string) string {
				t.Helper()
				lines := h.Run(map[string]any{"code": testkit.CwdProbe(lang), "context_id": id})
				hosttest.NoError(t, lines)
				return hosttest.Stdout(lines)
			}
			want := probe(cold, cc.ID)
			if got := probe(pooled, pc.ID); got != want {
				t.Errorf("the pooled context prints\n%s\nthe cold one\n%s", got, want)
			}
			if !strings.HasPrefix(want, dir+"\ndata of "+dir+"\n"+dir+"\n") {
				t.Errorf("the probe prints\n%s", want)
			}
		})
	}
}
