package subprocess

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	tt "github.com/kernelhost/kernelhost/transports/transporttest"
)

// Issue 39, finding 3b: a context's cwd never makes a host directory
// writable. A cwd outside the writable set ("/etc", "/../../etc", a
// symlink to /etc in the workspace, a directory under the host's /tmp) is
// shown read-only: writing there fails with EROFS, from a cold start, a
// transport with a warm pool, one with a fork server, and after a restart;
// a cwd under the workspace stays writable.
func TestSandboxCwdOutsideTheWritableSetIsReadOnly(t *testing.T) {
	needSandbox(t)
	for _, kind := range []string{"cold", "pooled", "forked"} {
		t.Run(kind, func(t *testing.T) {
			ws := t.TempDir()
			var tr *Transport
			// inside starts the kernel in the workspace, checking it is
			// the kind of start the subtest is about.
			inside := func(start func() *Kernel) *Kernel { return start() }
			switch kind {
			case "cold":
				tr = New(Options{Sandbox: SandboxOptions{Mode: SandboxOn, Writable: []string{ws}}})
				t.Cleanup(func() { _ = tr.Close() })
			case "pooled":
				tr = New(Options{PoolSizes: map[string]int{"python": 1}, PoolCwd: ws, Sandbox: SandboxOptions{Mode: SandboxOn, Writable: []string{ws}}})
				t.Cleanup(func() { _ = tr.Close() })
				inside = func(start func() *Kernel) *Kernel {
					pooled := readyPid(t, tr, "python")
					k := start()
					if k.Pid() != pooled {
						t.Errorf("the kernel in the workspace runs pid %d, not the pooled %d", k.Pid(), pooled)
					}
					return k
				}
			case "forked":
				tr, ws = sandboxedForkTransport(t, []string{"json"})
				inside = func(start func() *Kernel) *Kernel {
					tmpl := readyTemplate(t, tr)
					k := start()
					mustBeForkedFrom(t, k, tmpl)
					return k
				}
			}
			checkCwdWalls(t, tr, ws, inside)
		})
	}
}

// checkCwdWalls starts a python kernel in each cwd on tr, whose writable
// set holds ws (in a directory under ws through inside), and writes a file
// there, before and after a restart.
func checkCwdWalls(t *testing.T, tr *Transport, ws string, inside func(start func() *Kernel) *Kernel) {
	t.Helper()
	link := filepath.Join(ws, "etc-link")
	if err := os.Symlink("/etc", link); err != nil {
		t.Fatal(err)
	}
	project := filepath.Join(ws, "project")
	outside := t.TempDir() // under the host's /tmp, not in the writable set
	for _, dir := range []string{project, filepath.Join(outside, "data")} {
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(outside, "data", "in.txt"), []byte("host data"), 0o644); err != nil {
		t.Fatal(err)
	}
	probe := "kh-cwd-probe-" + strconv.Itoa(os.Getpid())
	t.Cleanup(func() { os.Remove(filepath.Join("/etc", probe)) })
	cases := []struct{ cwd, real, want string }{
		{"/etc", "/etc", "EROFS"},
		{"/../../etc", "/etc", "EROFS"},
		{link, "/etc", "EROFS"},
		{filepath.Join(outside, "data"), filepath.Join(outside, "data"), "EROFS host data"},
		{project, project, "wrote"},
	}
	code := `import errno, os
try:
    with open(` + pythonLiteral(probe) + `, 'w') as f:
        f.write('x')
    r = 'wrote'
except OSError as e:
    r = errno.errorcode[e.errno]
if os.path.exists('in.txt'):
    r += ' ' + open('in.txt').read()
print(r, os.getcwd())`
	for _, c := range cases {
		start := func() *Kernel { return startIn(t, tr, "python", c.cwd) }
		var k *Kernel
		if c.cwd == project {
			k = inside(start)
		} else {
			k = start()
		}
		for _, when := range []string{"started", "restarted"} {
			if when == "restarted" {
				ctx, cancel := context.WithTimeout(context.Background(), tt.StartTimeout)
				err := k.Restart(ctx)
				cancel()
				if err != nil {
					t.Fatalf("restart in %s: %v", c.cwd, err)
				}
			}
			if got, want := stdoutOf(t, k, code), c.want+" "+c.real+"\n"; got != want {
				t.Errorf("cwd %s, %s: a write there prints %q, want %q", c.cwd, when, got, want)
			}
			if _, err := os.Stat(filepath.Join("/etc", probe)); err == nil {
				t.Fatalf("cwd %s, %s: the cell wrote into the host's /etc", c.cwd, when)
			}
			if c.want == "wrote" {
				if err := os.Remove(filepath.Join(c.real, probe)); err != nil {
					t.Errorf("cwd %s: the file written is not on the host: %v", c.cwd, err)
				}
			} else if _, err := os.Stat(filepath.Join(c.real, probe)); err == nil {
				t.Errorf("cwd %s: a file was written on the host", c.cwd)
			}
		}
		tt.ShutdownAndDrain(t, k)
	}
}
