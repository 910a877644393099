package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/kernelhost/kernelhost/core"
)

// ContextInfo is a context as the API lists it.
type ContextInfo struct {
	ID       string `json:"id"`
	Language string `json:"language"`
	Cwd      string `json:"cwd"`
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

	mu       sync.Mutex
	queue    []*Execution // waiting, FIFO
	control  []*controlOp // restart/delete requests; they go before the queue
	closed   bool         // deleted or engine closing: no new executions
	kernel   core.Kernel  // replaced only by the loop, read under mu by Interrupt
	rt       *router
	dead     bool // the kernel reported StateDead
	restarts int  // kernel-wide "restarting" events seen by the router
	// needsSetup: cwd and globals must be (re)applied before user code runs.
	needsSetup bool
	// needsRestart: the kernel's state is not trusted (a reset failed, an
	// interrupt did not take effect): restart before the next user code.
	needsRestart bool
	globals      map[string]string
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
	events   chan struct{} // closed and replaced on every kernel-wide restarting event
}

type controlKind int

const (
	opRestart controlKind = iota
	opDelete
)

type controlOp struct {
	kind controlKind
	done chan error // capacity 1
}

func newContext(e *Engine, info ContextInfo) *Context {
	return &Context{
		info:     info,
		e:        e,
		log:      e.log.With("context_id", info.ID, "language", info.Language),
		wake:     make(chan struct{}, 1),
		ctrl:     make(chan struct{}, 1),
		loopDone: make(chan struct{}),
		events:   make(chan struct{}),
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
		c.dead = true
	case core.StateRestarting:
		// A fresh interpreter replaced the old one (e.g. Jupyter restarts a
		// dead kernel by itself): it is alive, but without cwd and globals.
		c.dead = false
		c.needsSetup = true
		c.restarts++
		close(c.events)
		c.events = make(chan struct{})
	}
}

func (c *Context) current() (core.Kernel, *router) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.kernel, c.rt
}

// submit queues x, or refuses when the queue is full or the context is gone.
const cancelledMessage = "The client left before the execution started; its code never ran"

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
			x.end(errNameCancelled, cancelledMessage)
			x.finish(c.e.cfg.Observer, OutcomeClientGone, 0)
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

func (c *Context) handleControl(op *controlOp) (stop bool) {
	switch op.kind {
	case opRestart:
		err := c.restartKernel()
		if err != nil {
			c.log.Error("restart failed", "err", err)
			err = newError(core.KindInternal, fmt.Sprintf("Failed to restart context %s: %v", c.info.ID, err), err)
		}
		op.done <- err
		return false
	default: // opDelete
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
			x.finish(c.e.cfg.Observer, OutcomeAborted, 0)
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
		op.done <- err
		return true
	}
}

// run executes x: it owns the kernel from sending x's first request until x's
// env vars are reset.
func (c *Context) run(x *Execution) {
	obs := c.e.cfg.Observer
	if !x.stopQueueWatch() || x.ctx.Err() != nil {
		// The client left before its turn: its code is never sent.
		x.end(errNameCancelled, cancelledMessage)
		x.finish(obs, OutcomeClientGone, 0)
		return
	}
	x.setStatus(StatusRunning, "")
	started := time.Now()
	obs.ExecutionStarted(c.info.ID, started.Sub(x.queuedAt))
	defer func() { x.finish(obs, x.outcome(c.e.cfg.DisconnectPolicy), time.Since(started)) }()
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
	if len(x.env) == 0 {
		c.runUserCode(x)
		return
	}
	// Once the set snippet was sent, some values may be on the kernel whatever
	// its reply says: the reset always runs, before the next execution's code
	// (invariant 2), unless that interpreter is gone or about to be.
	c.mu.Lock()
	restarts := c.restarts
	c.mu.Unlock()
	err = c.helper(setEnvCode(c.info.Language, x.env))
	if err != nil {
		x.end(errNameEnvVars, "Failed to set env vars: "+err.Error())
	} else {
		c.runUserCode(x)
	}
	if c.resetIsMoot(restarts) {
		return
	}
	c.resetEnv(x.ctx, x.env)
}

