package pluginrpc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/kernelhost/kernelhost/core"
	pb "github.com/kernelhost/kernelhost/plugins/transportplugin/proto"
)

// Config says which plugin to launch and how to supervise it. Zero durations
// take the defaults named on each field.
type Config struct {
	// Path is the plugin executable.
	Path string
	// Args are passed to the plugin (go-plugin itself uses none).
	Args []string
	// Env is added to the plugin's environment, after the host's own minus
	// the host's KERNELHOST_* variables (its settings and secrets, such as
	// the access token), which a plugin and its interpreters never see.
	Env []string
	// Settings are passed to the plugin (Settings, ServeConfigured) over
	// the protocol's mTLS connection at each start, never in its environment
	// (which /proc/<pid>/environ shows to processes of the same user, and
	// which its interpreters would inherit): for secrets such as a Jupyter
	// token. Each value is a string, bool, int, int64, time.Duration or
	// map[string]string.
	Settings map[string]any
	// Name labels the plugin in logs and errors. Default: the base of Path.
	Name string
	// Logger receives go-plugin's logs and the plugin's own (its hclog JSON
	// stderr lines, re-logged at their level with logger=<plugin name>).
	// Default: slog.Default(). Messages below LogLevel are dropped.
	Logger *slog.Logger
	// LogLevel is the lowest level taken from the plugin side. Default: Info
	// (go-plugin's own default logger would log at Trace).
	LogLevel slog.Level

	// StartTimeout bounds one start of the plugin: process start, handshake
	// and Describe. Default: 30 s.
	StartTimeout time.Duration
	// CallTimeout bounds each call to the plugin (Execute, Interrupt,
	// Restart, Shutdown), on top of the caller's context, so a hanging plugin
	// cannot hang the host. Default: 60 s.
	CallTimeout time.Duration
	// StartKernelTimeout bounds StartKernel, including waiting for a
	// restarting plugin to be back. Default: 120 s.
	StartKernelTimeout time.Duration
	// MinBackoff and MaxBackoff bound the wait before each restart of a plugin
	// that exited: it starts at MinBackoff and doubles while the plugin keeps
	// dying young (under a minute), up to MaxBackoff. Defaults: 100 ms, 10 s.
	MinBackoff time.Duration
	MaxBackoff time.Duration

	// OnRestart, if set, is called each time the plugin was started again
	// after it exited, before calls can reach the new process (for a restart
	// counter). It runs on the supervisor's goroutine: it must be quick.
	OnRestart func()

	// GRPCKernelStreams carries kernels on gRPC Kernel streams even when the
	// plugin offers its kernel socket. Slower (docs/benchmarks-plugins.md,
	// echo-grpc); for comparison and for testing that path.
	GRPCKernelStreams bool
}

func (c Config) withDefaults() Config {
	if c.Name == "" {
		c.Name = filepath.Base(c.Path)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.StartTimeout, 30*time.Second)
	def(&c.CallTimeout, 60*time.Second)
	def(&c.StartKernelTimeout, 120*time.Second)
	def(&c.MinBackoff, 100*time.Millisecond)
	def(&c.MaxBackoff, 10*time.Second)
	return c
}

// hclogLevel maps the configured slog level to the hclog level go-plugin
// filters the plugin's lines with.
func hclogLevel(l slog.Level) hclog.Level {
	switch {
	case l <= slog.LevelDebug-4:
		return hclog.Trace
	case l <= slog.LevelDebug:
		return hclog.Debug
	case l <= slog.LevelInfo:
		return hclog.Info
	case l <= slog.LevelWarn:
		return hclog.Warn
	default:
		return hclog.Error
	}
}

// youngDeath is how long a plugin must have lived for its exit to reset the
// restart backoff.
const youngDeath = time.Minute

