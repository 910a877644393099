package envd_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/kernelhost/kernelhost/hostcmd/envd"
	pb "github.com/kernelhost/kernelhost/hostcmd/envd/gen/process"
	"github.com/kernelhost/kernelhost/hostcmd/envd/gen/process/processconnect"
	"github.com/kernelhost/kernelhost/internal/testkit"
	"github.com/kernelhost/kernelhost/transports/subprocess"
)

// sandboxed is a fixture whose commands run in the bubblewrap sandbox.
func sandboxed(t testing.TB, opts ...func(*envd.Config)) (*fixture, processconnect.ProcessClient) {
	t.Helper()
	testkit.NeedCommand(t, "bwrap", "bubblewrap")
	f := newFixture(t, func(home string) envd.Wrapper {
		sb, err := subprocess.NewCommandSandbox(subprocess.SandboxOptions{Mode: subprocess.SandboxOn, Writable: []string{home}})
		if err != nil {
			testkit.Missing(t, err)
		}
		return sb
	}, opts...)
	return f, processconnect.NewProcessClient(http.DefaultClient, f.url)
}

// result is what a command's stream carried.
type result struct {
	pid            uint32
	stdout, stderr string
	pty            string
	end            *pb.ProcessEvent_EndEvent
}

// collect reads a stream's events until its end (bounded by ctx).
func collect(t *testing.T, recv func() bool, msg func() *pb.ProcessEvent, errf func() error) result {
	t.Helper()
	var r result
	for recv() {
		switch ev := msg().GetEvent().(type) {
		case *pb.ProcessEvent_Start:
			r.pid = ev.Start.Pid
		case *pb.ProcessEvent_Data:
			r.stdout += string(ev.Data.GetStdout())
			r.stderr += string(ev.Data.GetStderr())
			r.pty += string(ev.Data.GetPty())
		case *pb.ProcessEvent_End:
			r.end = ev.End
		}
	}
	if err := errf(); err != nil {
		t.Fatalf("stream: %v", err)
	}
	return r
}

func run(t *testing.T, pc processconnect.ProcessClient, req *pb.StartRequest) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s, err := pc.Start(ctx, connect.NewRequest(req))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	return collect(t, s.Receive, func() *pb.ProcessEvent { return s.Msg().GetEvent() }, s.Err)
}

func bash(script string) *pb.ProcessConfig {
	return &pb.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-l", "-c", script}}
}

func TestEnvdCommandInSandbox(t *testing.T) {
	f, pc := sandboxed(t)
	r := run(t, pc, &pb.StartRequest{Process: &pb.ProcessConfig{
		Cmd: "/bin/bash", Args: []string{"-c", `echo out; echo err >&2; echo "$GLOBAL_VAR $MINE $PWD"; echo $$; exit 3`},
		Envs: map[string]string{"MINE": "m"},
	}})
	if r.end == nil || r.end.ExitCode != 3 || !r.end.Exited {
		t.Fatalf("end: %+v", r.end)
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 3 || lines[0] != "out" || lines[1] != "g m "+f.home || r.stderr != "err\n" {
		t.Errorf("stdout %q stderr %q", r.stdout, r.stderr)
	}
	if lines[len(lines)-1] == "" || len(lines[len(lines)-1]) > 2 { // pid 1 or 2: its own PID namespace
		t.Errorf("the command's pid %q is not a sandbox's", lines[len(lines)-1])
	}
	// The walls: the home is writable, /etc and a sibling of the home are
	// not, the secret is covered, the host's environment is not there.
	t.Setenv("KERNELHOST_ENVD_TEST_SECRET", "leak")
	r = run(t, pc, &pb.StartRequest{Process: bash(`echo hi > made.txt && echo wrote; ` +
		`touch /etc/envd-test 2>/dev/null || echo etc-refused; touch ../sibling; ` +
		`cat ` + f.secret + `; echo "[$KERNELHOST_ENVD_TEST_SECRET]"; ls /proc | grep -c '^[0-9]'`)})
	if _, err := os.Stat(filepath.Join(filepath.Dir(f.home), "sibling")); err == nil {
		t.Error("the command wrote beside the home on the host")
	}
	for _, want := range []string{"wrote", "etc-refused", "[]"} {
		if !strings.Contains(r.stdout, want+"\n") {
			t.Errorf("sandbox walls: no %q in %q", want, r.stdout)
		}
	}
	if strings.Contains(r.stdout, "s3cret") {
		t.Errorf("the secret reached the command: %q", r.stdout)
	}
	if b, err := os.ReadFile(filepath.Join(f.home, "made.txt")); err != nil || string(b) != "hi\n" {
		t.Errorf("the command's file is not in the home: %q %v", b, err)
	}
	if f.srv.Stats().Commands.Load() != 2 {
		t.Errorf("commands counted: %d", f.srv.Stats().Commands.Load())
	}
}

func TestEnvdCommandStdinAndReconnect(t *testing.T) {
	_, pc := sandboxed(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tag := "cat-1"
	s, err := pc.Start(ctx, connect.NewRequest(&pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "/bin/cat"}, Tag: &tag}))
	if err != nil {
		t.Fatal(err)
	}
	if !s.Receive() || s.Msg().GetEvent().GetStart() == nil {
		t.Fatalf("no start: %v", s.Err())
	}
	pid := s.Msg().GetEvent().GetStart().Pid
	s.Close() // the client goes away; cat runs on
	list, err := pc.List(ctx, connect.NewRequest(&pb.ListRequest{}))
	if err != nil || len(list.Msg.Processes) != 1 || list.Msg.Processes[0].GetTag() != tag {
		t.Fatalf("List: %v %v", list, err)
	}
	c, err := pc.Connect(ctx, connect.NewRequest(&pb.ConnectRequest{Process: &pb.ProcessSelector{Selector: &pb.ProcessSelector_Tag{Tag: tag}}}))
	if err != nil {
		t.Fatal(err)
	}
	if !c.Receive() || c.Msg().GetEvent().GetStart().GetPid() != pid {
		t.Fatalf("Connect: no start for pid %d: %v", pid, c.Err())
	}
	sel := &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: pid}}
	if _, err := pc.SendInput(ctx, connect.NewRequest(&pb.SendInputRequest{Process: sel, Input: &pb.ProcessInput{Input: &pb.ProcessInput_Stdin{Stdin: []byte("echoed\n")}}})); err != nil {
		t.Fatal(err)
	}
	if _, err := pc.CloseStdin(ctx, connect.NewRequest(&pb.CloseStdinRequest{Process: sel})); err != nil {
		t.Fatal(err)
	}
	r := collect(t, c.Receive, func() *pb.ProcessEvent { return c.Msg().GetEvent() }, c.Err)
	if r.stdout != "echoed\n" || r.end == nil || r.end.ExitCode != 0 {
		t.Errorf("reconnected stream: %q %+v", r.stdout, r.end)
	}
}

