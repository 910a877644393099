package envd

import (
	"context"
	"errors"
	"fmt"
	"github.com/kernelhost/kernelhost/transports/subprocess"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"github.com/creack/pty"

	pb "github.com/kernelhost/kernelhost/hostcmd/envd/gen/process"
	"github.com/kernelhost/kernelhost/hostcmd/envd/gen/process/processconnect"
)

// procService is process.Process.
type procService struct{ s *Server }

var _ processconnect.ProcessHandler = procService{}

// streamKeepalive is how often a quiet process stream sends a keepalive.
const streamKeepalive = 30 * time.Second

// basePath is a command's PATH unless the request or the global env vars
// set one.
const basePath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// commandEnv is a command's environment: a base (never the host's own
// environment, which may hold its secrets), the global env vars, then the
// request's.
func (s *Server) commandEnv(req map[string]string, tty bool) []string {
	home, _ := os.UserHomeDir()
	env := map[string]string{"PATH": basePath, "HOME": home, "LANG": "C.UTF-8", "PWD": s.cfg.Home}
	if tty {
		env["TERM"] = "xterm-256color"
	}
	for k, v := range s.cfg.Env {
		env[k] = v
	}
	for k, v := range req {
		env[k] = v
	}
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

// newCommand builds a request's command, in its sandbox, not started, and
// its network stack to attach once it started (nil: none).
func (s *Server) newCommand(cfg *pb.ProcessConfig, tty bool) (*exec.Cmd, *subprocess.CommandNet, error) {
	if s.cfg.NoCommands != "" {
		return nil, nil, connect.NewError(connect.CodeFailedPrecondition, errors.New(s.cfg.NoCommands))
	}
	if cfg.GetCmd() == "" {
		return nil, nil, connect.NewError(connect.CodeInvalidArgument, errors.New("the process config needs a cmd"))
	}
	dir := s.cfg.Home
	if cfg.Cwd != nil && cfg.GetCwd() != "" {
		real, err := s.readable(cfg.GetCwd())
		if err != nil {
			return nil, nil, rpcError(err)
		}
		if fi, err := os.Stat(real); err != nil || !fi.IsDir() {
			return nil, nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("cwd '%s' is not a directory", cfg.GetCwd()))
		}
		dir = real
	}
	env := s.commandEnv(cfg.GetEnvs(), tty)
	path, err := lookPath(cfg.GetCmd(), env)
	if err != nil {
		return nil, nil, connect.NewError(connect.CodeInvalidArgument, err)
	}
	cmd := exec.Command(path, cfg.GetArgs()...)
	cmd.Args[0] = cfg.GetCmd()
	cmd.Env = env
	if s.cfg.Sandbox == nil {
		cmd.Dir = dir
		return cmd, nil, nil
	}
	net, err := s.cfg.Sandbox.Wrap(cmd, dir, s.cfg.Hidden, tty)
	if err != nil {
		return nil, nil, connect.NewError(connect.CodeInternal, err)
	}
	cmd.Dir = "/" // bwrap's own; the command's is its --chdir
	return cmd, net, nil
}

// lookPath finds cmd as the command's own PATH (env's) would: the sandbox
// shows the host's files, so what is found here is what it runs.
func lookPath(cmd string, env []string) (string, error) {
	if strings.Contains(cmd, "/") {
		if fi, err := os.Stat(cmd); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			return "", fmt.Errorf("cmd '%s' is not an executable file", cmd)
		}
		return cmd, nil
	}
	dirs := basePath
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			dirs = v
		}
	}
	for _, dir := range filepath.SplitList(dirs) {
		p := filepath.Join(dir, cmd)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("cmd '%s' is not found in PATH (%s)", cmd, dirs)
}

