package jupyterdeploy

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/kernelhost/kernelhost/internal/testkit"
)

// launch runs the python3 spec's sandbox launcher as a Jupyter Server would
// (this process its parent), in cwd, around sh -c script, with a connection
// file in runtime; extra goes before "--". It returns the output and error.
func launch(t *testing.T, cwd, runtime, script string, env []string, extra ...string) (string, error) {
	t.Helper()
	return launchAs(t, nil, cwd, runtime, script, env, extra...)
}

// launchAs is launch as the user cred (nil: this process's).
func launchAs(t *testing.T, cred *syscall.Credential, cwd, runtime, script string, env []string, extra ...string) (string, error) {
	t.Helper()
	conn := filepath.Join(runtime, "kernel-test.json")
	if err := os.WriteFile(conn, []byte(`{"key": "k"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if cred != nil {
		if err := os.Chown(conn, int(cred.Uid), int(cred.Gid)); err != nil {
			t.Fatal(err)
		}
	}
	launcher, err := filepath.Abs(filepath.Join("kernels", "python3", "sandbox.py"))
	if err != nil {
		t.Fatal(err)
	}
	args := append([]string{"-I", "-S", launcher, "--connection-file", conn}, extra...)
	cmd := exec.Command(testkit.DebianPython, append(args, "--", "/bin/sh", "-c", script)...)
	cmd.Dir = cwd
	cmd.Env = append(os.Environ(), env...)
	if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// A kernel's cwd is writable only inside the server's root_dir (its
// jpserver-<pid>.json beside the connection file): the server takes the cwd
// from the start request's path, which "../../etc" leads out of.
func TestSandboxCwdWritableOnlyUnderTheServerRoot(t *testing.T) {
	testkit.NeedCommand(t, "bwrap", "bubblewrap")
	base := t.TempDir()
	root, outside, runtime := filepath.Join(base, "root"), filepath.Join(base, "outside"), filepath.Join(base, "runtime")
	for _, d := range []string{filepath.Join(root, "sub"), outside, runtime} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	info := fmt.Sprintf(`{"pid": %d, "root_dir": %q, "token": "secret"}`, os.Getpid(), root)
	if err := os.WriteFile(filepath.Join(runtime, fmt.Sprintf("jpserver-%d.json", os.Getpid())), []byte(info), 0o600); err != nil {
		t.Fatal(err)
	}
	const write = `echo x > probe && echo wrote; ls "$0" 2>&1`
	for _, tc := range []struct {
		cwd, want string
	}{
		{filepath.Join(root, "sub"), "wrote"},
		{outside, "Read-only file system"},
	} {
		out, err := launch(t, tc.cwd, runtime, strings.Replace(write, "$0", runtime, 1), nil)
		if err != nil && tc.want == "wrote" || !strings.Contains(out, tc.want) {
			t.Errorf("in %s: %v: %q, want %q", tc.cwd, err, out, tc.want)
		}
		// The runtime dir shows the connection file only, not the server's.
		if strings.Contains(out, "jpserver") {
			t.Errorf("in %s, the server's jpserver-*.json is visible: %q", tc.cwd, out)
		}
	}
	if _, err := os.Stat(filepath.Join(outside, "probe")); err == nil {
		t.Error("the sandbox wrote in a cwd outside the server's root")
	}
}

// Bad input and a missing bwrap: the kernel does not start, and the
// launcher says why (the server's log shows it).
func TestSandboxLauncherErrors(t *testing.T) {
	runtime := t.TempDir()
	for _, tc := range []struct {
		name  string
		env   []string
		extra []string
		want  string
	}{
		{"NoBwrap", []string{"PATH=/nonexistent"}, nil, "bwrap is not installed, or only in a dir kernels can write (Debian: apt-get install bubblewrap); the kernel does not start unsandboxed"},
		{"RelativeWritable", nil, []string{"--writable", "work"}, `--writable 'work': want an absolute path`},
		{"UnknownOption", nil, []string{"--rw", "/x"}, `bad argument '--rw'`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := launch(t, runtime, runtime, "echo ran", tc.env, tc.extra...)
			if err == nil || strings.Contains(out, "ran") || !strings.Contains(out, "kernelhost kernel sandbox: "+tc.want) {
				t.Errorf("%v: %q, want an error saying %q", err, out, tc.want)
			}
		})
	}
}

// The walls hold for a server of root and of an unprivileged user (nobody,
// where this test runs as root): the sysctl write-back fails read-only,
// the sandbox shows its own processes only (the shell's children beside
// pids 1 and 2), no user namespace can be made, and the cwd is writable.
func TestSandboxWallsAsRootAndAsNobody(t *testing.T) {
	testkit.NeedCommand(t, "bwrap", "bubblewrap")
	users := map[string]*syscall.Credential{"self": nil}
	if os.Geteuid() == 0 {
		users["nobody"] = &syscall.Credential{Uid: 65534, Gid: 65534}
	}
	const script = `cat /proc/sys/kernel/core_pattern 2>&1 > /proc/sys/kernel/core_pattern | grep -o 'Read-only file system'
ls /proc | grep -cE '^[0-9]+$'
unshare -U true 2>/dev/null && echo userns || echo no-userns
echo x > probe && cat probe`
	for name, cred := range users {
		t.Run(name, func(t *testing.T) {
			// Not under t.TempDir(), whose 0700 dirs nobody cannot enter.
			dir, err := os.MkdirTemp("", "jupyter-sandbox-")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(dir) })
			root, runtime := filepath.Join(dir, "root"), filepath.Join(dir, "runtime")
			for _, d := range []string{dir, root, runtime} {
				if err := os.MkdirAll(d, 0o755); err != nil {
					t.Fatal(err)
				}
				if cred != nil {
					if err := os.Chown(d, int(cred.Uid), int(cred.Gid)); err != nil {
						t.Fatal(err)
					}
				}
			}
			var env []string
			if cred != nil {
				env = []string{"HOME=/nonexistent"} // nobody's
			}
			out, err := launchAs(t, cred, root, runtime, script, env)
			got := strings.Fields(strings.ReplaceAll(out, "Read-only file system", "read-only"))
			// Besides pids 1 and 2, the shell's ls and grep: a handful.
			if n, _ := strconv.Atoi(at(got, 1)); err != nil || len(got) != 4 || got[0] != "read-only" || n < 2 || n > 6 || got[2] != "no-userns" || got[3] != "x" {
				t.Errorf("%v: found %q: want the sysctl read-only, a handful of processes, no user namespace, the cwd writable", err, got)
			}
		})
	}
}

func at(s []string, i int) string {
	if i < len(s) {
		return s[i]
	}
	return ""
}

// The server's token variables and systemd's credentials directory do not
// reach the kernel; JPY_PARENT_PID is the sandbox's init, so ipykernel
// polls no parent it would take for dead.
func TestSandboxEnvironment(t *testing.T) {
	testkit.NeedCommand(t, "bwrap", "bubblewrap")
	dir := t.TempDir()
	env := []string{"JUPYTER_TOKEN=s1", "JPY_API_TOKEN=s2", "JUPYTERHUB_API_TOKEN=s3", "CREDENTIALS_DIRECTORY=/run/credentials/x", "JPY_PARENT_PID=4242", "KEPT=yes"}
	out, err := launch(t, dir, dir, "env", env)
	if err != nil {
		t.Fatalf("%v: %q", err, out)
	}
	vars := strings.Split(out, "\n")
	for _, v := range []string{"JUPYTER_TOKEN=", "JPY_API_TOKEN=", "JUPYTERHUB_API_TOKEN=", "CREDENTIALS_DIRECTORY="} {
		if slices.ContainsFunc(vars, func(kv string) bool { return strings.HasPrefix(kv, v) }) {
			t.Errorf("%s... reached the kernel", v)
		}
	}
	for _, kv := range []string{"JPY_PARENT_PID=1", "KEPT=yes"} {
		if !slices.Contains(vars, kv) {
			t.Errorf("%s is not in the kernel's environment: %q", kv, out)
		}
	}
}
