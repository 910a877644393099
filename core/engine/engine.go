package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path"
	"sync"
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
	// KernelSetup, if set, returns code to run in every new kernel of a
	// language (a NormalizeLanguage name; "" for none), on start and after
	// each restart, as a silent request of its own just before the cwd and
	// env vars are applied: the host's kernel environment (package
	// kernelenv). It must not fail: a failing setup fails the context.
	KernelSetup func(language string) string
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

// Engine owns all contexts. It is safe for concurrent use.
type Engine struct {
	cfg Config
	log *slog.Logger

	mu       sync.Mutex
	contexts []*Context          // creation order
	defaults map[string]*Context // language → its default context
	live     int                 // contexts created or being created, for MaxContexts
	closed   bool

	// defaultLocks make concurrent first uses of a language start one kernel.
	defaultLocks sync.Map // language → *sync.Mutex

	buffered *budget // output buffered for attached streams, all executions

	execMu     sync.Mutex
	clock      func() time.Time      // time.Now; tests move it
	executions map[string]*Execution // accepted ones, until they expire
	finished   []retained            // finished ones, oldest first
}

type retained struct {
	x       *Execution
	expires time.Time
}

// NewEngine returns an engine with no contexts.
func NewEngine(cfg Config) (*Engine, error) {
	if cfg.Transport == nil {
		return nil, errors.New("core: Config.Transport is required")
	}
	cfg.setDefaults()
	if _, err := ParseDisconnectPolicy(string(cfg.DisconnectPolicy)); err != nil {
		return nil, err
	}
	return &Engine{cfg: cfg, log: cfg.Logger, defaults: make(map[string]*Context), executions: make(map[string]*Execution), clock: time.Now,
		buffered: &budget{max: int64(cfg.MaxBufferedBytes)}}, nil
}

// BufferedBytes is the output buffered for attached streams that have not
// read it yet, all executions together (bounded by Config.MaxBufferedBytes).
func (e *Engine) BufferedBytes() int64 { return e.buffered.used.Load() }

// Transport returns the engine's transport.
func (e *Engine) Transport() core.Transport { return e.cfg.Transport }

// StartDefaults creates the default context of each language, in order.
func (e *Engine) StartDefaults(ctx context.Context, languages ...string) error {
	for _, lang := range languages {
		if _, err := e.DefaultContext(ctx, lang); err != nil {
			return err
		}
	}
	return nil
}

// CreateContext starts a new kernel for language in cwd (empty: the default
// cwd), applies the cwd and global env vars, and returns the new context. A cwd
// the kernel cannot enter is a KindInvalid error and leaves no kernel behind.
func (e *Engine) CreateContext(ctx context.Context, language, cwd string) (ContextInfo, error) {
	c, err := e.createContext(ctx, core.NormalizeLanguage(language), cwd, false)
	if err != nil {
		return ContextInfo{}, err
	}
	return c.info, nil
}