// Supervised is a transport plugin under supervision. It implements
// core.Transport; its kernels live in the current plugin process.
//
// When the plugin process exits, every kernel it held gets a status message
// with State core.StateDead and ParentID "" and then its Messages channel is
// closed (the kernel is lost for good, as core.Kernel's contract describes);
// calls on such a kernel fail. The supervisor starts the plugin again with
// bounded backoff; StartKernel waits for it to be back. Nothing a plugin does
// makes the host exit.
type Supervised struct {
	cfg Config
	log *slog.Logger

	mu     sync.Mutex
	inst   *instance     // nil while the plugin is down
	up     chan struct{} // closed once inst is set; replaced when it goes down
	info   core.TransportInfo
	closed bool

	stop     chan struct{} // closed by Close
	loopDone chan struct{}
	pumps    sync.WaitGroup // kernel message pumps
	// sockets is where go-plugin makes each plugin process's socket
	// directory (holdSocketDir), "" for its default.
	sockets string

	kernelIDs atomic.Uint64 // the last kernel id given (Start.kernel_id)
}

var (
	_ core.Transport = (*Supervised)(nil)
	_ core.Forker    = (*Supervised)(nil)
)

// instance is one running plugin process.
type instance struct {
	client  *plugin.Client
	proc    *procRunner
	rpc     pb.TransportClient
	started time.Time
	// The plugin's kernel socket and its token, from Describe ("" if none).
	kernelSocket string
	kernelToken  []byte
	// ctx is cancelled when the process is gone; kernel streams hang off it.
	ctx    context.Context
	cancel context.CancelFunc
	downed chan struct{} // closed once the supervisor took this instance down
}

// Launch starts the plugin at cfg.Path, completes the handshake and asks it to
// describe itself. A plugin that cannot start, fails the handshake (wrong
// magic cookie, no common protocol version, a stray line on stdout) or does
// not describe itself within StartTimeout is an error here, at start-up.
// ctx bounds the launch only; Close ends the supervision.
func Launch(ctx context.Context, cfg Config) (*Supervised, error) {
	cfg = cfg.withDefaults()
	if cfg.Path == "" {
		return nil, errors.New("transport plugin: Config.Path is empty")
	}
	s := &Supervised{
		cfg:      cfg,
		log:      cfg.Logger.With("plugin", cfg.Name),
		up:       make(chan struct{}),
		stop:     make(chan struct{}),
		loopDone: make(chan struct{}),
		sockets:  holdSocketDir(cfg.Logger),
	}
	inst, info, err := s.start(ctx)
	if err != nil {
		releaseSocketDir()
		return nil, err
	}
	s.info = info
	s.setUp(inst)
	s.log.Info("transport plugin started", "pid", inst.proc.pid(), "name", info.Name,
		"version", info.Version, "languages", info.Languages, "protocol", inst.client.NegotiatedVersion())
	go s.supervise(inst)
	return s, nil
}

// Info describes the transport as the plugin first described itself.
func (s *Supervised) Info() core.TransportInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.info
}

// PID is the current plugin process's id, 0 while it is down.
func (s *Supervised) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.inst == nil {
		return 0
	}
	return s.inst.proc.pid()
}

// Ready waits until the plugin is running (it may be restarting).
func (s *Supervised) Ready(ctx context.Context) error {
	_, err := s.current(ctx)
	return err
}

// Close stops supervising and stops the plugin (stopPlugin): it stops its
// kernels and its transport and exits, or is killed after pluginStopGrace.
// Kernels still open get their Messages channels closed. Close returns once
// the plugin process is gone; it is safe to call more than once.
func (s *Supervised) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		<-s.loopDone
		return nil
	}
	s.closed = true
	close(s.stop)
	s.mu.Unlock()
	<-s.loopDone
	s.pumps.Wait()
	releaseSocketDir()
	return nil
}

// pluginStopGrace bounds a plugin's own shutdown (stopPlugin): its kernels'
// (kernelShutdownTimeout) and its transport's Close, which the Jupyter
// transport spends waiting for start requests still open (10 s), deleting
// the kernels they are answered with, then every kernel on record (10 s).
const pluginStopGrace = 25 * time.Second

// stopPlugin tells the plugin to stop its kernels and its transport and
// exit (SIGTERM: stopWhenTold), waits pluginStopGrace for that, then kills it.
// go-plugin's Kill alone gives the plugin 2 s, and a Jupyter transport
// killed while it waited for a start the host had given up on left that
// start's kernel on the gateway.
func stopPlugin(inst *instance) {
	if pid := inst.proc.pid(); pid > 0 && !inst.proc.gone() && syscall.Kill(pid, syscall.SIGTERM) == nil {
		t := time.NewTimer(pluginStopGrace)
		select {
		case <-inst.proc.exited:
		case <-t.C:
		}
		t.Stop()
	}
	inst.client.Kill()
}

