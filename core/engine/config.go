package engine

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/kernelhost/kernelhost/core"
)

// DisconnectPolicy says what happens to running code when its client leaves.
type DisconnectPolicy string

const (
	// DisconnectInterrupt interrupts the kernel (what E2B does). If the code
	// does not stop within Config.InterruptGrace, the kernel is restarted.
	DisconnectInterrupt DisconnectPolicy = "interrupt"
	// DisconnectContinue lets the code run to its end; its output is drained.
	DisconnectContinue DisconnectPolicy = "continue"
)

// ParseDisconnectPolicy validates a policy name.
func ParseDisconnectPolicy(s string) (DisconnectPolicy, error) {
	switch p := DisconnectPolicy(s); p {
	case DisconnectInterrupt, DisconnectContinue:
		return p, nil
	}
	return "", fmt.Errorf("unknown disconnect policy %q (want %q or %q)", s, DisconnectInterrupt, DisconnectContinue)
}

// Config configures an Engine. Zero values get the defaults written on each field.
type Config struct {
	Transport core.Transport // required
	Logger    *slog.Logger   // default: discard

	// DefaultCwd is the cwd of contexts created without one. Default "/home/user".
	DefaultCwd string
	// DefaultCwdOnKernel makes DefaultCwd a preference checked where the
	// kernel runs, for transports whose kernels may run on another machine
	// (a Jupyter server or gateway), whose directories the host cannot
	// see: a context created without a cwd enters the first of DefaultCwd
	// and DefaultCwdFallbacks that is a directory there, else stays in the
	// kernel's own working directory, and its cwd (ContextInfo.Cwd) is where
	// it ended up; a log line says so when that is not DefaultCwd. A cwd a
	// client asked for is never replaced: a kernel that cannot enter it
	// fails the context's creation.
	DefaultCwdOnKernel  bool
	DefaultCwdFallbacks []string
	// GlobalEnv returns the env vars every context gets, applied after its
	// kernel starts or restarts. Invalid keys are skipped with a log line.
	GlobalEnv func(ctx context.Context) (map[string]string, error)
	// KernelSetup, if set, returns how to set up every new kernel of a
	// language (a NormalizeLanguage name; a zero KernelSetup: nothing), on
	// start and after each restart, just before the cwd and env vars are
	// applied: the host's kernel-side python (package kernelpy).
	KernelSetup func(language string) KernelSetup
	// Policy, if set, decides on every execution's env vars before it is queued.
	Policy EnvPolicy
	// Observer, if set, is told about queues and executions (for metrics).
	Observer Observer

	QueueDepth       int           // executions waiting per context; default 32
	MaxContexts      int           // live contexts at most; 0: no limit
	ExecutionTimeout time.Duration // default bound on an execution's run on the kernel; 0: none
	MaxOutputBytes   int           // output buffered per execution for a slow client; default 64 MiB
	// MaxBufferedBytes bounds the output buffered for slow clients across
	// all executions (what MaxOutputBytes bounds per execution). A stream
	// whose output would pass it is cut (its Next returns ErrSlowReader):
	// its buffer shrinks to ReplayBytes and the execution goes on, to be
	// re-attached. Default 256 MiB; negative: no bound.
	MaxBufferedBytes int
	DisconnectPolicy DisconnectPolicy // default DisconnectInterrupt
	InterruptGrace   time.Duration    // default 5s: after that an ignored interrupt becomes a restart
	HelperTimeout    time.Duration    // bound on the engine's own requests (cwd, env); default 30s
	StartTimeout     time.Duration    // bound on starting or restarting a kernel; default 60s
	// MaxEnvVars and MaxEnvBytes bound one execution's env vars: their
	// number, and the bytes of their names and values together (after the
	// policy's rewrite too). Past them the request is refused (KindInvalid):
	// every key costs the kernel work in the set and reset snippets, and
	// putenv in the interpreter's C library is linear in the size of the
	// environment. Defaults 1,000 and 1 MiB.
	MaxEnvVars  int
	MaxEnvBytes int

	// ReplayBytes bounds the outputs kept per execution for a client that
	// re-attaches (Execution.Attach): those already read, and all of them
	// once no stream is attached. Default 256 KiB (each output counts its
	// text and about 200 bytes of bookkeeping).
	ReplayBytes int
	// ReplayTTL is how long a finished execution, with its buffered outputs,
	// stays available (to Engine.Execution and Attach). Default 5 minutes. At
	// most 128 finished ones are kept (maxRetainedExecutions); the oldest go first.
	ReplayTTL time.Duration
}

// maxRetainedExecutions bounds the finished executions kept for ReplayTTL, so
// that their buffers take at most this many times Config.ReplayBytes.
const maxRetainedExecutions = 128

// Defaults is the Config a zero one becomes, every field at its default:
// the host's settings table takes the defaults of the engine's settings
// from it, so each is written once, here.
func Defaults() Config {
	var c Config
	c.setDefaults()
	return c
}

func (c *Config) setDefaults() {
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if c.Observer == nil {
		c.Observer = nopObserver{}
	}
	if c.DefaultCwd == "" {
		c.DefaultCwd = "/home/user"
	}
	if c.QueueDepth <= 0 {
		c.QueueDepth = 32
	}
	if c.MaxOutputBytes <= 0 {
		c.MaxOutputBytes = 64 << 20
	}
	if c.MaxBufferedBytes == 0 {
		c.MaxBufferedBytes = 256 << 20
	}
	if c.DisconnectPolicy == "" {
		c.DisconnectPolicy = DisconnectInterrupt
	}
	if c.InterruptGrace <= 0 {
		c.InterruptGrace = 5 * time.Second
	}
	if c.HelperTimeout <= 0 {
		c.HelperTimeout = 30 * time.Second
	}
	if c.StartTimeout <= 0 {
		c.StartTimeout = 60 * time.Second
	}
	if c.MaxEnvVars <= 0 {
		c.MaxEnvVars = 1000
	}
	if c.MaxEnvBytes <= 0 {
		c.MaxEnvBytes = 1 << 20
	}
	if c.ReplayBytes <= 0 {
		c.ReplayBytes = 256 << 10
	}
	if c.ReplayTTL <= 0 {
		c.ReplayTTL = 5 * time.Minute
	}
}

// KernelSetup is code the engine runs in a new kernel, as silent requests
// of their own. Check runs first; Load follows only where Check printed
// KernelSetupLoadWanted on stdout, so that a transport whose kernels come
// with what Load carries (the subprocess python driver loads kernelhost's
// python package from its cache) is not sent it on every start. Once a
// kernel wanted Load, the next of its language gets Load without Check:
// Load must leave a kernel that has what it carries as it is.
//
// What either writes on stderr says that something failed to load: the
// context works on without it; the engine logs the text (the first time at
// WARN, then at DEBUG) and shows it on the stderr of the context's next
// execution. An error the code raises fails the context's start, so the
// code must catch its own.
type KernelSetup struct {
	Check string
	Load  string
}

// KernelSetupLoadWanted is what a KernelSetup's Check prints on a kernel
// that needs its Load.
const KernelSetupLoadWanted = "load\n"