func (e *Engine) createContext(ctx context.Context, language, cwd string, isDefault bool) (*Context, error) {
	// A relative cwd would be relative to wherever the kernel happens to
	// start (the host's own directory for local interpreters): refused.
	if cwd != "" && !path.IsAbs(cwd) {
		return nil, newError(core.KindInvalid, fmt.Sprintf("Invalid cwd %s: want an absolute path", core.Quote(cwd)), nil)
	}
	chooseOnKernel := cwd == "" && e.cfg.DefaultCwdOnKernel
	if cwd == "" {
		cwd = e.cfg.DefaultCwd
	}
	if err := ValidateEnvValue("cwd", cwd); err != nil {
		return nil, newError(core.KindInvalid, "Invalid cwd: "+err.Error(), err)
	}
	if e.isClosed() {
		return nil, newError(core.KindUnavailable, "The server is shutting down", nil)
	}
	if err := e.reserveContext(); err != nil {
		return nil, err
	}
	created := false
	defer func() {
		if !created {
			e.releaseContext()
		}
	}()
	startCtx, cancel := context.WithTimeout(ctx, e.cfg.StartTimeout)
	defer cancel()
	k, err := e.cfg.Transport.StartKernel(startCtx, core.KernelSpec{Language: e.kernelLanguage(language), Cwd: cwd})
	if err != nil {
		kind := core.KindInternal
		if core.KindOf(err) == core.KindInvalid { // e.g. the cwd does not exist
			kind = core.KindInvalid
		}
		return nil, newError(kind, fmt.Sprintf("Failed to create context: %v", err), err)
	}
	c := newContext(e, ContextInfo{ID: newID(), Language: language, Cwd: cwd})
	if chooseOnKernel {
		c.cwdChoices = append([]string{cwd}, e.cfg.DefaultCwdFallbacks...)
	}
	c.attach(k)
	if err := c.setup(startCtx); err != nil {
		shutdownCtx, cancel := context.WithTimeout(context.Background(), e.cfg.HelperTimeout)
		defer cancel()
		_ = k.Shutdown(shutdownCtx)
		var se *setupError
		if errors.As(err, &se) {
			return nil, newError(core.KindInvalid, fmt.Sprintf("Failed to set working directory %s: %v", core.Quote(cwd), se.err), err)
		}
		return nil, newError(core.KindInternal, fmt.Sprintf("Failed to create context: %v", err), err)
	}
	if c.chosenCwd != "" { // not published yet: nobody reads info meanwhile
		c.info.Cwd = c.chosenCwd
	}
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		_ = k.Shutdown(context.Background())
		return nil, newError(core.KindUnavailable, "The server is shutting down", nil)
	}
	e.contexts = append(e.contexts, c)
	created = true
	if isDefault {
		e.defaults[language] = c
	}
	e.mu.Unlock()
	go c.loop()
	e.log.InfoContext(ctx, "context created", "context_id", c.info.ID, "language", language, "default", isDefault)
	return c, nil
}

// reserveContext counts a context being created against MaxContexts, so
// that concurrent creations cannot overshoot it.
func (e *Engine) reserveContext() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if max := e.cfg.MaxContexts; max > 0 && e.live >= max {
		return newError(core.KindQueueFull, fmt.Sprintf("There are already %d contexts, the most this server runs; delete one first", max), nil)
	}
	e.live++
	return nil
}

func (e *Engine) releaseContext() {
	e.mu.Lock()
	e.live--
	e.mu.Unlock()
}

func (e *Engine) isClosed() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.closed
}

// DefaultContext returns language's default context, creating it on first use.
func (e *Engine) DefaultContext(ctx context.Context, language string) (*Context, error) {
	language = core.NormalizeLanguage(language)
	e.mu.Lock()
	c := e.defaults[language]
	e.mu.Unlock()
	if c != nil {
		return c, nil
	}
	lock, _ := e.defaultLocks.LoadOrStore(language, &sync.Mutex{})
	lock.(*sync.Mutex).Lock()
	defer lock.(*sync.Mutex).Unlock()
	e.mu.Lock()
	c = e.defaults[language]
	e.mu.Unlock()
	if c != nil {
		return c, nil
	}
	return e.createContext(ctx, language, "", true)
}

// Lookup returns the context with this id, or a KindNotFound error.
func (e *Engine) Lookup(id string) (*Context, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, c := range e.contexts {
		if c.info.ID == id {
			return c, nil
		}
	}
	return nil, newError(core.KindNotFound, fmt.Sprintf("Context %s not found", core.ShowID(id)), nil)
}

// Contexts lists live contexts: the python and javascript defaults first,
// then the others in creation order. A restart never moves an entry.
func (e *Engine) Contexts() []ContextInfo {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]ContextInfo, 0, len(e.contexts))
	first := map[*Context]bool{}
	for _, lang := range []string{"python", "javascript"} {
		if c := e.defaults[lang]; c != nil {
			out = append(out, c.info)
			first[c] = true
		}
	}
	for _, c := range e.contexts {
		if !first[c] {
			out = append(out, c.info)
		}
	}
	return out
}

// Restart restarts a context's kernel: the running execution ends with an
// error, the state is gone, cwd and global env vars are applied again.
func (e *Engine) Restart(ctx context.Context, id string) error {
	c, err := e.Lookup(id)
	if err != nil {
		return err
	}
	return c.requestControl(ctx, opRestart)
}