// start starts a request's command and attaches the caller's stream.
func (s *Server) start(msg *pb.StartRequest) (*command, chan *pb.ProcessEvent, error) {
	tty := msg.Pty != nil
	cmd, net, err := s.newCommand(msg.GetProcess(), tty)
	if err != nil {
		return nil, nil, err
	}
	c := &command{cmd: cmd, subs: map[chan *pb.ProcessEvent]struct{}{}, done: make(chan struct{})}
	var wg sync.WaitGroup
	start := func() error { return cmd.Start() }
	if s.cfg.Limits != nil {
		start = func() (err error) {
			c.release, err = s.cfg.Limits.Start(cmd)
			return err
		}
	}
	// Its network is set up before it is reported started, as a context's
	// is before its first cell.
	started := start
	start = func() error {
		if err := started(); err != nil {
			net.Close()
			return err
		}
		var err error
		if c.stopNet, err = net.Attach(); err != nil {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			return fmt.Errorf("its network: %w", err)
		}
		return nil
	}
	if tty {
		err = c.startTTY(msg.GetPty().GetSize(), start, &wg)
	} else {
		err = c.startPipes(msg.Stdin == nil || msg.GetStdin(), start, &wg)
	}
	if err != nil {
		return nil, nil, connect.NewError(connect.CodeInternal, fmt.Errorf("start '%s': %w", msg.GetProcess().GetCmd(), err))
	}
	pid := uint32(cmd.Process.Pid)
	c.info = &pb.ProcessInfo{Config: msg.GetProcess(), Pid: pid, Tag: msg.Tag}
	ch := c.subscribe()
	s.procs.add(c)
	s.stats.Commands.Add(1)
	go c.finish(&wg, func() { s.procs.remove(pid) })
	return c, ch, nil
}

// startPipes starts the command with pipes for its output (and its input
// when stdin).
func (c *command) startPipes(stdin bool, start func() error, wg *sync.WaitGroup) error {
	// Alone in its process group (signal), killed if the host dies.
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	outR, outW, err := os.Pipe()
	if err != nil {
		return err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return err
	}
	c.cmd.Stdout, c.cmd.Stderr = outW, errW
	if stdin {
		if c.stdin, err = c.cmd.StdinPipe(); err != nil {
			return err
		}
	}
	err = start()
	outW.Close()
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		return err
	}
	wg.Add(2)
	go c.pumpClose(outR, func(b []byte) *pb.ProcessEvent_DataEvent {
		return &pb.ProcessEvent_DataEvent{Output: &pb.ProcessEvent_DataEvent_Stdout{Stdout: b}}
	}, wg)
	go c.pumpClose(errR, func(b []byte) *pb.ProcessEvent_DataEvent {
		return &pb.ProcessEvent_DataEvent{Output: &pb.ProcessEvent_DataEvent_Stderr{Stderr: b}}
	}, wg)
	return nil
}

// pumpClose is pump for a pipe it closes once drained.
func (c *command) pumpClose(r io.ReadCloser, wrap func([]byte) *pb.ProcessEvent_DataEvent, wg *sync.WaitGroup) {
	defer r.Close()
	c.pump(r, wrap, wg)
}

// startTTY starts the command on a new PTY of size, as its controlling
// terminal.
func (c *command) startTTY(size *pb.PTY_Size, start func() error, wg *sync.WaitGroup) error {
	ws := &pty.Winsize{Cols: 80, Rows: 24}
	if size.GetCols() > 0 && size.GetRows() > 0 {
		ws = &pty.Winsize{Cols: uint16(min(size.GetCols(), 10000)), Rows: uint16(min(size.GetRows(), 10000))}
	}
	master, tty, err := pty.Open()
	if err != nil {
		return err
	}
	defer tty.Close() // the command has its own copy
	if err := pty.Setsize(master, ws); err != nil {
		master.Close()
		return err
	}
	c.cmd.Stdin, c.cmd.Stdout, c.cmd.Stderr = tty, tty, tty
	// A session leader (so also a group's, for signal) whose controlling
	// terminal is the PTY (its fd 0 in the child).
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0, Pdeathsig: syscall.SIGKILL}
	if err := start(); err != nil {
		master.Close()
		return err
	}
	c.tty = master
	wg.Add(1)
	go c.pump(master, func(b []byte) *pb.ProcessEvent_DataEvent {
		return &pb.ProcessEvent_DataEvent{Output: &pb.ProcessEvent_DataEvent_Pty{Pty: b}}
	}, wg)
	return nil
}

func (p procService) Start(ctx context.Context, req *connect.Request[pb.StartRequest], stream *connect.ServerStream[pb.StartResponse]) error {
	c, ch, err := p.s.start(req.Msg)
	if err != nil {
		return err
	}
	return forward(ctx, c, ch, func(ev *pb.ProcessEvent) error {
		return stream.Send(&pb.StartResponse{Event: ev})
	})
}

func (p procService) Connect(ctx context.Context, req *connect.Request[pb.ConnectRequest], stream *connect.ServerStream[pb.ConnectResponse]) error {
	c, err := p.find(req.Msg.GetProcess())
	if err != nil {
		return err
	}
	return forward(ctx, c, c.subscribe(), func(ev *pb.ProcessEvent) error {
		return stream.Send(&pb.ConnectResponse{Event: ev})
	})
}

