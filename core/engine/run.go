package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/kernelhost/kernelhost/core"
)

// run executes x: it owns the kernel from sending x's first request until x's
// env vars are reset.
func (c *Context) run(x *Execution) {
	obs := c.e.cfg.Observer
	if !x.stopQueueWatch() || x.ctx.Err() != nil {
		c.cancel(x) // the client left before its turn: its code is never sent
		return
	}
	x.setStatus(StatusRunning, "")
	started := time.Now()
	obs.ExecutionStarted(c.info.ID, started.Sub(x.queuedAt))
	defer func() { x.finish(obs, time.Since(started)) }()
	replaced, err := c.ensureReady()
	if err != nil {
		x.end(errNameContextSetup, err.Error())
		return
	}
	if replaced != "" {
		// The first execution on a kernel nobody asked to replace says so:
		// the user's variables are gone, and code that relies on them
		// would otherwise fail with a bare NameError.
		x.out.push(Output{Type: OutStderr, Timestamp: now(), Text: replacedNotice(replaced)})
	}
	if failure := c.takeSetupFailure(); failure != "" {
		x.out.push(Output{Type: OutStderr, Timestamp: now(), Text: failure})
	}
	if len(x.env) == 0 {
		c.runUserCode(x)
		return
	}
	c.runWithEnv(x)
}

// runWithEnv sets x's env vars, runs its code and resets them. Once the set
// snippet was sent, some values may be on the kernel whatever its reply says:
// the reset always runs, before the next execution's code (invariant 2),
// unless that interpreter is gone or about to be.
func (c *Context) runWithEnv(x *Execution) {
	got := c.interpreter()
	if err := c.helper(setEnvCode(c.info.Language, x.env)); err != nil {
		x.end(errNameEnvVars, "Failed to set env vars: "+err.Error())
	} else {
		c.runUserCode(x)
	}
	if c.resetIsMoot(got) {
		return
	}
	c.resetEnv(x.ctx, x.env)
}

