package pluginrpc

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kernelhost/kernelhost/core"
	"github.com/kernelhost/kernelhost/internal/testkit"
	pb "github.com/kernelhost/kernelhost/plugins/transportplugin/proto"
)

// selfPlugin is a Config that runs this test binary as a plugin in mode.
func selfPlugin(t *testing.T, mode string) Config {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return Config{Path: exe, Name: "test-" + mode, Env: []string{helperEnv + "=" + mode}, Logger: testLogger(t)}
}

// testLogger sends the host log to the test log.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func launch(t *testing.T, cfg Config) *Supervised {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := Launch(ctx, cfg)
	if err != nil {
		t.Fatalf("Launch: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func startBash(t *testing.T, tr core.Transport) core.Kernel {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	k, err := tr.StartKernel(ctx, core.KernelSpec{Language: "bash", Cwd: t.TempDir()})
	if err != nil {
		t.Fatalf("StartKernel: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		k.Shutdown(ctx)
	})
	return k
}

// run executes code and collects its messages up to its status idle.
func run(t *testing.T, k core.Kernel, id, code string) []core.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := k.Execute(ctx, core.ExecuteRequest{MsgID: id, Code: code}); err != nil {
		t.Fatalf("Execute %q: %v", code, err)
	}
	return collect(t, k, id, 30*time.Second)
}

func collect(t *testing.T, k core.Kernel, id string, timeout time.Duration) []core.Message {
	t.Helper()
	var got []core.Message
	deadline := time.After(timeout)
	for {
		select {
		case m, ok := <-k.Messages():
			if !ok {
				t.Fatalf("Messages closed while waiting for %s; got %+v", id, got)
			}
			got = append(got, m)
			if m.ParentID == id && m.Type == core.MsgStatus && m.State == core.StateIdle {
				return got
			}
		case <-deadline:
			t.Fatalf("request %s not finished within %v; got %+v", id, timeout, got)
		}
	}
}

func stdout(ms []core.Message) string {
	var b strings.Builder
	for _, m := range ms {
		if m.Type == core.MsgStream && m.Name == "stdout" {
			b.WriteString(m.Text)
		}
	}
	return b.String()
}

func reply(t *testing.T, ms []core.Message) core.Message {
	t.Helper()
	for _, m := range ms {
		if m.Type == core.MsgExecuteReply {
			return m
		}
	}
	t.Fatalf("no execute_reply in %+v", ms)
	return core.Message{}
}

func TestExamplePluginRoundTrip(t *testing.T) {
	t.Parallel()
	var logs testkit.SyncBuffer
	cfg := Config{Path: exampleBin, Logger: slog.New(slog.NewJSONHandler(&logs, nil))}
	s := launch(t, cfg)
	info := s.Info()
	if info.Name != "example-bash" || len(info.Languages) != 1 || info.Languages[0] != "bash" {
		t.Fatalf("Info = %+v", info)
	}
	k := startBash(t, s)

	if got := stdout(run(t, k, "a", "x=41; echo $((x+1))")); got != "42\n" {
		t.Fatalf("stdout = %q, want 42", got)
	}
	// State lives on in the kernel; bytes pass through unchanged.
	odd := "quote' \"dq\" back\\slash tab\t ünïcødé"
	ms := run(t, k, "b", "printf '%s' \"$x\"; printf '%s' '"+strings.ReplaceAll(odd, "'", `'\''`)+"'")
	if got := stdout(ms); got != "41"+odd {
		t.Fatalf("stdout = %q", got)
	}
	if r := reply(t, ms); r.Status != core.ReplyOK || r.ParentID != "b" {
		t.Fatalf("reply = %+v", r)
	}
	ms = run(t, k, "c", "false")
	if r := reply(t, ms); r.Status != core.ReplyError || r.EName != "ExitStatus" {
		t.Fatalf("reply = %+v", r)
	}

	// Restart: the restarting status has arrived when Restart returns, and
	// the state is gone.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := k.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-k.Messages():
		if m.Type != core.MsgStatus || m.State != core.StateRestarting || m.ParentID != "" {
			t.Fatalf("first message after Restart = %+v", m)
		}
	default:
		t.Fatal("Restart returned before its restarting status was delivered")
	}
	if got := stdout(run(t, k, "d", "echo \"[$x]\"")); got != "[]\n" {
		t.Fatalf("after restart stdout = %q", got)
	}

	// Shutdown closes Messages before it returns.
	if err := k.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := <-k.Messages(); ok {
		t.Fatal("Messages still open after Shutdown")
	}
	if err := k.Shutdown(ctx); err != nil {
		t.Fatalf("second Shutdown: %v", err)
	}

	// The plugin's own hclog lines reach the host log under its name.
	s.Close()
	if l := logs.String(); !strings.Contains(l, `"msg":"serving transport"`) || !strings.Contains(l, `"plugin":"kernelhost-transport-example-bash"`) {
		t.Fatalf("host log lacks the plugin's own log line:\n%s", l)
	}
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Count(line, `"plugin":`) > 1 {
			t.Errorf("log line has the plugin key twice: %s", line)
		}
	}
	if !strings.Contains(logs.String(), `"msg":"plugin process exited"`) {
		t.Error("host log lacks go-plugin's exit line, which carries its own plugin key")
	}
	if strings.Contains(logs.String(), `"level":"DEBUG-4"`) {
		t.Fatal("trace-level go-plugin logs reached the host log")
	}
}

