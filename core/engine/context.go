package engine

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"github.com/kernelhost/kernelhost/core"
)

// ContextInfo is a context as the API lists it.
type ContextInfo struct {
	ID       string `json:"id"`
	Language string `json:"language"`
	Cwd      string `json:"cwd"`
	// Family is the family of the context's kernel, where it shares its
	// sandbox with other contexts (core.FamilyKernel: a context and its
	// forks under the subprocess transport's sandbox); omitted where none.
	// An extension E2B's API lacks (docs/api-contract.md).
	Family string `json:"family,omitempty"`
}

// Context is one stateful kernel and the queue of executions waiting for it.
//
// One goroutine, the context's loop, owns the kernel: it runs executions one at
// a time in FIFO order, and restarts and deletes too, so nothing else ever
// talks to the kernel between a request and its cleanup. "Holding the slot"
// is simply "being the loop's current work": it starts when the request is sent
// and ends when the kernel reported it finished (or restarted, died, or was
// lost) and its env vars were reset. The client's stream never holds it.
type Context struct {
	info ContextInfo
	e    *Engine
	log  *slog.Logger

	mu      sync.Mutex
	queue   []*Execution // waiting, FIFO
	control []*controlOp // restart/delete requests; they go before the queue
	closed  bool         // deleted or engine closing: no new executions
	kernel  core.Kernel  // replaced only by the loop, read under mu by Interrupt
	rt      *router
	dead    bool // the kernel reported StateDead
	// needsSetup: cwd and globals must be (re)applied before user code runs.
	needsSetup bool
	// needsRestart: the kernel's state is not trusted (a reset failed, an
	// interrupt did not take effect): restart before the next user code.
	needsRestart bool
	globals      map[string]string
	// setupFailure is what the last kernel setup wrote on stderr (see
	// kernelSetup), until an execution shows it.
	setupFailure string
	// cwdChoices, for a context created without a cwd when the default cwd
	// is checked where the kernel runs (Config.DefaultCwdOnKernel), are the
	// directories its setup tries in order; chosenCwd is where the last
	// setup ended up. nil: the cwd is info.Cwd, and a kernel that cannot
	// enter it fails the setup.
	cwdChoices []string
	chosenCwd  string

	wake     chan struct{} // capacity 1: the queue changed
	ctrl     chan struct{} // capacity 1: a control op is waiting (aborts the running execution)
	loopDone chan struct{}
}

type controlKind int

const (
	opRestart controlKind = iota
	opDelete
	opFork // waits for the running execution instead of aborting it (fork.go)
)

type controlOp struct {
	kind controlKind
	done chan error // capacity 1
	// For opFork: the caller's context, and the new context made.
	ctx    context.Context
	forked *Context
	err    error
}

func newContext(e *Engine, info ContextInfo) *Context {
	return &Context{
		info:     info,
		e:        e,
		log:      e.log.With("context_id", info.ID, "language", info.Language),
		wake:     make(chan struct{}, 1),
		ctrl:     make(chan struct{}, 1),
		loopDone: make(chan struct{}),
	}
}

// Info returns the context's id, language and cwd.
func (c *Context) Info() ContextInfo { return c.info }

func notify(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// attach makes k the context's kernel and starts routing its messages.
func (c *Context) attach(k core.Kernel) {
	r := newRouter(k.Messages(), c.onKernelEvent)
	c.mu.Lock()
	c.kernel, c.rt = k, r
	c.dead = false
	c.needsSetup = true
	c.mu.Unlock()
}

// onKernelEvent runs on the router goroutine for every kernel-wide status.
func (c *Context) onKernelEvent(state string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch state {
	case core.StateDead:
		if !c.dead {
			// Said once per death, when it is learnt (an execution that
			// meets it ends with KernelDied; the next one says the kernel
			// was replaced).
			c.log.Warn("the context's kernel died; its state is gone, and a fresh kernel runs its next execution")
			c.e.cfg.Observer.KernelReplaced(c.info.ID, "died")
		}
		c.dead = true
	case core.StateRestarting:
		// A fresh interpreter replaced the old one (e.g. Jupyter restarts a
		// dead kernel by itself): it is alive, but without cwd and globals.
		c.dead = false
		c.needsSetup = true
	}
}

// listed is the context's info with its kernel's family, as GET
// /contexts shows it (core.FamilyKernel).
func (c *Context) listed() ContextInfo {
	info := c.info
	if fk, ok := c.kernelNow().(core.FamilyKernel); ok {
		info.Family = fk.Family()
	}
	return info
}

func (c *Context) kernelNow() core.Kernel {
	k, _ := c.current()
	return k
}

func (c *Context) current() (core.Kernel, *router) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.kernel, c.rt
}