var errClosed = errors.New("transport plugin supervisor is closed")

// unavailable is an error of the supervisor's own: the plugin is not there
// to take the call (closed, or restarting for longer than the call may
// wait). Its kind tells the client to try again later (HTTP 503), as for
// an engine that is shutting down, rather than that something broke.
func unavailable(err error) error {
	return &core.Error{Kind: core.KindUnavailable, Msg: err.Error(), Err: err}
}

// current returns the running instance, waiting while the plugin restarts.
func (s *Supervised) current(ctx context.Context) (*instance, error) {
	for {
		s.mu.Lock()
		inst, up, closed := s.inst, s.up, s.closed
		s.mu.Unlock()
		if closed {
			return nil, unavailable(fmt.Errorf("transport plugin %s: %w", s.cfg.Name, errClosed))
		}
		if inst != nil {
			if !inst.proc.gone() {
				return inst, nil
			}
			// Dead, but the supervisor has not taken it down yet.
			select {
			case <-inst.downed:
				continue
			case <-s.stop:
				continue
			case <-ctx.Done():
				return nil, unavailable(fmt.Errorf("transport plugin %s exited and was not back in time: %w", s.cfg.Name, ctx.Err()))
			}
		}
		select {
		case <-up:
		case <-s.stop:
		case <-ctx.Done():
			return nil, unavailable(fmt.Errorf("transport plugin %s is restarting and was not back in time: %w", s.cfg.Name, ctx.Err()))
		}
	}
}

func (s *Supervised) setUp(inst *instance) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inst = inst
	close(s.up)
}

func (s *Supervised) setDown() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inst = nil
	s.up = make(chan struct{})
}

// supervise owns the plugin process: it waits for it to exit, restarts it,
// and kills it on Close.
func (s *Supervised) supervise(inst *instance) {
	defer close(s.loopDone)
	backoff := s.cfg.MinBackoff
	for {
		select {
		case <-s.stop:
			s.setDown()
			stopPlugin(inst)
			inst.cancel()
			return
		case <-inst.proc.exited:
		}
		lived := time.Since(inst.started)
		s.setDown()
		close(inst.downed)
		inst.cancel() // ends the kernels' streams at once
		inst.client.Kill()
		s.log.Error("transport plugin exited; its kernels are lost; restarting it",
			"pid", inst.proc.pid(), "exit", fmt.Sprint(inst.proc.exitError()), "lived", lived.Round(time.Millisecond))
		if lived >= youngDeath {
			backoff = s.cfg.MinBackoff
		}
		for {
			t := time.NewTimer(backoff)
			select {
			case <-s.stop:
				t.Stop()
				return
			case <-t.C:
			}
			backoff = min(2*backoff, s.cfg.MaxBackoff)
			next, info, err := s.start(context.Background())
			if err != nil {
				s.log.Error("transport plugin restart failed", "error", err, "next_attempt_in", backoff)
				continue
			}
			if old := s.Info(); info.Name != old.Name || !slices.Equal(info.Languages, old.Languages) {
				s.log.Warn("restarted transport plugin describes itself differently; keeping the first description",
					"name", info.Name, "languages", info.Languages)
			}
			if s.cfg.OnRestart != nil {
				s.cfg.OnRestart()
			}
			s.setUp(next)
			s.log.Info("transport plugin restarted", "pid", next.proc.pid())
			inst = next
			break
		}
	}
}