func bigBundle() map[string]json.RawMessage {
	raw := bytes.Repeat([]byte{0x89, 'P', 'N', 'G', 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, 20<<20/16)
	s, _ := json.Marshal(base64.StdEncoding.EncodeToString(raw))
	return map[string]json.RawMessage{"image/png": s, "text/plain": json.RawMessage(`"<Figure>"`)}
}

// Not a parallel test: the plugin is this race-instrumented binary, and
// moving 20 MB through it is CPU work that only waits longer beside others
// (past run's 30 s bound on a loaded machine). It runs before them, alone.
func TestTwentyMegabyteResultPasses(t *testing.T) {
	s := launch(t, selfPlugin(t, "big"))
	k := startBash(t, s)
	ms := run(t, k, "big", "plot")
	want := bigBundle()
	for _, m := range ms {
		if m.Type == core.MsgDisplayData {
			got := m.Data["image/png"]
			if len(got) < 20<<20 || sha256.Sum256(got) != sha256.Sum256(want["image/png"]) {
				t.Fatalf("image/png: %d bytes, differs from the %d sent", len(got), len(want["image/png"]))
			}
			if string(m.Data["text/plain"]) != `"<Figure>"` {
				t.Fatalf("text/plain = %s", m.Data["text/plain"])
			}
			return
		}
	}
	t.Fatalf("no display_data in %d messages", len(ms))
}

func TestStartupFailuresAreClear(t *testing.T) {
	t.Parallel()
	wrongCookie := Config{Path: exampleBin, Env: []string{handshake.MagicCookieKey + "=not-the-cookie"}, Logger: testLogger(t)}
	cases := []struct {
		name string
		cfg  Config
		want string
	}{
		{"stdout before handshake", selfPlugin(t, "stdout-noise"), "wrote to stdout before the go-plugin handshake"},
		{"wrong protocol version", selfPlugin(t, "protocol-next"), "no common transport plugin protocol version (host speaks 2)"},
		{"settings it does not take", withSettings(selfPlugin(t, "configured"), map[string]any{"greeting": "hi", "colour": "red"}), "configure: setting colour: this plugin takes no such setting"},
		{"a setting of another type", withSettings(selfPlugin(t, "configured"), map[string]any{"greeting": time.Second}), "configure: setting greeting: a time.Duration does not fit"},
		{"wrong magic cookie", wrongCookie, "exited during the handshake"},
		{"not a plugin", Config{Path: "/bin/true", Logger: testLogger(t)}, "exited during the handshake"},
		{"missing binary", Config{Path: "/nonexistent/plugin", Logger: testLogger(t)}, "/nonexistent/plugin"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.cfg.StartTimeout = 20 * time.Second
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			s, err := Launch(ctx, c.cfg)
			if err == nil {
				s.Close()
				t.Fatal("Launch succeeded")
			}
			if !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "start transport plugin") {
				t.Fatalf("error = %q, want it to contain %q", err, c.want)
			}
			t.Log(err)
		})
	}
}

func withSettings(cfg Config, settings map[string]any) Config {
	cfg.Settings = settings
	return cfg
}