// resetIsMoot says whether the interpreter that got an execution's env vars
// will never run other code, so that resetting them would only wait on it:
//   - it was replaced since (restarted, or a new kernel started): the fresh
//     interpreter never had them (and the reset would remove what it
//     inherited);
//   - a restart or delete is waiting: it replaces the interpreter before
//     anything else runs, and the interpreter may still be busy with the
//     code the control op cut short, so a reset would wait HelperTimeout
//     for it. needsRestart makes sure, should the control op fail.
//
// A waiting fork is no reason: the source runs on after it (the copy
// starts with a new context's env whatever the source's is).
func (c *Context) resetIsMoot(got interpreter) bool {
	if c.interpreter() != got {
		return true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, op := range c.control {
		if op.kind != opFork {
			c.needsRestart = true
			return true
		}
	}
	return false
}

// resetEnv puts x's keys back to their global values (or removes them). If the
// kernel does not confirm it, the kernel is restarted before any other code.
func (c *Context) resetEnv(ctx context.Context, env map[string]string) {
	c.mu.Lock()
	globals := c.globals
	c.mu.Unlock()
	if err := c.helper(resetEnvCode(c.info.Language, env, globals)); err != nil {
		c.log.WarnContext(ctx, "env reset not confirmed; restarting the kernel before the next execution", "err", err)
		c.mu.Lock()
		c.needsRestart = true
		c.mu.Unlock()
	}
}

// runUserCode sends x's code and streams its messages to x until the kernel
// reports it finished (execute_reply and idle), restarted, died or was lost,
// or the context gives it up: a restart or delete is waiting, or the code
// ignored an interrupt.
func (c *Context) runUserCode(x *Execution) {
	u := &userRun{c: c, x: x, w: watch{clientGone: x.ctx.Done(), control: c.ctrl}}
	// The router puts the request's outputs on x's stream and ends it as
	// the kernel reports it finished: the client hears at once, while the
	// loop wakes once, to release the slot.
	q, err := c.send(context.Background(), x.code, false, u.message, x.endStream)
	if err != nil {
		c.endUnsent(x, err)
		return
	}
	u.q = q
	defer u.q.close()
	if x.timeout > 0 {
		deadline, cancel := context.WithTimeout(context.Background(), x.timeout)
		defer cancel()
		u.w.deadline = deadline.Done()
	}
	defer u.stopGrace()
	for !u.handle(u.q.wait(&u.w)) {
	}
}

// endUnsent ends x, whose request could not be sent.
func (c *Context) endUnsent(x *Execution, err error) {
	if _, r := c.current(); lostMeanwhile(r) {
		// Found gone between ensureReady and now (a Jupyter server
		// culled it): say so as the next execution's notice will.
		x.end(errNameKernelDied, "The kernel is gone (the server shut it down, e.g. culled it as idle, or lost it); the code did not run. "+
			"The context starts a new kernel, without its state, at its next execution")
		return
	}
	name := errNameConnection
	if core.KindOf(err) == core.KindTooLarge {
		name = "CodeTooLarge"
	}
	x.end(name, "Failed to send the execution request: "+err.Error())
}

// userRun is one execution's code on the kernel: what the router does with
// each message of its request (message) and runUserCode with each event
// besides (handle). While the request is registered, x's outcome and error
// line are changed by both: handle changes them exclusive of the router.
type userRun struct {
	c     *Context
	x     *Execution
	q     request
	w     watch
	grace *time.Timer // started by the first interrupt
}

// message puts the line a message of the request makes, if any, on x's
// stream. It runs on the router's goroutine.
func (u *userRun) message(m core.Message) {
	if o, ok := messageOutput(m, now); ok {
		if o.Type == OutError {
			u.x.pushError(o)
		} else {
			u.x.out.push(o)
		}
	}
	if m.Type == core.MsgStream && m.Lost > 0 {
		u.c.e.cfg.Observer.MessagesLost(u.c.info.ID, m.Lost)
	}
}

// handle acts on why the request's wait returned; done: the run is over.
func (u *userRun) handle(end requestEnd) (done bool) {
	c, x := u.c, u.x
	switch end {
	case endFinished:
		x.endStream()
	case endRestarted:
		x.end(errNameRestarting, "Context was restarted")
	case endDied:
		how := ""
		if u.q.endText != "" {
			how = ": " + u.q.endText
		}
		x.end(errNameKernelDied, "The kernel died while running this execution"+how+
			". The context's kernel is replaced by a new one, without its state, at its next execution")
	case endDisconnected:
		x.end(errNameConnection, "The connection to the kernel was lost; rerun the code to get the results")
	case endLost:
		x.end(errNameUnexpectedEnd, "The connection to the kernel was lost before the execution finished")
	case endClientGone:
		u.w.clientGone = nil
		if c.e.cfg.DisconnectPolicy == DisconnectContinue && !x.interruptOnLeave {
			return false
		}
		u.q.exclusive(func() { x.settle(OutcomeClientGone) })
		u.logInterrupt("client left mid-execution")
		u.interrupt()
		return false
	case endDeadline:
		u.w.deadline = nil
		u.logInterrupt("execution timeout")
		u.q.exclusive(func() {
			x.settle(OutcomeTimeout)
			// The client hears at once; the kernel keeps the slot until it has
			// stopped (or was restarted), so nothing runs behind it early.
			x.end(errNameTimeout, fmt.Sprintf("The execution did not finish within %s; it was interrupted", x.timeout))
		})
		u.interrupt()
		return false
	case endGrace:
		// The code ignored the interrupt: restart so that the context is
		// free again within a bound (option B of docs/api-contract.md §9.3).
		c.log.WarnContext(x.ctx, "interrupt did not take effect; restarting the kernel", "grace", c.e.cfg.InterruptGrace)
		u.q.exclusive(func() {
			x.end(errNameRestarting, fmt.Sprintf("The execution did not stop within %s of an interrupt; the context was restarted", c.e.cfg.InterruptGrace))
		})
		if err := c.restartKernel(); err != nil {
			c.log.ErrorContext(x.ctx, "restart after interrupt failed", "err", err)
		}
	case endControl:
		if !c.controlPending() {
			return false
		}
		notify(c.ctrl) // let the loop see it too
		u.q.exclusive(func() {
			x.end(errNameUnexpectedEnd, "Connection to the execution was closed before the execution was finished")
		})
	}
	return true
}

// logInterrupt logs why the code is interrupted. Callers log before they end
// the client's stream, so that the log has the line by the time the client
// has the end.
func (u *userRun) logInterrupt(why string) {
	u.c.log.InfoContext(u.x.ctx, "interrupting", "execution_id", u.x.id, "why", why)
}

// interrupt interrupts the running code and gives it InterruptGrace to end
// before the kernel is restarted; the slot stays held until then.
func (u *userRun) interrupt() {
	c := u.c
	ictx, cancel := context.WithTimeout(context.Background(), c.e.cfg.HelperTimeout)
	if err := u.q.k.Interrupt(ictx); err != nil {
		c.log.WarnContext(u.x.ctx, "interrupt failed", "err", err)
	}
	cancel()
	if u.grace == nil {
		u.grace = time.NewTimer(c.e.cfg.InterruptGrace)
		u.w.grace = u.grace.C
	}
}

func (u *userRun) stopGrace() {
	if u.grace != nil {
		u.grace.Stop()
	}
}
