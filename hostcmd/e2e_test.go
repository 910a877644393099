package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kernelhost/kernelhost/internal/testkit"
	"github.com/kernelhost/kernelhost/transports/subprocess"
)

// The real kernelhost binary with the plugins next to it in plugins/, as
// `make build plugins` lays them out in bin/, and the example policy module.
var (
	kernelhost string
	denylist   string
	// WAT modules: reserved.wasm (the example) and trap.wasm (a module that
	// fails at evaluation); watErr says why they were not built.
	reserved, trapping string
	watErr             error
)

func TestMain(m *testing.M) {
	testkit.Main(m, func(dir string) error {
		kernelhost = filepath.Join(dir, "bin", "kernelhost")
		denylist = filepath.Join(dir, "denylist.wasm")
		reserved = filepath.Join(dir, "reserved.wasm")
		trapping = filepath.Join(dir, "trap.wasm")
		if watErr = testkit.Wat("plugins/policy/examples/reserved/reserved.wat", reserved); watErr == nil {
			watErr = testkit.Wat("plugins/policy/testdata/trap.wat", trapping)
		}
		for what, build := range map[string]func() error{
			"kernelhost":    func() error { return testkit.Kernelhost(kernelhost) },
			"plugins":       func() error { return testkit.PluginsIn(filepath.Join(dir, "bin", "plugins")) },
			"denylist.wasm": func() error { return testkit.Denylist(denylist) },
		} {
			if err := build(); err != nil {
				return fmt.Errorf("build %s: %w", what, err)
			}
		}
		return nil
	})
}

// proc is a running kernelhost binary whose JSON log lines the test reads.
type proc struct {
	t    *testing.T
	cmd  *exec.Cmd
	logs chan map[string]any
	done chan struct{} // closed when the process exited and its log is read
	err  error         // Wait's result, set before done closes

	mu  sync.Mutex
	raw strings.Builder
}

// hostEnv is the test's environment without KERNELHOST_* settings, plus vars.
func hostEnv(vars ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "KERNELHOST_") {
			env = append(env, kv)
		}
	}
	// The sandbox API on a free port too: its default, 49983, is one port
	// for every host of the machine.
	return append(env, append([]string{"KERNELHOST_ADDR=127.0.0.1:0", "KERNELHOST_SANDBOX_API_ADDR=127.0.0.1:0", "KERNELHOST_LOG_FORMAT=json"}, vars...)...)
}

func startBinary(t *testing.T, vars ...string) *proc {
	t.Helper()
	return startServe(t, "", nil, vars...)
}

// startServe runs `kernelhost serve args...` in dir ("": the test's) with the
// settings vars.
func startServe(t *testing.T, dir string, args []string, vars ...string) *proc {
	t.Helper()
	return startServeAs(t, nil, dir, args, vars...)
}

// startServeAs is startServe as the user of cred (nil: the test's).
func startServeAs(t *testing.T, cred *syscall.Credential, dir string, args []string, vars ...string) *proc {
	t.Helper()
	p := &proc{t: t, cmd: exec.Command(kernelhost, append([]string{"serve"}, args...)...), logs: make(chan map[string]any, 1000), done: make(chan struct{})}
	p.cmd.Dir = dir
	if cred != nil {
		// Contexts without outbound network (none, unless vars say
		// otherwise): an unprivileged host's pasta opens /dev/net/tun as
		// that user, which a container may keep root's (these tests are
		// not about the network; transports/subprocess/network_test.go is).
		vars = append([]string{"KERNELHOST_CONTEXT_NETWORK=none"}, vars...)
	}
	p.cmd.Env = hostEnv(vars...)
	if cred != nil {
		p.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			p.mu.Lock()
			p.raw.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
			var rec map[string]any
			if json.Unmarshal(sc.Bytes(), &rec) == nil {
				select {
				case p.logs <- rec:
				default: // nobody waits for that many lines
				}
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			t.Logf("kernelhost log:\n%s", p.log())
		}
	})
	return p
}