// A plugin that makes its logger after Serve (in its newTransport, as the
// subprocess plugin logs its sandbox warning) is logged by the host at the
// level it logged, with its fields: not as a line of raw JSON at INFO.
func TestLoggerMadeAfterServeKeepsItsLevel(t *testing.T) {
	records := make(chan slog.Record, 64)
	cfg := selfPlugin(t, "late-logger")
	cfg.Logger = slog.New(recordHandler{records})
	launch(t, cfg)
	deadline := time.After(30 * time.Second)
	for {
		select {
		case r := <-records:
			if !strings.Contains(r.Message, "a warning logged after Serve") {
				continue
			}
			var why string
			r.Attrs(func(a slog.Attr) bool {
				if a.Key == "why" {
					why = a.Value.String()
				}
				return true
			})
			if r.Level != slog.LevelWarn || why != "late-logger" || strings.Contains(r.Message, "@level") {
				t.Fatalf("the plugin's warning was logged as level %v, message %q, why=%q: want WARN, the message alone, why=late-logger", r.Level, r.Message, why)
			}
			return
		case <-deadline:
			t.Fatal("the plugin's warning was not logged within 10 s")
		}
	}
}

// recordHandler sends every record it handles to a channel (dropping them
// when it is full).
type recordHandler struct{ records chan<- slog.Record }

func (recordHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h recordHandler) Handle(_ context.Context, r slog.Record) error {
	select {
	case h.records <- r.Clone():
	default:
	}
	return nil
}
func (h recordHandler) WithAttrs(attrs []slog.Attr) slog.Handler { return withAttrs{h, attrs} }
func (h recordHandler) WithGroup(string) slog.Handler            { return h }

// withAttrs adds the attributes a logger was made With to each record.
type withAttrs struct {
	recordHandler
	attrs []slog.Attr
}

func (h withAttrs) Handle(ctx context.Context, r slog.Record) error {
	r = r.Clone()
	r.AddAttrs(h.attrs...)
	return h.recordHandler.Handle(ctx, r)
}

// The host's settings reach the transport the plugin builds, over the
// protocol: not in the plugin's environment, which its interpreters inherit
// and /proc shows (so a secret setting stays out of both).
func TestSettingsReachThePlugin(t *testing.T) {
	t.Parallel()
	const secret = "greeting-secret-51d2"
	s := launch(t, withSettings(selfPlugin(t, "configured"), map[string]any{"greeting": secret}))
	if v := s.Info().Version; v != secret {
		t.Fatalf("the transport's version %q: want the greeting setting, %q", v, secret)
	}
	k := startBash(t, s)
	var out strings.Builder
	for _, m := range run(t, k, "env", `env; tr '\0' '\n' < /proc/$PPID/environ`) {
		out.WriteString(m.Text)
	}
	if !strings.Contains(out.String(), "PATH=") {
		t.Fatalf("no environment in the output: %q", out.String())
	}
	if strings.Contains(out.String(), secret) {
		t.Fatalf("a setting is in the environment of the plugin or its interpreter: %q", out.String())
	}
}

func TestHangingCallIsBoundedByDeadline(t *testing.T) {
	t.Parallel()
	cfg := selfPlugin(t, "hang")
	cfg.CallTimeout = 300 * time.Millisecond
	s := launch(t, cfg)
	k := startBash(t, s)
	start := time.Now()
	err := k.Execute(context.Background(), core.ExecuteRequest{MsgID: "x", Code: "anything"})
	if err == nil || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "did not answer in time") {
		t.Fatalf("Execute error = %v", err)
	}
	if d := time.Since(start); d > 30*time.Second { // the call hangs for ever otherwise
		t.Fatalf("Execute took %v with a 300ms call deadline", d)
	}
}

// When the host's call deadline passes, the call's context in the plugin is
// cancelled too (protocol v2 sends a cancel on the kernel's stream), so a
// transport that honours its context stops waiting.
func TestCallDeadlineCancelsPluginContext(t *testing.T) {
	t.Parallel()
	cfg := selfPlugin(t, "ctxwait")
	cfg.CallTimeout = 200 * time.Millisecond
	s := launch(t, cfg)
	k := startBash(t, s)
	err := k.Execute(context.Background(), core.ExecuteRequest{MsgID: "x", Code: "anything"})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Execute error = %v, want the call deadline", err)
	}
	select {
	case m := <-k.Messages():
		if m.Text != "plugin saw: context canceled" {
			t.Fatalf("message = %+v, want the plugin's word that its context was cancelled", m)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the plugin's Execute context was not cancelled within 30s of the host's deadline")
	}
}

