package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kernelhost/kernelhost/internal/testkit"
)

// make install into a staging directory, then the installed binary as an
// operator runs it: it finds its plugins in PREFIX/lib/kernelhost/plugins,
// deploy/start-sandbox.sh starts it with a config file and waits for
// /health, it runs code over HTTP with the installed example policy, and the
// script reports a bad config with the log's tail. make builds into the
// checkout's bin/, as make install always does.
func TestInstall(t *testing.T) {
	t.Parallel()
	if watErr != nil {
		testkit.Missing(t, watErr) // make policies needs wat2wasm
	}
	if _, err := exec.LookPath("make"); err != nil {
		testkit.Missing(t, err)
	}
	root := testkit.Root()
	stage := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	mk := exec.CommandContext(ctx, "make", "--no-print-directory", "-C", root, "install", "DESTDIR="+stage, "PREFIX=/opt/kh")
	mk.Env = hostEnv()
	if out, err := mk.CombinedOutput(); err != nil {
		t.Fatalf("make install: %v\n%s", err, out)
	}
	prefix := filepath.Join(stage, "opt", "kh")
	exe := filepath.Join(prefix, "bin", "kernelhost")
	for _, f := range []string{
		"lib/kernelhost/plugins/kernelhost-transport-subprocess",
		"lib/kernelhost/plugins/kernelhost-transport-jupyter",
		"share/kernelhost/policies/denylist.wasm",
		"share/kernelhost/policies/reserved.wasm",
	} {
		if _, err := os.Stat(filepath.Join(prefix, f)); err != nil {
			t.Errorf("not installed: %v", err)
		}
	}

	t.Run("version is stamped", func(t *testing.T) {
		status, stdout, stderr := run(t, exe, "", hostEnv(), "version")
		if status != 0 || strings.HasPrefix(stdout, "kernelhost dev\n") || strings.Contains(stdout, "commit unknown") {
			t.Fatalf("make build did not stamp the version: %d %q %q", status, stdout, stderr)
		}
	})

	// The runtime's default GODEBUG that make compiles into the host is
	// testkit's (the tests build the host with it), and replaces none of the
	// go command's own: a go.mod whose go line falls behind the toolchain
	// gets a default of compatibility settings, which the Makefile's would
	// then drop. The transport plugins have it too (the Makefile says why).
	t.Run("the runtime's default GODEBUG is compiled into the host", func(t *testing.T) {
		plugins := filepath.Join(prefix, "lib/kernelhost/plugins")
		for bin, want := range map[string]bool{
			exe: true,
			filepath.Join(plugins, "kernelhost-transport-jupyter"):    true,
			filepath.Join(plugins, "kernelhost-transport-subprocess"): true,
		} {
			out, err := exec.Command("go", "version", "-m", bin).CombinedOutput()
			if err != nil {
				t.Fatalf("go version -m %s: %v\n%s", bin, err, out)
			}
			if linked := strings.Contains(string(out), testkit.RuntimeLDFlags); linked != want {
				t.Errorf("%s linked with %s: %v, want %v:\n%s", bin, testkit.RuntimeLDFlags, linked, want, out)
			}
			if strings.Contains(string(out), "DefaultGODEBUG=") {
				t.Errorf("the go command gives %s a default GODEBUG of its own, which the Makefile's RUNTIME_LDFLAGS would replace: put both in it:\n%s", bin, out)
			}
		}
	})

	t.Run("plugins list finds the installed plugins", func(t *testing.T) {
		status, stdout, stderr := run(t, exe, "", hostEnv("KERNELHOST_JUPYTER_URL=http://"+testkit.FreeAddr(t)+"/"), "plugins", "list")
		want := "plugin directory: " + filepath.Join(prefix, "lib", "kernelhost", "plugins") + "\n"
		if status != 0 || !strings.HasPrefix(stdout, want) || !regexp.MustCompile(`(?m)^subprocess +subprocess +\S+ +\S*python\S* +ok$`).MatchString(stdout) {
			t.Fatalf("status %d, want 0 and output starting %q with subprocess ok:\n%s%s", status, want, stdout, stderr)
		}
		if strings.Contains(stdout, "example-bash") {
			t.Errorf("the example plugin was installed:\n%s", stdout)
		}
	})

	t.Run("start-sandbox.sh and one execution", func(t *testing.T) {
		dir := t.TempDir()
		addr := testkit.FreeAddr(t)
		config := writeFile(t, dir, "kernelhost.toml", `addr = "`+addr+`"
default-cwd = "`+dir+`"
policies = "`+filepath.Join(prefix, "share", "kernelhost", "policies", "denylist.wasm")+`"
log-format = "json"
`)
		pid := startSandbox(t, dir, exe, config, addr)
		t.Cleanup(func() { stopPID(t, pid, exe) })

		url := "http://" + addr
		if status, body := post(t, url, map[string]any{"code": "print(6*7)"}); status != 200 || !strings.Contains(body, `"text":"42\n"`) {
			t.Fatalf("execute: %d %q", status, body)
		}
		preload := map[string]any{"code": "1", "env_vars": map[string]string{"LD_PRELOAD": "x"}}
		if status, body := post(t, url, preload); status != 403 || !strings.Contains(body, "LD_PRELOAD") {
			t.Fatalf("the installed denylist policy did not refuse LD_PRELOAD: %d %q", status, body)
		}
	})

	t.Run("start-sandbox.sh reports a bad config", func(t *testing.T) {
		dir := t.TempDir()
		addr := testkit.FreeAddr(t)
		config := writeFile(t, dir, "kernelhost.toml", "addr = \""+addr+"\"\nqueue-dept = 8\n")
		_, stderr := runSandboxScript(t, dir, exe, config, addr, 1)
		for _, want := range []string{"exited with status 2", config + ":2: queue-dept: unknown setting"} {
			if !strings.Contains(stderr, want) {
				t.Errorf("script's stderr does not say %q:\n%s", want, stderr)
			}
		}
	})

	t.Run("systemd unit", func(t *testing.T) {
		analyze, err := exec.LookPath("systemd-analyze")
		if err != nil {
			testkit.Missing(t, fmt.Errorf("systemd-analyze (Debian: systemd) verifies the unit: %w", err))
		}
		unit, err := os.ReadFile(filepath.Join(root, "deploy", "kernelhost.service"))
		if err != nil {
			t.Fatal(err)
		}
		// The unit as installed with PREFIX=/opt/kh: its binary must exist.
		staged := strings.ReplaceAll(string(unit), "/usr/local/bin/kernelhost", exe)
		path := writeFile(t, t.TempDir(), "kernelhost.service", staged)
		if out, err := exec.Command(analyze, "verify", path).CombinedOutput(); err != nil || len(bytes.TrimSpace(out)) > 0 {
			t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
		}
	})
}