// submit queues x, or refuses when the queue is full or the context is gone.
func (c *Context) submit(x *Execution) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return newError(core.KindNotFound, fmt.Sprintf("Context %s not found", c.info.ID), nil)
	}
	if depth := c.e.cfg.QueueDepth; len(c.queue) >= depth {
		return newError(core.KindQueueFull, fmt.Sprintf("Context %s has %d executions waiting, the most it queues; try again later", c.info.ID, depth), nil)
	}
	c.queue = append(c.queue, x)
	c.e.cfg.Observer.QueueDepth(c.info.ID, len(c.queue))
	// A client that leaves while queued leaves the queue; its code is never sent.
	x.stopQueueWatch = context.AfterFunc(x.ctx, func() {
		if c.dequeue(x) {
			c.cancel(x)
		}
	})
	notify(c.wake)
	return nil
}

func (c *Context) dequeue(x *Execution) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, q := range c.queue {
		if q == x {
			c.queue = append(c.queue[:i], c.queue[i+1:]...)
			c.e.cfg.Observer.QueueDepth(c.info.ID, len(c.queue))
			return true
		}
	}
	return false
}

// cancel ends x, whose client left before its turn: its code never ran.
func (c *Context) cancel(x *Execution) {
	x.settle(OutcomeClientGone)
	x.end(errNameCancelled, "The client left before the execution started; its code never ran")
	x.finish(c.e.cfg.Observer, 0)
}

// requestControl asks the loop to restart or delete the context, aborting the
// running execution, and waits for the result.
func (c *Context) requestControl(ctx context.Context, kind controlKind) error {
	op := &controlOp{kind: kind, done: make(chan error, 1)}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return newError(core.KindNotFound, fmt.Sprintf("Context %s not found", c.info.ID), nil)
	}
	if kind == opDelete {
		c.closed = true
	}
	c.control = append(c.control, op)
	c.mu.Unlock()
	notify(c.ctrl)
	select {
	case err := <-op.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c *Context) controlPending() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.control) > 0
}

// interrupt delivers an interrupt to the running code, if any.
func (c *Context) interrupt(ctx context.Context) error {
	k, _ := c.current()
	return k.Interrupt(ctx)
}

// loop is the context's owner goroutine.
func (c *Context) loop() {
	defer close(c.loopDone)
	// Last: after the loop's final QueueDepth report.
	defer c.e.cfg.Observer.ContextRemoved(c.info.ID)
	for {
		op, x := c.nextWork()
		switch {
		case op != nil:
			if stop := c.handleControl(op); stop {
				return
			}
		case x != nil:
			c.run(x)
		default:
			return
		}
	}
}

func (c *Context) nextWork() (*controlOp, *Execution) {
	for {
		c.mu.Lock()
		if len(c.control) > 0 {
			op := c.control[0]
			c.control = c.control[1:]
			c.mu.Unlock()
			return op, nil
		}
		if len(c.queue) > 0 && !c.closed {
			x := c.queue[0]
			c.queue = c.queue[1:]
			c.e.cfg.Observer.QueueDepth(c.info.ID, len(c.queue))
			c.mu.Unlock()
			return nil, x
		}
		closed := c.closed
		c.mu.Unlock()
		if closed {
			return nil, nil
		}
		select {
		case <-c.wake:
		case <-c.ctrl:
		}
	}
}

// handleControl runs a restart or delete; stop: the context is gone.
func (c *Context) handleControl(op *controlOp) (stop bool) {
	if op.kind == opFork {
		op.forked, op.err = c.fork(op.ctx)
		op.done <- op.err
		return false
	}
	if op.kind == opRestart {
		op.done <- c.restartOnRequest()
		return false
	}
	op.done <- c.remove()
	return true
}

func (c *Context) restartOnRequest() error {
	err := c.restartKernel()
	if err != nil {
		c.log.Error("restart failed", "err", err)
		err = newError(core.KindInternal, fmt.Sprintf("Failed to restart context %s: %v", c.info.ID, err), err)
	}
	return err
}

// remove ends what waits (queued executions, later control ops) and shuts
// the kernel down.
func (c *Context) remove() error {
	c.mu.Lock()
	waiting := c.queue
	c.queue = nil
	if len(waiting) > 0 {
		c.e.cfg.Observer.QueueDepth(c.info.ID, 0)
	}
	rest := c.control
	c.control = nil
	c.mu.Unlock()
	for _, x := range waiting {
		x.stopQueueWatch() // a watch that fires now finds the queue empty
		x.end(errNameUnexpectedEnd, "The context was removed before the execution started")
		x.finish(c.e.cfg.Observer, 0)
	}
	for _, o := range rest {
		o.done <- newError(core.KindNotFound, fmt.Sprintf("Context %s not found", c.info.ID), nil)
	}
	k, _ := c.current()
	ctx, cancel := context.WithTimeout(context.Background(), c.e.cfg.HelperTimeout)
	defer cancel()
	err := k.Shutdown(ctx)
	if err != nil {
		c.log.Error("shutdown failed", "err", err)
		err = newError(core.KindInternal, fmt.Sprintf("Failed to remove context %s: %v", c.info.ID, err), err)
	}
	return err
}
