package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/kernelhost/kernelhost/core"
)

// Execute validates req, resolves its context (creating a default one on first
// use), runs the env-var policy and queues the execution. The returned errors
// are *Error with a Kind; after it returns nil the outcome is in the stream.
// ctx is the client's: when it ends, a queued execution leaves the queue and a
// running one gets the disconnect policy.
func (e *Engine) Execute(ctx context.Context, req ExecRequest) (*Execution, error) {
	c, err := e.admit(ctx, req)
	if err != nil {
		return nil, err
	}
	env := req.EnvVars
	if e.cfg.Policy != nil {
		if env, err = e.applyPolicy(ctx, c, req); err != nil {
			return nil, err
		}
	}
	x := e.newExecution(ctx, c, req, env)
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

// admit checks req and resolves its context, creating its language's
// default context on first use. The code is checked against the language
// before a default context is started for it: a refused request leaves the
// contexts as they were.
func (e *Engine) admit(ctx context.Context, req ExecRequest) (*Context, error) {
	if req.ContextID != "" && req.Language != "" {
		return nil, newError(core.KindInvalid, "Only one of context_id or language can be provided", nil)
	}
	if err := validateEnv(req.EnvVars); err != nil {
		return nil, newError(core.KindInvalid, err.Error(), err)
	}
	if err := e.checkEnvSize(req.EnvVars); err != nil {
		return nil, newError(core.KindInvalid, err.Error(), err)
	}
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
	if len(req.EnvVars) > 0 && !SupportsEnv(c.info.Language) {
		return nil, newError(core.KindInvalid, fmt.Sprintf("env_vars are not supported for language %q", c.info.Language), nil)
	}
	return c, nil
}

// newExecution makes the queued execution of req in c, with env as its env
// vars (the policy's answer, if any).
func (e *Engine) newExecution(ctx context.Context, c *Context, req ExecRequest, env map[string]string) *Execution {
	timeout := req.Timeout
	if timeout <= 0 {
		timeout = e.cfg.ExecutionTimeout
	}
	x := &Execution{
		id:               newID(),
		ctx:              ctx,
		context:          c,
		env:              env,
		code:             req.Code,
		timeout:          timeout,
		interruptOnLeave: req.InterruptWhenClientLeaves,
		out:              newOutputLog(e.cfg.MaxOutputBytes, e.cfg.ReplayBytes, e.buffered),
		queuedAt:         time.Now(),
		outcome:          OutcomeOK,
	}
	x.firstGen, _ = x.out.attach(0)
	x.state = ExecutionState{ID: x.id, ContextID: c.info.ID, Status: StatusQueued, CreatedAt: x.queuedAt.UTC()}
	return x
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

// retained is a finished execution kept for ReplayTTL.
type retained struct {
	x       *Execution
	expires time.Time
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
