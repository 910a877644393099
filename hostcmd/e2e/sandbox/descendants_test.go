package sandbox_test

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kernelhost/kernelhost/hostcmd/internal/hosttest"
	"github.com/kernelhost/kernelhost/hostcmd/settings"
	"github.com/kernelhost/kernelhost/internal/testkit"
	"github.com/kernelhost/kernelhost/transports/subprocess"
)

// Through the real plugin, on both ways it has: a bash cell starts a child
// in a session of its own (setsid … &) and a daemon whose parent exits at
// once ((setsid … &)). With a cgroup per interpreter, deleting the context
// ends both; with process trees only, deleting it ends the child, and the
// daemon, adopted by the plugin (a child subreaper), ends when the host
// shuts the plugin down. These are the ways without a sandbox (-sandbox=off);
// in one, both end with the context (TestDetachedChildrenEndWithTheirSandbox).
func TestDetachedChildrenEndWithTheirContext(t *testing.T) {
	t.Parallel()
	for _, mode := range []struct {
		name      string
		noCgroups bool
	}{{"cgroup", false}, {"subreaper", true}} {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel() // a host of its own; the pids it checks are its own
			if !mode.noCgroups && !subprocess.CgroupsAvailable() {
				t.Skip("no writable cgroup v2 with cgroup.kill here: the subreaper path is what runs on this machine")
			}
			h := hosttest.Start(t, hosttest.ViaPlugin, func(c *settings.Config) {
				c.SetTransportSetting("kernel-cgroups", strconv.FormatBool(!mode.noCgroups))
				c.SetTransportSetting("sandbox", "off")
			})
			ctx := h.CreateContext(`{"language":"bash"}`)
			lines := h.Run(map[string]any{"context_id": ctx.ID, "code": "setsid sleep 300 & echo $!\n(setsid sleep 301 & echo $!)\necho $PPID"})
			hosttest.NoError(t, lines)
			var pids []int
			for _, f := range strings.Fields(hosttest.Stdout(lines)) {
				pid, err := strconv.Atoi(f)
				if err != nil {
					t.Fatalf("stdout %q", hosttest.Stdout(lines))
				}
				pids = append(pids, pid)
			}
			if len(pids) != 3 {
				t.Fatalf("stdout %q", hosttest.Stdout(lines))
			}
			child, daemon, plugin := pids[0], pids[1], pids[2]
			t.Cleanup(func() {
				for _, pid := range []int{child, daemon} {
					if testkit.Alive(pid) {
						p, _ := os.FindProcess(pid)
						_ = p.Kill()
					}
				}
			})
			deadline := time.Now().Add(10 * time.Second)
			for { // the daemon's parent (the subshell) exits at once; awaited by polling /proc
				if _, ppid := testkit.ProcState(daemon); ppid == plugin || time.Now().After(deadline) {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			if _, ppid := testkit.ProcState(daemon); ppid != plugin {
				t.Fatalf("the daemon's parent is %d, want the plugin %d (a child subreaper)", ppid, plugin)
			}
			if status, body := h.Do("DELETE", "/contexts/"+ctx.ID, ""); status != 200 {
				t.Fatalf("delete: %d %s", status, body)
			}
			if !mode.noCgroups {
				testkit.AwaitGone(t, "after delete", 30*time.Second, child, daemon)
				return
			}
			testkit.AwaitGone(t, "after delete", 30*time.Second, child)
			sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := h.Shutdown(sctx); err != nil {
				t.Fatal(err)
			}
			testkit.AwaitGone(t, "after host shutdown", 30*time.Second, daemon)
		})
	}
}

// In a sandbox, with or without cgroups, a child in a session of its own and
// a double-forked daemon end when their context is deleted: they are in its
// PID namespace, which ends with it.
func TestDetachedChildrenEndWithTheirSandbox(t *testing.T) {
	t.Parallel()
	hosttest.NeedSandbox(t)
	for _, mode := range []struct {
		name      string
		noCgroups bool
	}{{"cgroup", false}, {"no-cgroup", true}} {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel() // a host of its own; the pids it checks are its own
			h := hosttest.Start(t, hosttest.ViaPlugin, func(c *settings.Config) {
				c.SetTransportSetting("kernel-cgroups", strconv.FormatBool(!mode.noCgroups))
				c.SetTransportSetting("sandbox", "on")
			})
			ctx := h.CreateContext(`{"language":"bash"}`)
			lines := h.Run(map[string]any{"context_id": ctx.ID, "code": "readlink /proc/self/ns/pid\nsetsid sleep 300 & echo $!\n(setsid sleep 301 & echo $!)"})
			hosttest.NoError(t, lines)
			f := strings.Fields(hosttest.Stdout(lines))
			if len(f) != 3 {
				t.Fatalf("stdout %q", hosttest.Stdout(lines))
			}
			var pids []int
			for _, s := range f[1:] {
				n, err := strconv.Atoi(s)
				if err != nil {
					t.Fatalf("stdout %q", hosttest.Stdout(lines))
				}
				pids = append(pids, testkit.HostPidIn(t, f[0], n))
			}
			t.Cleanup(func() {
				for _, pid := range pids {
					if testkit.Alive(pid) {
						p, _ := os.FindProcess(pid)
						_ = p.Kill()
					}
				}
			})
			if status, body := h.Do("DELETE", "/contexts/"+ctx.ID, ""); status != 200 {
				t.Fatalf("delete: %d %s", status, body)
			}
			testkit.AwaitGone(t, "after delete", 30*time.Second, pids...)
		})
	}
}