// A kernel that emits its whole output inside Execute, into an unbuffered
// channel, blocks Execute until the plugin forwards it: the plugin must keep
// draining while it runs the call, and keep the order. Through the kernel
// socket and through gRPC streams.
func TestExecuteThatBlocksOnOutput(t *testing.T) {
	t.Parallel()
	var want strings.Builder
	for i := range floodLines {
		want.WriteString(strconv.Itoa(i) + "\n")
	}
	for _, grpcStreams := range []bool{false, true} {
		t.Run(map[bool]string{false: "socket", true: "grpc"}[grpcStreams], func(t *testing.T) {
			cfg := selfPlugin(t, "flood")
			cfg.GRPCKernelStreams = grpcStreams
			s := launch(t, cfg)
			k := startBash(t, s)
			for _, id := range []string{"a", "b"} {
				// As in process, Execute returns only once its output has
				// been read: read it meanwhile.
				errc := make(chan error, 1)
				go func() { errc <- k.Execute(context.Background(), core.ExecuteRequest{MsgID: id, Code: "flood"}) }()
				ms := collect(t, k, id, 30*time.Second)
				if err := <-errc; err != nil {
					t.Fatal(err)
				}
				if got := stdout(ms); got != want.String() {
					t.Fatalf("request %s: stdout of %d bytes differs from the %d emitted (order or loss)", id, len(got), want.Len())
				}
				if ms[0].State != core.StateBusy || reply(t, ms).Status != core.ReplyOK {
					t.Fatalf("request %s: first message %+v", id, ms[0])
				}
			}
		})
	}
}

// The kernel socket serves only a connection that presents the token the
// plugin gave the host over mTLS.
func TestKernelSocketRefusesWrongToken(t *testing.T) {
	t.Parallel()
	s := launch(t, Config{Path: exampleBin, Logger: testLogger(t)})
	s.mu.Lock()
	path, token := s.inst.kernelSocket, s.inst.kernelToken
	s.mu.Unlock()
	if path == "" || len(token) != tokenBytes {
		t.Fatalf("plugin offers no kernel socket (%q, %d-byte token)", path, len(token))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	wrong := bytes.Repeat([]byte{'x'}, tokenBytes)
	st, err := dialKernelSocket(ctx, ctx, path, wrong)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&pb.KernelCall{Id: 1, Call: &pb.KernelCall_Start{Start: &pb.Start{Language: "bash", Cwd: []byte(t.TempDir())}}}); err != nil {
		t.Logf("send: %v", err)
	}
	if f, err := st.Recv(); err == nil {
		t.Fatalf("a connection with the wrong token got a frame: %v", f)
	}
	// The right token works on the same socket.
	st, err = dialKernelSocket(ctx, ctx, path, token)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&pb.KernelCall{Id: 1, Call: &pb.KernelCall_Start{Start: &pb.Start{Language: "bash", Cwd: []byte(t.TempDir())}}}); err != nil {
		t.Fatal(err)
	}
	f, err := st.Recv()
	if err != nil || len(f.Results) != 1 || f.Results[0].Code != pb.Code_OK {
		t.Fatalf("start with the right token: %v, %v", f, err)
	}
	if err := st.Send(&pb.KernelCall{Id: 2, Call: &pb.KernelCall_Shutdown{Shutdown: &pb.Shutdown{}}}); err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := st.Recv(); err != nil {
			if err != io.EOF {
				t.Fatalf("after shutdown: %v, want the plugin's end frame", err)
			}
			break
		}
	}
}

// pidfd returns a descriptor that becomes readable when pid exits; it works
// for processes that are not our children.
func pidfd(t *testing.T, pid int) int {
	t.Helper()
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		t.Fatalf("pidfd_open %d: %v", pid, err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

func waitGone(t *testing.T, what string, fd int, timeout time.Duration) {
	t.Helper()
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, int(timeout/time.Millisecond))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			t.Fatalf("%s still running after %v", what, timeout)
		}
		return
	}
}