func TestEnvdCommandKillAndBadInput(t *testing.T) {
	_, pc := sandboxed(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s, err := pc.Start(ctx, connect.NewRequest(&pb.StartRequest{Process: bash("sleep 600 & sleep 600")}))
	if err != nil {
		t.Fatal(err)
	}
	if !s.Receive() {
		t.Fatal(s.Err())
	}
	sel := &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: s.Msg().GetEvent().GetStart().Pid}}
	if _, err := pc.SendSignal(ctx, connect.NewRequest(&pb.SendSignalRequest{Process: sel, Signal: pb.Signal_SIGNAL_SIGKILL})); err != nil {
		t.Fatal(err)
	}
	r := collect(t, s.Receive, func() *pb.ProcessEvent { return s.Msg().GetEvent() }, s.Err)
	if r.end == nil || r.end.Exited || !strings.Contains(r.end.Status, "killed") {
		t.Errorf("killed command's end: %+v", r.end)
	}
	// Once ended it is gone: every call naming it is NotFound.
	_, err = pc.SendSignal(ctx, connect.NewRequest(&pb.SendSignalRequest{Process: sel, Signal: pb.Signal_SIGNAL_SIGKILL}))
	wantCode(t, "kill of an ended pid", err, connect.CodeNotFound)
	_, err = pc.Update(ctx, connect.NewRequest(&pb.UpdateRequest{Process: sel, Pty: &pb.PTY{Size: &pb.PTY_Size{Cols: 80, Rows: 24}}}))
	wantCode(t, "resize of a dead process", err, connect.CodeNotFound)
	_, err = pc.SendInput(ctx, connect.NewRequest(&pb.SendInputRequest{Process: &pb.ProcessSelector{Selector: &pb.ProcessSelector_Tag{Tag: "nope"}}}))
	wantCode(t, "input to an unknown tag", err, connect.CodeNotFound)
	cs, err := pc.Start(ctx, connect.NewRequest(&pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "/no/such/program"}}))
	if err == nil {
		for cs.Receive() {
		}
		err = cs.Err()
	}
	wantCode(t, "a missing program", err, connect.CodeInvalidArgument)
	cs, err = pc.Start(ctx, connect.NewRequest(&pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "/bin/true", Cwd: ptr("/proc")}}))
	if err == nil {
		for cs.Receive() {
		}
		err = cs.Err()
	}
	wantCode(t, "a cwd in the host's /proc", err, connect.CodePermissionDenied)
}