// start launches one plugin process and describes it.
func (s *Supervised) start(ctx context.Context) (*instance, core.TransportInfo, error) {
	settings, err := settingsToPB(s.cfg.Settings)
	if err != nil {
		return nil, core.TransportInfo{}, fmt.Errorf("transport plugin %s: %w", s.cfg.Name, err)
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.StartTimeout)
	defer cancel()
	hl := newSlogAdapter(s.cfg.Logger.With("plugin", s.cfg.Name), "", hclogLevel(s.cfg.LogLevel))
	stderr := &tailBuffer{max: 4096}
	var proc *procRunner
	client := plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:  handshake,
		VersionedPlugins: hostPlugins(),
		RunnerFunc:       runnerFunc(s.cfg.Path, s.cfg.Args, s.cfg.Env, &proc),
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		AutoMTLS:         true,
		UnixSocketConfig: &plugin.UnixSocketConfig{TempDir: s.sockets},
		Logger:           hl,
		StartTimeout:     s.cfg.StartTimeout,
		Stderr:           stderr,
		SyncStdout:       lineLogger{a: hl.With("stream", "stdout").(*slogAdapter), level: hclog.Info},
		SyncStderr:       lineLogger{a: hl.With("stream", "stderr").(*slogAdapter), level: hclog.Info},
		GRPCDialOptions: []grpc.DialOption{
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxMessageBytes), grpc.MaxCallSendMsgSize(MaxMessageBytes)),
			grpc.WithInitialWindowSize(windowSize), grpc.WithInitialConnWindowSize(windowSize),
		},
	})
	fail := func(err error) (*instance, core.TransportInfo, error) {
		client.Kill()
		return nil, core.TransportInfo{}, s.startError(err, stderr.String())
	}
	rpcClient, err := client.Client()
	if err != nil {
		return fail(err)
	}
	raw, err := rpcClient.Dispense(pluginName)
	if err != nil {
		return fail(err)
	}
	tc := raw.(pb.TransportClient)
	if _, err := tc.Configure(ctx, &pb.ConfigureRequest{Settings: settings}); err != nil {
		return fail(fmt.Errorf("configure: %s", status.Convert(err).Message()))
	}
	d, err := tc.Describe(ctx, &pb.DescribeRequest{})
	if err != nil {
		return fail(fmt.Errorf("describe: %w", err))
	}
	ictx, icancel := context.WithCancel(context.Background())
	inst := &instance{client: client, proc: proc, rpc: tc, started: time.Now(), ctx: ictx, cancel: icancel, downed: make(chan struct{}),
		kernelSocket: d.KernelSocket, kernelToken: d.KernelToken}
	return inst, core.TransportInfo{Name: d.Name, Version: d.Version, Languages: d.Languages}, nil
}

// startError turns go-plugin's start-up errors into one clear line.
func (s *Supervised) startError(err error, stderr string) error {
	msg := err.Error()
	first, _, _ := strings.Cut(msg, "\n")
	hint := ""
	switch {
	case strings.HasPrefix(msg, "Unrecognized remote plugin message") &&
		strings.TrimSpace(strings.TrimPrefix(first, "Unrecognized remote plugin message:")) == "":
		// go-plugin saw stdout close without a line: the process ended.
		hint = "the plugin exited during the handshake (not a kernelhost transport plugin, wrong magic cookie, or it crashed); "
	case strings.HasPrefix(msg, "Unrecognized remote plugin message"):
		hint = "the plugin wrote to stdout before the go-plugin handshake (a plugin must keep stdout clean and log to stderr); "
	case strings.HasPrefix(msg, "incompatible API version"):
		hint = fmt.Sprintf("no common transport plugin protocol version (host speaks %d); ", ProtocolVersion)
	case strings.Contains(msg, "plugin exited before we could connect"):
		hint = "the plugin exited during the handshake (not a kernelhost transport plugin, or it crashed); "
	}
	out := fmt.Sprintf("start transport plugin %s (%s): %s%s", s.cfg.Name, s.cfg.Path, hint, first)
	if t := strings.TrimSpace(plainStderr(stderr)); t != "" {
		out += "; plugin stderr: " + strings.ReplaceAll(t, "\n", " | ")
	}
	return &startErr{msg: out, err: err}
}

// plainStderr is the plugin's stderr less its hclog JSON lines: those are
// logged under the plugin's name already, and in an error they only hid the
// reason (a configure error carried the plugin's debug JSON). What is left
// is what the plugin wrote otherwise: a panic, a crash.
func plainStderr(s string) string {
	lines := strings.Split(s, "\n")
	keep := lines[:0]
	for _, l := range lines {
		if !strings.HasPrefix(strings.TrimSpace(l), `{"@`) {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}

type startErr struct {
	msg string
	err error
}

func (e *startErr) Error() string { return e.msg }
func (e *startErr) Unwrap() error { return e.err }

// tailBuffer keeps the last max bytes written to it (the plugin's stderr, for
// start-up errors).
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   bytes.Buffer
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b.Write(p)
	if over := t.b.Len() - t.max; over > 0 {
		t.b.Next(over)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.b.String()
}