// Interrupt interrupts the code running in a context, if any.
func (e *Engine) Interrupt(ctx context.Context, id string) error {
	c, err := e.Lookup(id)
	if err != nil {
		return err
	}
	if err := c.interrupt(ctx); err != nil {
		return newError(core.KindInternal, fmt.Sprintf("Failed to interrupt context %s: %v", id, err), err)
	}
	return nil
}

// Delete shuts a context's kernel down and forgets the context. Deleting a
// default context is allowed: the next use of its language creates a new one.
func (e *Engine) Delete(ctx context.Context, id string) error {
	c, err := e.Lookup(id)
	if err != nil {
		return err
	}
	e.forget(c)
	err = c.requestControl(ctx, opDelete)
	if err == nil {
		select {
		case <-c.loopDone:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return err
}

func (e *Engine) forget(c *Context) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for i, x := range e.contexts {
		if x == c {
			e.contexts = append(e.contexts[:i], e.contexts[i+1:]...)
			e.live--
			break
		}
	}
	for lang, d := range e.defaults {
		if d == c {
			delete(e.defaults, lang)
		}
	}
}

// Execute validates req, resolves its context (creating a default one on first
// use), runs the env-var policy and queues the execution. The returned errors
// are *Error with a Kind; after it returns nil the outcome is in the stream.
// ctx is the client's: when it ends, a queued execution leaves the queue and a
// running one gets the disconnect policy.
func (e *Engine) Execute(ctx context.Context, req ExecRequest) (*Execution, error) {
	if req.ContextID != "" && req.Language != "" {
		return nil, newError(core.KindInvalid, "Only one of context_id or language can be provided", nil)
	}
	if err := validateEnv(req.EnvVars); err != nil {
		return nil, newError(core.KindInvalid, err.Error(), err)
	}
	if err := e.checkEnvSize(req.EnvVars); err != nil {
		return nil, newError(core.KindInvalid, err.Error(), err)
	}
	// The code is checked against the language before a default context is
	// started for it: a refused request leaves the contexts as they were.
	var c *Context
	var err error
	language := core.NormalizeLanguage(req.Language)
	if req.ContextID != "" {
		if c, err = e.Lookup(req.ContextID); err != nil {
			return nil, err
		}
		language = c.info.Language
	}
	if err := validateCode(language, req.Code); err != nil {
		return nil, newError(core.KindInvalid, err.Error(), err)
	}
	if c == nil {
		if c, err = e.DefaultContext(ctx, language); err != nil {
			return nil, err
		}
	}
	env := req.EnvVars
	if len(env) > 0 && !SupportsEnv(c.info.Language) {
		return nil, newError(core.KindInvalid, fmt.Sprintf("env_vars are not supported for language %q", c.info.Language), nil)
	}
	if e.cfg.Policy != nil {
		if env, err = e.applyPolicy(ctx, c, req); err != nil {
			return nil, err
		}
	}
	timeout := req.Timeout
	if timeout <= 0 {
		timeout = e.cfg.ExecutionTimeout
	}
	x := &Execution{
		id:       newID(),
		ctx:      ctx,
		context:  c,
		env:      env,
		code:     req.Code,
		timeout:  timeout,
		out:      newOutputLog(e.cfg.MaxOutputBytes, e.cfg.ReplayBytes, e.buffered),
		queuedAt: time.Now(),
		outcome:  OutcomeOK,
	}
	x.firstGen, _ = x.out.attach(0)
	x.state = ExecutionState{ID: x.id, ContextID: c.info.ID, Status: StatusQueued, CreatedAt: x.queuedAt.UTC()}
	e.register(x)
	// The first stream is its client's: it detaches when the client leaves,
	// and the execution then buffers at most ReplayBytes for a re-attach.
	x.stopDetachWatch = context.AfterFunc(ctx, func() { x.out.detach(x.firstGen) })
	if err := c.submit(x); err != nil {
		x.stopDetachWatch()
		e.unregister(x)
		return nil, err
	}
	return x, nil
}

func (e *Engine) applyPolicy(ctx context.Context, c *Context, req ExecRequest) (map[string]string, error) {
	c.mu.Lock()
	globals := c.globals
	c.mu.Unlock()
	d, err := e.cfg.Policy.Evaluate(ctx, PolicyInput{
		ContextID: c.info.ID,
		Language:  c.info.Language,
		Cwd:       c.info.Cwd,
		EnvVars:   nonNil(req.EnvVars),
		GlobalEnv: nonNil(globals),
		Metadata:  nonNil(req.Metadata),
	})
	if err != nil {
		return nil, newError(core.KindRejected, "Env var policy failed: "+err.Error(), err)
	}
	if len(d.Rejections) > 0 {
		msg := "Env vars rejected by policy:"
		for _, r := range d.Rejections {
			msg += fmt.Sprintf(" %s (%s);", r.Key, r.Reason)
		}
		return nil, newError(core.KindRejected, msg[:len(msg)-1], nil)
	}
	env := req.EnvVars
	if d.EnvVars != nil {
		env = d.EnvVars
	}
	if err := validateEnv(env); err != nil {
		return nil, newError(core.KindRejected, "Env var policy answered an invalid env var: "+err.Error(), err)
	}
	if err := e.checkEnvSize(env); err != nil {
		return nil, newError(core.KindRejected, "Env var policy answered too many env vars: "+err.Error(), err)
	}
	if len(env) > 0 && !SupportsEnv(c.info.Language) {
		return nil, newError(core.KindInvalid, fmt.Sprintf("env_vars are not supported for language %q", c.info.Language), nil)
	}
	return env, nil
}

func nonNil(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

// Close shuts every context down: running executions end with an error line,
// queued ones too, and every kernel is shut down. It waits, bounded by ctx.
func (e *Engine) Close(ctx context.Context) error {
	e.mu.Lock()
	e.closed = true
	contexts := append([]*Context(nil), e.contexts...)
	e.contexts = nil
	e.defaults = map[string]*Context{}
	e.mu.Unlock()
	var wg sync.WaitGroup
	errs := make([]error, len(contexts))
	for i, c := range contexts {
		wg.Go(func() {
			if err := c.requestControl(ctx, opDelete); err != nil && core.KindOf(err) != core.KindNotFound {
				errs[i] = err
				return
			}
			select {
			case <-c.loopDone:
			case <-ctx.Done():
				errs[i] = ctx.Err()
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Execution returns the execution with the given id, while it is queued or
// running and for Config.ReplayTTL after it finished.
func (e *Engine) Execution(id string) (*Execution, error) {
	e.execMu.Lock()
	defer e.execMu.Unlock()
	e.expireLocked(e.clock())
	if x, ok := e.executions[id]; ok {
		return x, nil
	}
	return nil, newError(core.KindNotFound, fmt.Sprintf("Execution %s not found (finished executions are kept for %s)", core.ShowID(id), e.cfg.ReplayTTL), nil)
}

func (e *Engine) register(x *Execution) {
	e.execMu.Lock()
	defer e.execMu.Unlock()
	e.expireLocked(e.clock())
	e.executions[x.id] = x
}

func (e *Engine) unregister(x *Execution) {
	e.execMu.Lock()
	defer e.execMu.Unlock()
	delete(e.executions, x.id)
}

// retain keeps the finished x for ReplayTTL, forgetting the oldest finished
// executions past maxRetainedExecutions.
func (e *Engine) retain(x *Execution) {
	e.execMu.Lock()
	defer e.execMu.Unlock()
	now := e.clock()
	e.finished = append(e.finished, retained{x: x, expires: now.Add(e.cfg.ReplayTTL)})
	for len(e.finished) > maxRetainedExecutions {
		delete(e.executions, e.finished[0].x.id)
		e.finished[0] = retained{}
		e.finished = e.finished[1:]
	}
	e.expireLocked(now)
}

// expireLocked forgets the finished executions whose time is up. Expiry is
// lazy (on the next call that looks), so no timer or goroutine is needed.
func (e *Engine) expireLocked(now time.Time) {
	n := 0
	for n < len(e.finished) && !now.Before(e.finished[n].expires) {
		delete(e.executions, e.finished[n].x.id)
		e.finished[n] = retained{}
		n++
	}
	e.finished = e.finished[n:]
}