func TestEnvdPTY(t *testing.T) {
	_, pc := sandboxed(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s, err := pc.Start(ctx, connect.NewRequest(&pb.StartRequest{
		Process: &pb.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-i", "-l"}},
		Pty:     &pb.PTY{Size: &pb.PTY_Size{Cols: 100, Rows: 30}},
	}))
	if err != nil {
		t.Fatal(err)
	}
	if !s.Receive() {
		t.Fatal(s.Err())
	}
	sel := &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: s.Msg().GetEvent().GetStart().Pid}}
	if _, err := pc.Update(ctx, connect.NewRequest(&pb.UpdateRequest{Process: sel, Pty: &pb.PTY{Size: &pb.PTY_Size{Cols: 123, Rows: 45}}})); err != nil {
		t.Fatal(err)
	}
	send := func(in string) {
		t.Helper()
		if _, err := pc.SendInput(ctx, connect.NewRequest(&pb.SendInputRequest{Process: sel, Input: &pb.ProcessInput{Input: &pb.ProcessInput_Pty{Pty: []byte(in)}}})); err != nil {
			t.Fatal(err)
		}
	}
	// Input typed before the shell set up its terminal may be flushed by
	// it: the line is sent again on each output until its answer comes.
	var out string
	send("stty size\n")
	for !strings.Contains(out, "45 123") && s.Receive() {
		if d := s.Msg().GetEvent().GetData(); d != nil {
			out += string(d.GetPty())
			if !strings.Contains(out, "45 123") && strings.Count(out, "stty size") == 0 {
				send("stty size\n")
			}
		}
	}
	if !strings.Contains(out, "45 123") {
		t.Fatalf("pty output %q: want the new size (%v)", out, s.Err())
	}
	send("exit 7\n")
	r := collect(t, s.Receive, func() *pb.ProcessEvent { return s.Msg().GetEvent() }, s.Err)
	if r.end == nil || r.end.ExitCode != 7 {
		t.Errorf("end: %+v (output %q)", r.end, out+r.pty)
	}
}

func ptr[T any](v T) *T { return &v }

// TestEnvdCommandLimits: a command gets a context's limits in cgroups of
// its own: past its memory limit it is killed, the sandbox API goes on.
func TestEnvdCommandLimits(t *testing.T) {
	lim, err := subprocess.NewCommandLimits(subprocess.Limits{MemoryBytes: 64 << 20, Pids: 32}, true)
	if err != nil {
		testkit.Missingf(t, "no cgroup controller for the limits here: %v", err)
	}
	_, pc := sandboxed(t, func(c *envd.Config) { c.Limits = lim })
	r := run(t, pc, &pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "/usr/bin/python3", Args: []string{"-c", "b = bytearray(256 << 20); print('survived')"}}})
	if r.end == nil || r.end.ExitCode == 0 || strings.Contains(r.stdout, "survived") {
		t.Errorf("a command past its memory limit: %+v %q", r.end, r.stdout)
	}
	spawn := "import subprocess\nps, err = [], None\ntry:\n    for i in range(64): ps.append(subprocess.Popen(['sleep', '30']))\nexcept OSError as e:\n    err = e\nprint(len(ps) < 64, type(err).__name__)\nfor p in ps: p.kill()"
	r = run(t, pc, &pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "/usr/bin/python3", Args: []string{"-c", spawn}}})
	if r.stdout != "True BlockingIOError\n" {
		t.Errorf("64 processes under a limit of 32: %q %q %+v", r.stdout, r.stderr, r.end)
	}
	r = run(t, pc, &pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "/bin/echo", Args: []string{"fine"}}})
	if r.stdout != "fine\n" {
		t.Errorf("after the limits: %q %+v", r.stdout, r.end)
	}
}

// A command has a context's network (-context-network=isolated, the
// default): outbound connections work (here to the test's "internet", a
// network namespace of its own), the host's loopback listeners (the code
// API's among them) are not reachable.
func TestEnvdCommandNetwork(t *testing.T) {
	testkit.NeedCommand(t, "curl", "curl")
	internet := testkit.Internet(t)
	host := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("host")) }))
	t.Cleanup(host.Close)
	_, pc := sandboxed(t)
	r := run(t, pc, &pb.StartRequest{Process: bash(`curl -sS --max-time 20 ` + internet + `/bytes/5 | wc -c; ` +
		`curl -sS --max-time 5 ` + host.URL + ` || echo host-refused`)})
	if got := strings.Fields(r.stdout); len(got) != 2 || got[0] != "5" || got[1] != "host-refused" {
		t.Errorf("stdout %q (stderr %q): want 5 bytes from the internet and the host's loopback refused", r.stdout, r.stderr)
	}
}