func (p *proc) log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.raw.String()
}

// waitLog returns the next log record whose msg is msg.
func (p *proc) waitLog(msg string) map[string]any {
	p.t.Helper()
	timeout := time.After(90 * time.Second)
	for {
		select {
		case rec := <-p.logs:
			if rec["msg"] == msg {
				return rec
			}
		case <-p.done:
			p.t.Fatalf("kernelhost exited (%v) before logging %q", p.err, msg)
		case <-timeout:
			p.t.Fatalf("kernelhost did not log %q in time", msg)
		}
	}
}

// wait waits for the process to exit and returns its exit code.
func (p *proc) wait() int {
	p.t.Helper()
	select {
	case <-p.done:
	case <-time.After(60 * time.Second):
		p.t.Fatal("kernelhost did not exit in time")
	}
	if p.err == nil {
		return 0
	}
	if ee, ok := p.err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	p.t.Fatalf("wait: %v", p.err)
	return -1
}

func post(t *testing.T, url string, req map[string]any) (int, string) {
	t.Helper()
	b, _ := json.Marshal(req)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, _ := http.NewRequestWithContext(ctx, "POST", url+"/execute", strings.NewReader(string(b)))
	r.Header.Set("Content-Type", "application/json")
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Do(r)
	if err != nil {
		t.Fatalf("POST /execute: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

// The binary as an operator runs it: plugins found next to the executable,
// policies from a list file reloaded by SIGHUP, SIGTERM stops everything.
func TestBinary(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	list := filepath.Join(dir, "policies.list")
	if err := os.WriteFile(list, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	p := startBinary(t, "KERNELHOST_DEFAULT_CWD="+dir, "KERNELHOST_POLICIES=@"+list)
	started := p.waitLog("transport plugin started")
	pluginPID := int(started["pid"].(float64))
	url := "http://" + p.waitLog("listening")["addr"].(string)
	p.waitLog("ready")

	status, body := post(t, url, map[string]any{"code": testkit.SelfPidProbe("python")})
	var ns string
	var nsPID int
	if _, err := fmt.Sscanf(body[strings.Index(body, `"text":"`)+8:], "%s %d", &ns, &nsPID); status != 200 || err != nil {
		t.Fatalf("getpid: %d %q %v", status, body, err)
	}
	pyPID := testkit.HostPidIn(t, ns, nsPID)
	preload := map[string]any{"code": "1", "env_vars": map[string]string{"LD_PRELOAD": "x"}}
	if status, body := post(t, url, preload); status != 200 {
		t.Fatalf("no policy yet: %d %q", status, body)
	}

	if err := os.WriteFile(list, []byte(denylist+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	if rec := p.waitLog("policies reloaded"); fmt.Sprint(rec["modules"]) != "[denylist]" {
		t.Fatalf("reloaded modules %v", rec["modules"])
	}
	if status, body := post(t, url, preload); status != http.StatusForbidden || !strings.Contains(body, "LD_PRELOAD") {
		t.Fatalf("after SIGHUP: %d %q, want 403 naming LD_PRELOAD", status, body)
	}

	bad := filepath.Join(dir, "bad.wasm")
	if err := os.WriteFile(bad, []byte("junk"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(list, []byte(bad+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	if rec := p.waitLog("policy reload failed; the previous policies stay in use"); !strings.Contains(fmt.Sprint(rec["err"]), bad) {
		t.Fatalf("reload failure %v does not name %s", rec["err"], bad)
	}
	if status, _ := post(t, url, preload); status != http.StatusForbidden {
		t.Fatalf("after a failed reload: %d, want the old policy's 403", status)
	}

	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(); code != 0 {
		t.Fatalf("exit code %d after SIGTERM", code)
	}
	if testkit.Alive(pluginPID) {
		t.Fatalf("the plugin (pid %d) outlived the host", pluginPID)
	}
	testkit.AwaitGone(t, "the python interpreter after the host stopped", 30*time.Second, pyPID)
}

// Under systemd (NOTIFY_SOCKET set, as for a Type=notify unit) the host
// sends READY=1 once /health answers 200 and STOPPING=1 when it begins to
// shut down, and the socket's name reaches neither the plugin nor the code.
func TestSystemdNotify(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	sock := filepath.Join(dir, "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	next := func() string {
		t.Helper()
		conn.SetReadDeadline(time.Now().Add(90 * time.Second))
		buf := make([]byte, 4096)
		n, err := conn.Read(buf)
		if err != nil {
			t.Fatalf("no notification: %v", err)
		}
		return string(buf[:n])
	}

	p := startBinary(t, "NOTIFY_SOCKET="+sock, "KERNELHOST_DEFAULT_CWD="+dir)
	ready := next()
	pluginPID := int(p.waitLog("transport plugin started")["pid"].(float64))
	url := "http://" + p.waitLog("listening")["addr"].(string)
	if want := "READY=1\nSTATUS=serving the API on " + strings.TrimPrefix(url, "http://"); ready != want {
		t.Fatalf("first notification %q, want %q", ready, want)
	}
	resp, err := http.Get(url + "/health")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET /health after READY=1: %d, want 200", resp.StatusCode)
	}

	status, body := post(t, url, map[string]any{"code": "import os; print(repr(os.environ.get('NOTIFY_SOCKET')))"})
	if status != 200 || !strings.Contains(body, `"text":"None\n"`) {
		t.Errorf("the code sees NOTIFY_SOCKET: %d %q", status, body)
	}
	environ, err := os.ReadFile("/proc/" + strconv.Itoa(pluginPID) + "/environ")
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(environ, []byte("NOTIFY_SOCKET=")) {
		t.Error("the transport plugin inherited NOTIFY_SOCKET")
	}

	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if got := next(); got != "STOPPING=1\nSTATUS=shutting down" {
		t.Fatalf("notification after SIGTERM %q, want STOPPING=1", got)
	}
	if code := p.wait(); code != 0 {
		t.Fatalf("exit code %d after SIGTERM", code)
	}
}

// SIGTERM while the default contexts are still starting is a stop that was
// asked for: exit status 0, a log line that says so, and nothing left
// running. (The "python" here never gets ready: it only sleeps.)
func TestBinarySignalDuringStartUp(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	python := filepath.Join(dir, "slow-python")
	if err := os.WriteFile(python, []byte("#!/bin/sh\nsleep 600\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	p := startBinary(t, "KERNELHOST_DEFAULT_CWD="+dir, "KERNELHOST_PYTHON="+python)
	p.waitLog("listening")
	// The interpreter is running once its process exists: wait for it.
	var sleeper int
	for deadline := time.Now().Add(60 * time.Second); sleeper == 0; {
		if time.Now().After(deadline) {
			t.Fatal("the slow python never started")
		}
		sleeper = findProcess(t, python)
		if sleeper == 0 {
			time.Sleep(10 * time.Millisecond) // a grandchild: nothing to wait on
		}
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(); code != 0 {
		t.Fatalf("exit code %d after SIGTERM during start-up, want 0\n%s", code, p.log())
	}
	if !strings.Contains(p.log(), "stopped during start-up") || strings.Contains(p.log(), `"level":"ERROR"`) {
		t.Errorf("log after SIGTERM during start-up:\n%s", p.log())
	}
	testkit.AwaitGone(t, "the starting interpreter after the host stopped", 30*time.Second, sleeper)
}

// findProcess is the pid of a live process whose command line contains
// arg, or 0.
func findProcess(t *testing.T, arg string) int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && bytes.Contains(cmdline, []byte(arg)) && testkit.Alive(pid) {
			return pid
		}
	}
	return 0
}

// Start-up failures exit 1 with a message that says what to do.
func TestBinaryStartFailures(t *testing.T) {
	t.Parallel()
	empty := t.TempDir()
	bad := filepath.Join(t.TempDir(), "bad.wasm")
	if err := os.WriteFile(bad, []byte("junk"), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		vars []string
		code int
		want []string
	}{
		"missing plugin":    {[]string{"KERNELHOST_PLUGIN_DIR=" + empty}, 1, []string{filepath.Join(empty, "kernelhost-transport-subprocess"), "make plugins"}},
		"unknown transport": {[]string{"KERNELHOST_TRANSPORT=nosuch"}, 1, []string{"kernelhost-transport-nosuch", "make plugins"}},
		"transport path":    {[]string{"KERNELHOST_TRANSPORT=../x"}, 2, []string{"not a path"}},
		"broken policy":     {[]string{"KERNELHOST_POLICIES=" + bad}, 1, []string{bad}},
	} {
		t.Run(name, func(t *testing.T) {
			p := startBinary(t, append([]string{"KERNELHOST_DEFAULT_CWD=" + empty}, tc.vars...)...)
			if code := p.wait(); code != tc.code {
				t.Fatalf("exit code %d, want %d\n%s", code, tc.code, p.log())
			}
			for _, w := range tc.want {
				if !strings.Contains(p.log(), w) {
					t.Errorf("log does not mention %q:\n%s", w, p.log())
				}
			}
		})
	}
}

// A token given in the environment is not in the host's /proc/<pid>/environ
// (which even a process the host started could read, where it is not
// sandboxed), and still admits requests; one given in a file works alike.
func TestBinaryTokenNotInEnviron(t *testing.T) {
	t.Parallel()
	t.Run("root", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "jupyter-token")
		if err := os.WriteFile(file, []byte("jupyter-file-secret-24\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		tokenNotInEnviron(t, startBinary(t, "KERNELHOST_ACCESS_TOKEN="+envToken, "KERNELHOST_JUPYTER_TOKEN_FILE="+file))
	})
	t.Run("unprivileged", func(t *testing.T) {
		home := nobodyHome(t)
		tokenNotInEnviron(t, startServeAs(t, nobody, home, nil,
			"HOME="+home, "KERNELHOST_DEFAULT_CWD="+home, "KERNELHOST_ACCESS_TOKEN="+envToken))
	})
}

// nobody is the unprivileged user tests run the host as.
var nobody = &syscall.Credential{Uid: 65534, Gid: 65534}

// nobodyHome skips the test unless it runs as root, and returns a home and
// default cwd of nobody's, with the binaries made reachable to nobody.
func nobodyHome(t *testing.T) string {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("runs the host as nobody, which needs root")
	}
	home, err := os.MkdirTemp("", "kernelhost-nobody-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(home) })
	for _, dir := range []string{home, filepath.Dir(filepath.Dir(kernelhost)), filepath.Dir(kernelhost), filepath.Join(filepath.Dir(kernelhost), "plugins")} {
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chown(home, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	return home
}

// Issue 39, as root and as an unprivileged user, through the binary and
// its plugin: a cell finds /proc/sys covered read-only (bwrap's own cover
// as nobody, the sandbox's as root) and cannot write a sysctl back; the
// host's config file and systemd's credentials directory, under the
// writable default cwd, read as nothing, and CREDENTIALS_DIRECTORY is not
// in its environment.
func TestBinarySandboxWalls(t *testing.T) {
	t.Parallel()
	const secret = "config-secret-39"
	for _, who := range []string{"root", "unprivileged"} {
		t.Run(who, func(t *testing.T) {
			t.Parallel()
			home, cred := t.TempDir(), (*syscall.Credential)(nil)
			if who == "unprivileged" {
				home, cred = nobodyHome(t), nobody
			}
			config, creds := filepath.Join(home, "kernelhost.toml"), filepath.Join(home, "credentials")
			if err := os.Mkdir(creds, 0o755); err != nil {
				t.Fatal(err)
			}
			for file, text := range map[string]string{config: "queue-depth = 8\n# " + secret + "\n", filepath.Join(creds, "token"): secret} {
				if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			p := startServeAs(t, cred, home, []string{"-config", config}, "HOME="+home, "KERNELHOST_DEFAULT_CWD="+home, "CREDENTIALS_DIRECTORY="+creds)
			url := "http://" + p.waitLog("listening")["addr"].(string)
			p.waitLog("ready")
			code := `cat ` + config + ` ` + creds + `/token 2>&1
env | grep CREDENTIALS_DIRECTORY
echo "procsys=$(awk '$5 == "/proc/sys" {print $6}' /proc/self/mountinfo)"
v=$(cat /proc/sys/kernel/core_pattern)
{ printf '%s\n' "$v" > /proc/sys/kernel/core_pattern; } 2>/dev/null && echo "core_pattern WRITTEN"
true`
			status, body := post(t, url, map[string]any{"language": "bash", "code": code})
			if status != 200 || strings.Contains(body, secret) || strings.Contains(body, "CREDENTIALS_DIRECTORY=") ||
				!strings.Contains(body, "procsys=ro") || strings.Contains(body, "WRITTEN") {
				t.Errorf("the config file, the credentials, /proc/sys's mount, a sysctl's write: %d %s", status, body)
			}
		})
	}
}

const envToken = "env-secret-token-24"

// tokenNotInEnviron checks a host started with envToken in its environment.
func tokenNotInEnviron(t *testing.T, p *proc) {
	t.Helper()
	const token = envToken
	url := "http://" + p.waitLog("listening")["addr"].(string)
	p.waitLog("ready")
	environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", p.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(environ, []byte(token)) || !bytes.Contains(environ, []byte("KERNELHOST_ACCESS_TOKEN=")) {
		t.Fatalf("the host's environ shows the token, or was not wiped where it was: %q", environ)
	}
	for _, auth := range []string{"", "Bearer " + token} {
		req, _ := http.NewRequest("GET", url+"/contexts", nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if want := map[bool]int{false: 401, true: 200}[auth != ""]; resp.StatusCode != want {
			t.Errorf("Authorization %q: %d, want %d", auth, resp.StatusCode, want)
		}
	}
}

// A limit per context set on the host reaches the plugin: the default python
// context past -context-memory ends with MemoryLimitExceeded naming it, and
// its next execution runs in a fresh interpreter.
func TestBinaryContextMemoryLimit(t *testing.T) {
	t.Parallel()
	probe := subprocess.New(subprocess.Options{Limits: subprocess.Limits{MemoryBytes: 256 << 20}})
	err := probe.Limited()
	probe.Close()
	if err != nil {
		testkit.Missingf(t, "no memory cgroup controller for this process: %v", err)
	}
	p := startBinary(t, "KERNELHOST_DEFAULT_CWD="+t.TempDir(), "KERNELHOST_CONTEXT_MEMORY=256MiB")
	url := "http://" + p.waitLog("listening")["addr"].(string)
	p.waitLog("ready")
	if status, body := post(t, url, map[string]any{"code": "b = bytearray(600 << 20)"}); status != 200 ||
		!strings.Contains(body, `"name":"MemoryLimitExceeded"`) || !strings.Contains(body, "256 MiB, the host's -context-memory setting") {
		t.Fatalf("past the limit: %d %q, want MemoryLimitExceeded naming 256 MiB and -context-memory", status, body)
	}
	if status, body := post(t, url, map[string]any{"code": "print('b' in globals())"}); status != 200 || !strings.Contains(body, `"text":"False\n"`) {
		t.Fatalf("the next execution: %d %q", status, body)
	}
}