// resetIsMoot says whether the interpreter that got an execution's env vars
// (when the router had seen restarts restarting events) will never run
// other code, so that resetting them would only wait on it:
//   - it restarted since: the fresh interpreter never had them (and the
//     reset would remove what it inherited);
//   - a restart or delete is waiting: it replaces the interpreter before
//     anything else runs, and the interpreter may still be busy with the
//     code the control op cut short, so a reset would wait HelperTimeout
//     for it. needsRestart makes sure, should the control op fail.
func (c *Context) resetIsMoot(restarts int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.restarts != restarts {
		return true
	}
	if len(c.control) > 0 {
		c.needsRestart = true
		return true
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

// ensureReady brings the kernel to a state where user code may run: restarted
// if it died, was lost or is not trusted, and with cwd and globals applied.
//
// replaced says why the interpreter the context had is gone, when it was not
// the client's doing ("" otherwise): it died, or the server no longer has
// it (a Jupyter server culled or deleted it).
func (c *Context) ensureReady() (replaced string, err error) {
	c.mu.Lock()
	restart := c.dead || c.needsRestart
	setup := c.needsSetup
	dead := c.dead || (setup && !c.needsRestart) // a restarting event: the server replaced a dead kernel
	r := c.rt
	c.mu.Unlock()
	select {
	case <-r.gone:
		restart = true
		replaced = "the kernel is gone: the server shut it down (e.g. culled it as idle) or lost it"
	default:
		if dead {
			replaced = "the kernel died"
		}
	}
	if restart {
		return replaced, c.restartKernel()
	}
	if setup {
		return replaced, c.setup(context.Background())
	}
	return "", nil
}

// lostMeanwhile reports whether r's kernel was found gone: its Messages
// close before its Execute fails, and the router notices a moment later.
func lostMeanwhile(r *router) bool {
	t := time.NewTimer(time.Second)
	defer t.Stop()
	select {
	case <-r.gone:
		return true
	case <-t.C:
		return false
	}
}

// replacedNotice is the stderr line of the first execution on a kernel that
// replaced one nobody asked to replace.
func replacedNotice(why string) string {
	return "kernelhost: this context's kernel was replaced since its last execution (" + why +
		"): its variables, imports and other state are gone; its working directory and env vars were applied again.\n"
}

// restartKernel restarts the kernel (or starts a new one when it is lost) and
// applies cwd and globals again.
func (c *Context) restartKernel() error {
	k, r := c.current()
	ctx, cancel := context.WithTimeout(context.Background(), c.e.cfg.StartTimeout)
	defer cancel()
	lost := false
	select {
	case <-r.gone:
		lost = true
	default:
	}
	if !lost {
		c.mu.Lock()
		before, events := c.restarts, c.events
		c.mu.Unlock()
		err := k.Restart(ctx)
		if err == nil {
			// Wait until the router has passed the restarting event, so that no
			// event of the old interpreter reaches a request sent from now on.
			if err = c.awaitRestartEvent(ctx, before, events); err == nil {
				c.mu.Lock()
				c.dead, c.needsRestart, c.needsSetup = false, false, true
				c.mu.Unlock()
				return c.setup(ctx)
			}
		}
		c.log.Warn("kernel restart failed; starting a new kernel", "err", err)
		_ = k.Shutdown(ctx)
	}
	nk, err := c.e.cfg.Transport.StartKernel(ctx, core.KernelSpec{Language: c.e.kernelLanguage(c.info.Language), Cwd: c.info.Cwd})
	if err != nil {
		return fmt.Errorf("start a new %s kernel: %w", c.info.Language, err)
	}
	c.attach(nk)
	c.mu.Lock()
	c.needsRestart = false
	c.mu.Unlock()
	return c.setup(ctx)
}

func (c *Context) awaitRestartEvent(ctx context.Context, before int, events chan struct{}) error {
	for {
		c.mu.Lock()
		seen := c.restarts > before
		events = c.events
		c.mu.Unlock()
		if seen {
			return nil
		}
		select {
		case <-events:
		case <-ctx.Done():
			return fmt.Errorf("the kernel did not report that it restarted: %w", ctx.Err())
		}
	}
}

// setup applies the kernel setup (Config.KernelSetup), the cwd and the global
// env vars. It always sends a request, even an empty one, which also serves
// as a barrier behind the kernel's earlier events.
func (c *Context) setup(ctx context.Context) error {
	var globals map[string]string
	if c.e.cfg.GlobalEnv != nil {
		g, err := c.e.cfg.GlobalEnv(ctx)
		if err != nil {
			return fmt.Errorf("fetch global env vars: %w", err)
		}
		globals = make(map[string]string, len(g))
		for k, v := range g {
			if err := errors.Join(validateEnvKey(k), ValidateEnvValue(k, v)); err != nil {
				c.log.Warn("skipping global env var", "key", k, "err", err)
				continue
			}
			globals[k] = v
		}
	}
	if c.e.cfg.KernelSetup != nil {
		// A request of its own, not a helper: the subprocess drivers run
		// helpers apart from user code, with stand-ins for os and sys,
		// and the kernel environment must reach the interpreter's own.
		if code := c.e.cfg.KernelSetup(c.info.Language); code != "" {
			if err := c.silentRequest(code); err != nil {
				// Not a setupError: nothing the client sent (the cwd) is wrong.
				return fmt.Errorf("kernel setup: %w", err)
			}
		}
	}
	code := setupCode(c.info.Language, c.info.Cwd, globals)
	if c.cwdChoices != nil {
		code = setupCodeChoosingCwd(c.info.Language, c.cwdChoices, globals)
	}
	var out strings.Builder
	if err := c.request(helperCode(c.info.Language, code), &out); err != nil {
		return &setupError{cwd: c.info.Cwd, err: err}
	}
	if c.cwdChoices != nil {
		c.noteChosenCwd(out.String())
	}
	c.mu.Lock()
	c.globals = globals
	c.needsSetup = false
	c.mu.Unlock()
	return nil
}

type setupError struct {
	cwd string
	err error
}

func (e *setupError) Error() string {
	return fmt.Sprintf("Failed to set up the context (working directory %s, global env vars): %v", core.Quote(e.cwd), e.err)
}
func (e *setupError) Unwrap() error { return e.err }

// noteChosenCwd records the directory a kernel-side cwd choice ended in
// (what the setup printed, less the line end: nothing else in it prints, and
// a directory's name may hold a newline; see Config.DefaultCwdOnKernel),
// which createContext makes the context's cwd, and says so when it is not
// the configured default.
func (c *Context) noteChosenCwd(stdout string) {
	chosen := strings.TrimSuffix(strings.TrimSuffix(stdout, "\n"), "\r")
	if chosen == "" {
		return // a kernel that printed nothing: the cwd stays as configured
	}
	c.mu.Lock()
	c.chosenCwd = chosen
	c.mu.Unlock()
	if chosen != c.cwdChoices[0] {
		c.log.Warn("the default cwd is not a directory where the kernel runs; the context works in another",
			"default_cwd", c.cwdChoices[0], "cwd", chosen, "tried", c.cwdChoices)
	}
}

// helper runs one silent request of the engine's own (cwd, env set/reset) and
// waits, bounded by Config.HelperTimeout, for the kernel to finish it.
func (c *Context) helper(code string) error {
	return c.request(helperCode(c.info.Language, code), nil)
}

// silentRequest runs code as a request of the engine's own (silent where
// the language allows, see helperSilent) and waits, bounded by
// Config.HelperTimeout, for the kernel to finish it.
func (c *Context) silentRequest(code string) error { return c.request(code, nil) }

// request is silentRequest, writing what the code printed to stdout to out
// when out is not nil.
func (c *Context) request(code string, stdout *strings.Builder) error {
	k, r := c.current()
	msgID := newID()
	rt := r.register(msgID)
	defer r.unregister(msgID)
	ctx, cancel := context.WithTimeout(context.Background(), c.e.cfg.HelperTimeout)
	defer cancel()
	req := core.ExecuteRequest{MsgID: msgID, Code: code, Silent: helperSilent(c.info.Language)}
	if err := k.Execute(ctx, req); err != nil {
		return err
	}
	var reply *core.Message
	var firstErr *core.Message
	idle := false
	for reply == nil || !idle {
		select {
		case m := <-rt.ch:
			switch {
			case m.ParentID == "":
				if m.State == core.StateRestarting || m.State == core.StateDead || m.State == core.StateDisconnected {
					return fmt.Errorf("the kernel reported %q", m.State)
				}
			case m.Type == core.MsgExecuteReply:
				reply = &m
			case m.Type == core.MsgError && firstErr == nil:
				firstErr = &m
			case m.Type == core.MsgStream && m.Name == "stdout" && stdout != nil:
				stdout.WriteString(m.Text)
			case m.Type == core.MsgStatus && m.State == core.StateIdle:
				idle = true
			}
		case <-r.gone:
			return errors.New("the connection to the kernel was lost")
		case <-ctx.Done():
			c.mu.Lock()
			c.needsRestart = true // whatever it is doing, it is not trusted any more
			c.mu.Unlock()
			return fmt.Errorf("the kernel did not answer within %s", c.e.cfg.HelperTimeout)
		}
	}
	if reply.Status == core.ReplyOK {
		return nil
	}
	if firstErr == nil {
		firstErr = reply
	}
	if firstErr.EName == "" {
		return fmt.Errorf("the kernel answered %q", reply.Status)
	}
	return fmt.Errorf("%s: %s", firstErr.EName, firstErr.EValue)
}

// runUserCode sends x's code and streams its messages to x until the kernel
// reports it finished (execute_reply and idle), restarted, died or was lost.
func (c *Context) runUserCode(x *Execution) {
	k, r := c.current()
	msgID := newID()
	rt := r.register(msgID)
	defer r.unregister(msgID)
	if err := k.Execute(context.Background(), core.ExecuteRequest{MsgID: msgID, Code: x.code}); err != nil {
		name := errNameConnection
		if core.KindOf(err) == core.KindTooLarge {
			name = "CodeTooLarge"
		}
		if lostMeanwhile(r) {
			// Found gone between ensureReady and now (a Jupyter server
			// culled it): say so as the next execution's notice will.
			x.end(errNameKernelDied, "The kernel is gone (the server shut it down, e.g. culled it as idle, or lost it); the code did not run. "+
				"The context starts a new kernel, without its state, at its next execution")
			return
		}
		x.end(name, "Failed to send the execution request: "+err.Error())
		return
	}
	var (
		gotReply, gotIdle bool
		clientGone        = x.ctx.Done()
		grace             <-chan time.Time
		deadline          <-chan time.Time
	)
	if x.timeout > 0 {
		timer := time.NewTimer(x.timeout)
		defer timer.Stop()
		deadline = timer.C
	}
	// stop interrupts the running code and gives it InterruptGrace to end
	// before the kernel is restarted; the slot stays held until then.
	// Callers log why (logInterrupt) before they end the client's stream, so
	// that the log has the line by the time the client has the end.
	var graceTimer *time.Timer
	defer func() {
		if graceTimer != nil {
			graceTimer.Stop()
		}
	}()
	logInterrupt := func(why string) {
		c.log.InfoContext(x.ctx, "interrupting", "execution_id", x.id, "why", why)
	}
	stop := func() {
		ictx, cancel := context.WithTimeout(context.Background(), c.e.cfg.HelperTimeout)
		if err := k.Interrupt(ictx); err != nil {
			c.log.WarnContext(x.ctx, "interrupt failed", "err", err)
		}
		cancel()
		if graceTimer == nil {
			graceTimer = time.NewTimer(c.e.cfg.InterruptGrace)
			grace = graceTimer.C
		}
	}
	for !gotReply || !gotIdle {
		select {
		case m := <-rt.ch:
			if m.ParentID == "" {
				switch m.State {
				case core.StateRestarting:
					x.end(errNameRestarting, "Context was restarted")
					return
				case core.StateDead:
					x.end(errNameKernelDied, "The kernel died while running this execution; the context restarts on its next execution, without its state")
					return
				case core.StateDisconnected:
					x.end(errNameConnection, "The connection to the kernel was lost; rerun the code to get the results")
					return
				}
				continue
			}
			switch m.Type {
			case core.MsgExecuteInput:
				x.out.push(Output{Type: OutNumberOfExecutions, ExecutionCount: m.ExecutionCount})
			case core.MsgStream:
				t := OutStdout
				if m.Name == "stderr" {
					t = OutStderr
				}
				ts := m.Timestamp
				if ts == "" {
					ts = now()
				}
				x.out.push(Output{Type: t, Text: m.Text, Timestamp: ts})
				if m.Lost > 0 {
					c.e.cfg.Observer.MessagesLost(c.info.ID, m.Lost)
				}
			case core.MsgExecuteResult, core.MsgDisplayData:
				x.out.push(Output{Type: OutResult, Bundle: m.Data, IsMainResult: m.Type == core.MsgExecuteResult})
			case core.MsgError:
				x.pushError(m.EName, m.EValue, strings.Join(m.Traceback, "\n"))
			case core.MsgExecuteReply:
				gotReply = true
				switch m.Status {
				case core.ReplyError:
					x.pushError(m.EName, m.EValue, strings.Join(m.Traceback, "\n"))
				case core.ReplyAborted, "abort":
					x.pushError(errNameAborted, "Execution was aborted", "")
				}
			case core.MsgStatus:
				if m.State == core.StateIdle {
					gotIdle = true
				}
			}
		case <-r.gone:
			x.end(errNameUnexpectedEnd, "The connection to the kernel was lost before the execution finished")
			return
		case <-clientGone:
			clientGone = nil
			x.clientLeft = true
			if c.e.cfg.DisconnectPolicy == DisconnectContinue {
				continue
			}
			logInterrupt("client left mid-execution")
			stop()
		case <-deadline:
			deadline = nil
			x.timedOut = true
			logInterrupt("execution timeout")
			// The client hears at once; the kernel keeps the slot until it has
			// stopped (or was restarted), so nothing runs behind it early.
			x.end(errNameTimeout, fmt.Sprintf("The execution did not finish within %s; it was interrupted", x.timeout))
			stop()
		case <-grace:
			// The code ignored the interrupt: restart so that the context is
			// free again within a bound (option B of docs/api-contract.md §9.3).
			c.log.WarnContext(x.ctx, "interrupt did not take effect; restarting the kernel", "grace", c.e.cfg.InterruptGrace)
			x.end(errNameRestarting, fmt.Sprintf("The execution did not stop within %s of an interrupt; the context was restarted", c.e.cfg.InterruptGrace))
			if err := c.restartKernel(); err != nil {
				c.log.ErrorContext(x.ctx, "restart after interrupt failed", "err", err)
			}
			return
		case <-c.ctrl:
			if c.controlPending() {
				notify(c.ctrl) // let the loop see it too
				x.end(errNameUnexpectedEnd, "Connection to the execution was closed before the execution was finished")
				return
			}
		}
	}
	x.out.push(Output{Type: OutEndOfExecution})
	x.out.close()
}

// pushError emits an error line unless the execution already has one: each
// error line fires the SDK's onError, and docs/api-contract.md §5.2 allows one.
func (x *Execution) pushError(name, value, traceback string) {
	if x.errorSent {
		return
	}
	x.errorSent = true
	x.out.push(errorOutput(name, value, traceback))
}

// end finishes x's stream abnormally: an error line (unless the kernel already
// sent one), then end_of_execution.
func (x *Execution) end(name, value string) {
	if !x.errorSent {
		x.hostEnded = true
	}
	x.pushError(name, value, "")
	x.out.push(Output{Type: OutEndOfExecution})
	x.out.close()
}

func now() string { return time.Now().UTC().Format("2006-01-02T15:04:05.000000Z07:00") }