// forward sends the start event, then the command's events, until its end
// or the client's leaving (the command runs on).
func forward(ctx context.Context, c *command, ch chan *pb.ProcessEvent, send func(*pb.ProcessEvent) error) error {
	defer c.unsubscribe(ch)
	if err := send(&pb.ProcessEvent{Event: &pb.ProcessEvent_Start{Start: &pb.ProcessEvent_StartEvent{Pid: c.info.Pid}}}); err != nil {
		return err
	}
	tick := time.NewTicker(streamKeepalive)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-ch:
			if !ok {
				return nil
			}
			if err := send(ev); err != nil {
				return err
			}
		case <-tick.C:
			if err := send(&pb.ProcessEvent{Event: &pb.ProcessEvent_Keepalive{Keepalive: &pb.ProcessEvent_KeepAlive{}}}); err != nil {
				return err
			}
		}
	}
}

// find returns the command a selector names, or NotFound.
func (p procService) find(sel *pb.ProcessSelector) (*command, error) {
	c, err := p.s.procs.find(sel)
	if err != nil {
		if errors.Is(err, errInvalid) {
			return nil, connect.NewError(connect.CodeInvalidArgument, err)
		}
		return nil, connect.NewError(connect.CodeNotFound, err)
	}
	return c, nil
}

func (p procService) List(context.Context, *connect.Request[pb.ListRequest]) (*connect.Response[pb.ListResponse], error) {
	return connect.NewResponse(&pb.ListResponse{Processes: p.s.procs.list()}), nil
}

func (p procService) Update(_ context.Context, req *connect.Request[pb.UpdateRequest]) (*connect.Response[pb.UpdateResponse], error) {
	c, err := p.find(req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	if req.Msg.Pty != nil {
		if err := c.resize(req.Msg.GetPty().GetSize()); err != nil {
			return nil, rpcError(err)
		}
	}
	return connect.NewResponse(&pb.UpdateResponse{}), nil
}

func (p procService) SendInput(_ context.Context, req *connect.Request[pb.SendInputRequest]) (*connect.Response[pb.SendInputResponse], error) {
	c, err := p.find(req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	if err := c.write(req.Msg.GetInput()); err != nil {
		return nil, rpcError(err)
	}
	return connect.NewResponse(&pb.SendInputResponse{}), nil
}

func (p procService) StreamInput(ctx context.Context, stream *connect.ClientStream[pb.StreamInputRequest]) (*connect.Response[pb.StreamInputResponse], error) {
	var c *command
	for stream.Receive() {
		switch ev := stream.Msg().GetEvent().(type) {
		case *pb.StreamInputRequest_Start:
			found, err := p.find(ev.Start.GetProcess())
			if err != nil {
				return nil, err
			}
			c = found
		case *pb.StreamInputRequest_Data:
			if c == nil {
				return nil, connect.NewError(connect.CodeFailedPrecondition, errors.New("input before the start event that names the process"))
			}
			if err := c.write(ev.Data.GetInput()); err != nil {
				return nil, rpcError(err)
			}
		}
	}
	if err := stream.Err(); err != nil {
		return nil, err
	}
	return connect.NewResponse(&pb.StreamInputResponse{}), nil
}

func (p procService) SendSignal(_ context.Context, req *connect.Request[pb.SendSignalRequest]) (*connect.Response[pb.SendSignalResponse], error) {
	var sig syscall.Signal
	switch req.Msg.GetSignal() {
	case pb.Signal_SIGNAL_SIGKILL:
		sig = syscall.SIGKILL
	case pb.Signal_SIGNAL_SIGTERM:
		sig = syscall.SIGTERM
	default:
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("signal %v: want SIGNAL_SIGKILL or SIGNAL_SIGTERM", req.Msg.GetSignal()))
	}
	c, err := p.find(req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	if err := c.signal(sig); err != nil {
		return nil, connect.NewError(connect.CodeNotFound, err)
	}
	return connect.NewResponse(&pb.SendSignalResponse{}), nil
}

func (p procService) CloseStdin(_ context.Context, req *connect.Request[pb.CloseStdinRequest]) (*connect.Response[pb.CloseStdinResponse], error) {
	c, err := p.find(req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	if err := c.closeStdin(); err != nil {
		return nil, rpcError(err)
	}
	return connect.NewResponse(&pb.CloseStdinResponse{}), nil
}
