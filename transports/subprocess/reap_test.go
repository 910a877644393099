package subprocess

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kernelhost/kernelhost/core/engine"
	"github.com/kernelhost/kernelhost/internal/testkit"
	"github.com/kernelhost/kernelhost/transports/subprocess/internal/cgroup"
)

// Children that left the interpreter's process group and session must end
// with their context, on delete, restart and shutdown, on each way this
// machine offers: a cgroup per interpreter (where cgroup v2 is writable
// here) and the process tree (always).
func TestDescendantsEndWithTheirContext(t *testing.T) {
	t.Parallel()
	spawn := map[string]string{
		// Each prints the pids of what it started, one per line.
		"python": "import subprocess, sys\n" +
			"p = subprocess.Popen(['sleep', '300'], start_new_session=True)\n" +
			"print(p.pid, flush=True)",
		"bash": "setsid sleep 300 & echo $!\n" +
			// a daemon whose parent exited: only a cgroup keeps track of it
			"(setsid sleep 301 & echo $!) ",
		"javascript": "const { spawn } = require('child_process');\n" +
			"const c = spawn('sleep', ['300'], { detached: true, stdio: 'ignore' }); c.unref();\n" +
			"console.log(c.pid)",
	}
	modes := []struct {
		name      string
		noCgroups bool
	}{{"cgroup", false}, {"tree", true}}
	for _, mode := range modes {
		t.Run(mode.name, func(t *testing.T) {
			if !mode.noCgroups && cgroup.Base() == "" {
				t.Skip("no writable cgroup v2 with cgroup.kill on this machine: the tree path is what runs here")
			}
			for _, lang := range []string{"python", "bash", "javascript"} {
				if lang == "javascript" {
					if _, err := exec.LookPath("node"); err != nil {
						continue
					}
				}
				for _, op := range []string{"delete", "restart", "shutdown"} {
					t.Run(lang+"/"+op, func(t *testing.T) {
						t.Parallel()
						e, err := engine.NewEngine(engine.Config{Transport: New(Options{NoCgroups: mode.noCgroups}), DefaultCwd: t.TempDir()})
						if err != nil {
							t.Fatal(err)
						}
						closed := false
						t.Cleanup(func() {
							if !closed {
								_ = e.Close(context.Background())
							}
						})
						ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
						defer cancel()
						c, err := e.CreateContext(ctx, lang, "")
						if err != nil {
							t.Fatal(err)
						}
						ns := runStdout(t, ctx, e, c.ID, testkit.PidNSProbe(lang))
						x, err := e.Execute(ctx, engine.ExecRequest{ContextID: c.ID, Code: spawn[lang]})
						if err != nil {
							t.Fatal(err)
						}
						var outs []engine.Output
						for err == nil {
							outs, err = x.Next(ctx, outs)
						}
						var text strings.Builder
						for _, o := range outs {
							if o.Type == engine.OutStdout {
								text.WriteString(o.Text)
							}
							if o.Type == engine.OutError {
								t.Fatalf("%s: %s", o.ErrName, o.ErrValue)
							}
						}
						var pids []int
						for _, f := range strings.Fields(text.String()) {
							pid, err := strconv.Atoi(f)
							if err != nil {
								t.Fatalf("stdout %q", text.String())
							}
							pids = append(pids, testkit.HostPidIn(t, ns, pid))
						}
						all := pids
						if mode.noCgroups && lang == "bash" {
							pids = pids[:1] // the orphaned daemon is the plugin's (subreaper) to end, at its exit
						}
						for _, pid := range pids {
							if !testkit.Alive(pid) {
								t.Fatalf("child %d is not running before the %s", pid, op)
							}
						}
						t.Cleanup(func() {
							for _, pid := range all {
								if testkit.Alive(pid) {
									_ = syscallKill(pid)
								}
							}
						})
						switch op {
						case "delete":
							err = e.Delete(ctx, c.ID)
						case "restart":
							err = e.Restart(ctx, c.ID)
						default:
							closed = true
							err = e.Close(ctx)
						}
						if err != nil {
							t.Fatal(err)
						}
						testkit.AwaitGone(t, fmt.Sprintf("descendants after %s (%s)", op, mode.name), 10*time.Second, pids...)
					})
				}
			}
		})
	}
}

// runStdout runs code in context id and returns its stdout.
func runStdout(t *testing.T, ctx context.Context, e *engine.Engine, id, code string) string {
	t.Helper()
	x, err := e.Execute(ctx, engine.ExecRequest{ContextID: id, Code: code})
	if err != nil {
		t.Fatal(err)
	}
	var outs []engine.Output
	for err == nil {
		outs, err = x.Next(ctx, outs)
	}
	var text strings.Builder
	for _, o := range outs {
		if o.Type == engine.OutStdout {
			text.WriteString(o.Text)
		}
		if o.Type == engine.OutError {
			t.Fatalf("%s: %s", o.ErrName, o.ErrValue)
		}
	}
	return text.String()
}

func syscallKill(pid int) error { p, _ := os.FindProcess(pid); return p.Kill() }
