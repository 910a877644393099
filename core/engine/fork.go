package engine

import (
	"context"
	"fmt"

	"github.com/kernelhost/kernelhost/core"
)

// Fork makes a new context holding a copy of context id's state: its
// interpreter is forked (core.Forker) once the execution running there, if
// any, has ended, before the executions queued behind it, so the copy has
// no running work. Its environment is a new context's (the start
// environment, the global env vars; setupCopy). The source runs on
// untouched. A transport that cannot fork, or a language it cannot fork,
// is KindUnsupported (HTTP 501).
func (e *Engine) Fork(ctx context.Context, id string) (ContextInfo, error) {
	c, err := e.Lookup(id)
	if err != nil {
		return ContextInfo{}, err
	}
	if _, ok := e.cfg.Transport.(core.Forker); !ok {
		return ContextInfo{}, newError(core.KindUnsupported, fmt.Sprintf("The %s transport cannot fork contexts", e.cfg.Transport.Info().Name), nil)
	}
	if e.isClosed() {
		return ContextInfo{}, newError(core.KindUnavailable, "The server is shutting down", nil)
	}
	if err := e.reserveContext(); err != nil {
		return ContextInfo{}, err
	}
	op := &controlOp{kind: opFork, done: make(chan error, 1), ctx: ctx}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		e.releaseContext()
		return ContextInfo{}, newError(core.KindNotFound, fmt.Sprintf("Context %s not found", c.info.ID), nil)
	}
	c.control = append(c.control, op)
	c.mu.Unlock()
	notify(c.wake) // not ctrl: the running execution is waited for, not aborted
	select {
	case err = <-op.done:
	case <-ctx.Done():
		// The loop still runs the op; the context it makes, if any, is
		// shut down as nobody will know its id.
		go func() {
			if <-op.done == nil {
				k, _ := op.forked.current()
				_ = k.Shutdown(context.Background())
			}
			e.releaseContext()
		}()
		return ContextInfo{}, ctx.Err()
	}
	if err != nil {
		e.releaseContext()
		return ContextInfo{}, err
	}
	nc := op.forked
	if err := nc.setupCopy(ctx); err != nil {
		k, _ := nc.current()
		_ = k.Shutdown(context.Background())
		e.releaseContext()
		return ContextInfo{}, err
	}
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		k, _ := nc.current()
		_ = k.Shutdown(context.Background())
		e.releaseContext()
		return ContextInfo{}, newError(core.KindUnavailable, "The server is shutting down", nil)
	}
	e.contexts = append(e.contexts, nc)
	e.mu.Unlock()
	go nc.loop()
	e.log.InfoContext(ctx, "context forked", "context_id", nc.info.ID, "from", c.info.ID, "language", nc.info.Language)
	return nc.listed(), nil
}

// fork runs on c's loop: it forks c's kernel into a new context, not
// registered yet and not set up (setupCopy).
func (c *Context) fork(ctx context.Context) (*Context, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	c.mu.Lock()
	k, dead, needsSetup, needsRestart := c.kernel, c.dead, c.needsSetup, c.needsRestart
	c.mu.Unlock()
	if dead || needsRestart || needsSetup {
		// Its interpreter is not in the state the context promises (it died,
		// or was replaced and not set up yet): the next execution fixes that.
		return nil, newError(core.KindInvalid, fmt.Sprintf("Context %s has no interpreter ready to copy (it died or was restarted); run code in it first", c.info.ID), nil)
	}
	fctx, cancel := context.WithTimeout(ctx, c.e.cfg.StartTimeout)
	defer cancel()
	nk, err := c.e.cfg.Transport.(core.Forker).ForkKernel(fctx, k)
	if err != nil {
		kind := core.KindOf(err)
		if kind != core.KindUnsupported && kind != core.KindInvalid && kind != core.KindUnavailable {
			kind = core.KindInternal
		}
		return nil, newError(kind, fmt.Sprintf("Failed to fork context %s: %v", c.info.ID, err), err)
	}
	nc := newContext(c.e, ContextInfo{ID: newID(), Language: c.info.Language, Cwd: c.info.Cwd})
	nc.attach(nk)
	return nc, nil
}

// setupCopy gives a fork's copy, not registered yet, what a new context
// gets: the kernel setup and the global env vars as they are now, on the
// start environment the copy's interpreter came back to (the transport
// resets it: none of what its source's cells set). Its cwd stays its
// source's, which the copy keeps as it keeps its variables.
func (c *Context) setupCopy(ctx context.Context) error {
	sctx, cancel := context.WithTimeout(ctx, c.e.cfg.StartTimeout)
	defer cancel()
	if err := c.applySetup(sctx, false); err != nil {
		return newError(core.KindInternal, fmt.Sprintf("Failed to set up the fork's copy: %v", err), err)
	}
	return nil
}