func writeFile(t *testing.T, dir, name, text string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// runSandboxScript runs deploy/start-sandbox.sh for the binary exe and
// config, and checks its exit status.
func runSandboxScript(t *testing.T, dir, exe, config, addr string, wantStatus int) (stdout, stderr string) {
	t.Helper()
	script := filepath.Join(testkit.Root(), "deploy", "start-sandbox.sh")
	// No KERNELHOST_* but the script's own: the config file is the settings.
	env := append(hostEnv(), "KERNELHOST_ADDR=", "KERNELHOST_LOG_FORMAT=")
	status, stdout, stderr := run(t, "/bin/sh", "", append(env,
		"KERNELHOST_BIN="+exe,
		"KERNELHOST_CONFIG="+config,
		"KERNELHOST_HEALTH_URL=http://"+addr+"/health",
		"KERNELHOST_LOG="+filepath.Join(dir, "kernelhost.log"),
		"KERNELHOST_PIDFILE="+filepath.Join(dir, "kernelhost.pid"),
		"KERNELHOST_START_TIMEOUT=90",
	), script)
	if status != wantStatus {
		log, _ := os.ReadFile(filepath.Join(dir, "kernelhost.log"))
		t.Fatalf("start-sandbox.sh: status %d, want %d\nstdout: %s\nstderr: %s\nlog:\n%s", status, wantStatus, stdout, stderr, log)
	}
	return stdout, stderr
}

// startSandbox runs the script until the host is healthy and returns the
// host's pid, from the script's pid file.
func startSandbox(t *testing.T, dir, exe, config, addr string) int {
	t.Helper()
	stdout, _ := runSandboxScript(t, dir, exe, config, addr, 0)
	if !strings.Contains(stdout, "healthy") {
		t.Fatalf("start-sandbox.sh: %q", stdout)
	}
	b, err := os.ReadFile(filepath.Join(dir, "kernelhost.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("pid file: %v", err)
	}
	return pid
}

// stopPID sends SIGTERM to a host the script started (not this process's
// child, so nothing to wait on) and polls until it is gone. The pid is only
// a number read from a file: it is signalled only while it is still exe's
// process, since pids wrap (32768 here) and a stranger, such as another
// package's interpreter, could have it by then.
func stopPID(t *testing.T, pid int, exe string) {
	t.Helper()
	if resolved, err := filepath.EvalSymlinks(exe); err == nil {
		exe = resolved // /proc/PID/exe names the file, not the link
	}
	ours := func() bool {
		running, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe")
		return err == nil && running == exe && testkit.Alive(pid)
	}
	if !ours() {
		t.Errorf("kernelhost (pid %d) was gone before the test stopped it", pid)
		return
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		t.Errorf("SIGTERM %d: %v", pid, err)
		return
	}
	deadline := time.Now().Add(40 * time.Second)
	for ours() {
		if time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			t.Errorf("kernelhost (pid %d) did not stop within 40 s of SIGTERM", pid)
			return
		}
		time.Sleep(20 * time.Millisecond) // not our child: nothing to wait on
	}
}