func bashPID(t *testing.T, k core.Kernel, id string) int {
	t.Helper()
	pid, err := strconv.Atoi(strings.TrimSpace(stdout(run(t, k, id, "echo $$"))))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

func TestKillNineMidExecution(t *testing.T) {
	t.Parallel()
	var restarts atomic.Int32
	cfg := Config{Path: exampleBin, Logger: testLogger(t), MinBackoff: 10 * time.Millisecond,
		OnRestart: func() { restarts.Add(1) }}
	s := launch(t, cfg)
	k := startBash(t, s)
	oldPID := s.PID()
	oldFD := pidfd(t, oldPID)
	bashFD := pidfd(t, bashPID(t, k, "pid"))

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := k.Execute(ctx, core.ExecuteRequest{MsgID: "long", Code: "echo started; sleep 30"}); err != nil {
		t.Fatal(err)
	}
	for m := range k.Messages() {
		if m.Type == core.MsgStream && strings.Contains(m.Text, "started") {
			break
		}
	}
	if err := syscall.Kill(oldPID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// The kernel reports itself dead, kernel-wide, then its channel closes.
	var last core.Message
	timeout := time.After(30 * time.Second)
	for closed := false; !closed; {
		select {
		case m, ok := <-k.Messages():
			if !ok {
				closed = true
				break
			}
			last = m
		case <-timeout:
			t.Fatal("Messages not closed 10s after the plugin was killed")
		}
	}
	if last.Type != core.MsgStatus || last.State != core.StateDead || last.ParentID != "" {
		t.Fatalf("last message = %+v, want kernel-wide status dead", last)
	}
	err := k.Execute(ctx, core.ExecuteRequest{MsgID: "after", Code: "echo hi"})
	if !errors.Is(err, errPluginGone) || !strings.Contains(err.Error(), "kernel is lost") {
		t.Fatalf("Execute on lost kernel: %v", err)
	}
	// Its interpreter died with it (Pdeathsig on bash).
	waitGone(t, "bash of the killed plugin", bashFD, 30*time.Second)

	// The supervisor brings the plugin back; a new kernel works.
	waitGone(t, "killed plugin", oldFD, 30*time.Second)
	if err := s.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	if s.PID() == oldPID || s.PID() == 0 {
		t.Fatalf("plugin PID %d after restart (was %d)", s.PID(), oldPID)
	}
	// OnRestart runs before the new process is handed out, so Ready implies it.
	if n := restarts.Load(); n != 1 {
		t.Fatalf("OnRestart called %d times after one restart, want 1", n)
	}
	k2 := startBash(t, s)
	if got := stdout(run(t, k2, "new", "echo back")); got != "back\n" {
		t.Fatalf("new kernel stdout = %q", got)
	}
}

func TestCloseLeavesNoProcess(t *testing.T) {
	t.Parallel()
	s := launch(t, Config{Path: exampleBin, Logger: testLogger(t)})
	k := startBash(t, s)
	pluginFD := pidfd(t, s.PID())
	bashFD := pidfd(t, bashPID(t, k, "pid"))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	waitGone(t, "plugin", pluginFD, time.Second) // Close waits for it
	waitGone(t, "bash kernel", bashFD, 30*time.Second)
	// A kernel still open when its plugin is closed is lost: at most a
	// kernel-wide dead status, then its channel is closed.
	for m := range k.Messages() {
		if m.Type != core.MsgStatus || m.State != core.StateDead {
			t.Fatalf("message after Close: %+v", m)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if _, err := s.StartKernel(ctx, core.KernelSpec{Language: "bash"}); !errors.Is(err, errClosed) || core.KindOf(err) != core.KindUnavailable {
		t.Fatalf("StartKernel after Close: %v (kind %v), want errClosed, KindUnavailable", err, core.KindOf(err))
	}
}

// A start while the plugin is down for longer than the start may wait is
// refused as unavailable (HTTP 503: try again), not as an internal error.
func TestStartWhileRestartingIsUnavailable(t *testing.T) {
	t.Parallel()
	s := launch(t, Config{Path: exampleBin, Logger: testLogger(t), MinBackoff: time.Minute})
	pid := s.PID()
	fd := pidfd(t, pid)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitGone(t, "killed plugin", fd, 30*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := s.StartKernel(ctx, core.KernelSpec{Language: "bash", Cwd: t.TempDir()})
	if core.KindOf(err) != core.KindUnavailable || !strings.Contains(err.Error(), "not back in time") {
		t.Fatalf("StartKernel while the plugin restarts: %v (kind %v), want KindUnavailable", err, core.KindOf(err))
	}
}

func TestHostSIGKILLLeavesNoPlugin(t *testing.T) {
	t.Parallel()
	host, _, pluginPID, bashPID := startMiniHost(t)
	pluginFD, bashFD := pidfd(t, pluginPID), pidfd(t, bashPID)
	if err := host.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	host.Wait()
	waitGone(t, "plugin of the SIGKILLed host", pluginFD, 30*time.Second)
	waitGone(t, "bash of the SIGKILLed host's plugin", bashFD, 30*time.Second)
}

// The plugin's sockets are in a directory of its host's (socketdir.go): a
// host killed with SIGKILL leaves it, the next host to start removes it,
// and a host that stops cleanly leaves none.
func TestPluginSocketsOfAGoneHostAreRemoved(t *testing.T) {
	t.Parallel()
	base := filepath.Join(os.TempDir(), "kernelhost-"+strconv.Itoa(os.Getuid()))
	killed, _, pluginPID, _ := startMiniHost(t)
	killedDir := filepath.Join(base, "host-"+strconv.Itoa(killed.Process.Pid))
	pluginSockets(t, killedDir, pluginPID)
	pluginFD := pidfd(t, pluginPID)
	if err := killed.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	killed.Wait()
	waitGone(t, "plugin of the SIGKILLed host", pluginFD, 30*time.Second)
	if _, err := os.Stat(killedDir); err != nil {
		t.Fatalf("the SIGKILLed host's socket directory: %v, want it left (nothing removes it before the next host)", err)
	}

	next, stdin, pluginPID, _ := startMiniHost(t)
	if _, err := os.Stat(killedDir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the SIGKILLed host's socket directory after the next host started: %v, want it removed", err)
	}
	nextDir := filepath.Join(base, "host-"+strconv.Itoa(next.Process.Pid))
	pluginSockets(t, nextDir, pluginPID)
	stdin.Close() // the mini host closes its plugin and exits
	if err := next.Wait(); err != nil {
		t.Fatalf("the mini host's clean stop: %v", err)
	}
	if _, err := os.Stat(nextDir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the socket directory of a host that stopped cleanly: %v, want it removed", err)
	}
}

// pluginSockets checks that the plugin pluginPID has its kernel socket in
// a directory of hostDir's.
func pluginSockets(t *testing.T, hostDir string, pluginPID int) {
	t.Helper()
	socks, _ := filepath.Glob(filepath.Join(hostDir, "plugin-dir*", "kernels-"+strconv.Itoa(pluginPID)+".sock"))
	if len(socks) != 1 {
		entries, err := os.ReadDir(hostDir)
		t.Fatalf("plugin %d's kernel socket in %s: %v, want one (the directory holds %v, %v)", pluginPID, hostDir, socks, entries, err)
	}
}

// startMiniHost starts a mini host (miniHost) and returns it, its stdin
// (closing it stops the host cleanly) and the pids it printed; the host is
// killed at the test's end if it still runs.
func startMiniHost(t *testing.T) (host *exec.Cmd, stdin io.WriteCloser, pluginPID, bashPID int) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	host = exec.Command(exe)
	host.Env = append(os.Environ(), helperEnv+"=minihost", "EXAMPLE_BIN="+exampleBin)
	out, err := host.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if stdin, err = host.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := host.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { host.Process.Kill(); host.Wait() })
	line := waitForLine(t, bufio.NewScanner(out), "PIDS ", 30*time.Second)
	f := strings.Fields(line)
	if len(f) != 3 {
		t.Fatalf("mini host said %q", line)
	}
	pluginPID, _ = strconv.Atoi(f[1])
	bashPID, _ = strconv.Atoi(f[2])
	return host, stdin, pluginPID, bashPID
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// sweepDeadHosts removes the directory of a host whose pid is gone, unless
// a socket in it still takes connections (a host alive in another PID
// namespace that shares this /tmp).
func TestSweepKeepsADirectoryWhoseSocketServes(t *testing.T) {
	t.Parallel()
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	base := t.TempDir()
	served := filepath.Join(base, "host-"+strconv.Itoa(gone.Process.Pid))
	dead := filepath.Join(base, "host-999999999") // above any pid_max
	for _, dir := range []string{served, dead} {
		if err := os.MkdirAll(filepath.Join(dir, "plugin-dir1"), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	ln, err := net.Listen("unix", filepath.Join(served, "plugin-dir1", "kernels-1.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	// A socket file nothing listens on: its plugin was killed.
	stale, err := net.Listen("unix", filepath.Join(dead, "plugin-dir1", "kernels-2.sock"))
	if err != nil {
		t.Fatal(err)
	}
	stale.(*net.UnixListener).SetUnlinkOnClose(false)
	stale.Close()
	sweepDeadHosts(base, discardLogger())
	if _, err := os.Stat(served); err != nil {
		t.Errorf("a directory whose socket serves: %v, want it kept", err)
	}
	if _, err := os.Stat(dead); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a dead host's directory: %v, want it removed", err)
	}
}
