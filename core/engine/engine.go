package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kernelhost/kernelhost/core"
)

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

	// cwdWarned: the WARN that the default cwd is not a directory where the
	// kernels run was logged (once: it is the same for every context).
	cwdWarned atomic.Bool
	// setupFailureWarned: the WARN that a kernel setup reported a failure
	// was logged (once: every kernel of the host is likely to fail alike).
	setupFailureWarned atomic.Bool
	// loadsAtOnce: languages (string -> true) whose last new kernel's
	// KernelSetup.Check asked for its Load: the next gets Load at once.
	loadsAtOnce sync.Map

	execMu     sync.Mutex
	clock      func() time.Time      // time.Now; tests move it
	executions map[string]*Execution // accepted ones, until they expire
	finished   []retained            // finished ones, oldest first
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
	return c.listed(), nil
}

func (e *Engine) createContext(ctx context.Context, language, cwd string, isDefault bool) (*Context, error) {
	var cwdChoices []string // the cwds to try where the kernel runs
	chooseOnKernel := cwd == "" && e.cfg.DefaultCwdOnKernel
	cwd, err := e.contextCwd(cwd)
	if err != nil {
		return nil, err
	}
	if chooseOnKernel {
		cwdChoices = append([]string{cwd}, e.cfg.DefaultCwdFallbacks...)
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
	c, err := e.startContext(ctx, language, cwd, cwdChoices)
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		k, _ := c.current()
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

// contextCwd checks a context's requested cwd; empty means the default.
func (e *Engine) contextCwd(cwd string) (string, error) {
	// A relative cwd would be relative to wherever the kernel happens to
	// start (the host's own directory for local interpreters): refused.
	if cwd != "" && !path.IsAbs(cwd) {
		return "", newError(core.KindInvalid, fmt.Sprintf("Invalid cwd %s: want an absolute path", core.Quote(cwd)), nil)
	}
	if cwd == "" {
		cwd = e.cfg.DefaultCwd
	}
	if err := ValidateEnvValue("cwd", cwd); err != nil {
		return "", newError(core.KindInvalid, "Invalid cwd: "+err.Error(), err)
	}
	return cwd, nil
}

// startContext starts a kernel for a new context and applies its setup. A
// cwd the kernel cannot enter is a KindInvalid error and leaves no kernel
// behind. cwdChoices, if any, are the cwds its setup tries where the kernel
// runs (Config.DefaultCwdOnKernel).
func (e *Engine) startContext(ctx context.Context, language, cwd string, cwdChoices []string) (*Context, error) {
	startCtx, cancel := context.WithTimeout(ctx, e.cfg.StartTimeout)
	defer cancel()
	k, err := e.cfg.Transport.StartKernel(startCtx, core.KernelSpec{Language: e.kernelLanguage(language), Cwd: cwd})
	if err != nil {
		kind := core.KindInternal
		switch core.KindOf(err) {
		case core.KindInvalid: // e.g. the cwd does not exist
			kind = core.KindInvalid
		case core.KindUnavailable: // e.g. a transport plugin that is restarting
			kind = core.KindUnavailable
		}
		return nil, newError(kind, fmt.Sprintf("Failed to create context: %v", err), err)
	}
	c := newContext(e, ContextInfo{ID: newID(), Language: language, Cwd: cwd})
	c.cwdChoices = cwdChoices
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
	cs := make([]*Context, 0, len(e.contexts))
	first := map[*Context]bool{}
	for _, lang := range []string{"python", "javascript"} {
		if c := e.defaults[lang]; c != nil {
			cs = append(cs, c)
			first[c] = true
		}
	}
	for _, c := range e.contexts {
		if !first[c] {
			cs = append(cs, c)
		}
	}
	e.mu.Unlock()
	out := make([]ContextInfo, len(cs))
	for i, c := range cs {
		out[i] = c.listed()
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
