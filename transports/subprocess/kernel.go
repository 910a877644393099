package subprocess

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/kernelhost/kernelhost/core"
)

// Kernel is one interpreter process (replaced on Restart). It implements
// core.Kernel and is safe for concurrent use.
type Kernel struct {
	procSpec             // how its interpreters start
	pool     *pool       // where it takes a ready one, if any (nil: none)
	forks    *forkServer // where it forks one from, before the pool (nil: none; forkserver.go)
	forget   func()      // drops it from the transport's live kernels (memory.go); nil: not tracked

	msgs     chan core.Message // outlives restarts; closed by Shutdown
	quit     chan struct{}     // closed when Shutdown begins: unblocks a Restart stuck emitting
	quitOnce sync.Once

	mu     sync.Mutex // serialises Execute's write, Interrupt, Restart and Shutdown; guards p and closed
	p      *proc      // the current interpreter; nil after a failed restart
	closed bool
	// live is p, readable without mu: Restart and Shutdown use it to cut
	// short a write that holds mu (see cutWrites).
	live atomic.Pointer[proc]

	curMu   sync.Mutex
	current string // msg_id of the running request, "" when none
}

var _ core.Kernel = (*Kernel)(nil)

// ErrShutdown is returned by calls on a kernel that was shut down.
var ErrShutdown = errors.New("subprocess: kernel is shut down")

// Messages implements core.Kernel.
func (k *Kernel) Messages() <-chan core.Message { return k.msgs }

// Pid returns the interpreter's process id, which is also its process group
// id, or 0 when no interpreter runs. For tests and diagnostics.
func (k *Kernel) Pid() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.p == nil {
		return 0
	}
	pid, _, _ := k.p.ids()
	return pid
}

// Execute implements core.Kernel: it hands the request to the driver and
// returns; the outcome arrives on Messages.
func (k *Kernel) Execute(ctx context.Context, req core.ExecuteRequest) error {
	frame, err := k.lang.encode(req)
	if err != nil {
		return fmt.Errorf("subprocess: execute %s: %w", req.MsgID, err)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed {
		return ErrShutdown
	}
	p := k.p
	if p == nil || p.isGone() {
		return fmt.Errorf("subprocess: %s kernel is dead; restart it", k.langName)
	}
	k.setCurrent(req.MsgID)
	if deadline, ok := ctx.Deadline(); ok {
		_ = p.reqW.SetWriteDeadline(deadline)
	} else {
		_ = p.reqW.SetWriteDeadline(time.Time{})
	}
	if p.cut.Load() { // after the deadline was set: see cutWrites
		_ = p.reqW.SetWriteDeadline(aLongTimeAgo)
	}
	if _, err := p.reqW.Write(frame); err != nil {
		k.clearCurrent(req.MsgID)
		return fmt.Errorf("subprocess: send request %s to %s kernel: %w", req.MsgID, k.langName, err)
	}
	p.startTicks(req.MsgID)
	return nil
}

// Interrupt implements core.Kernel: SIGINT to the interpreter's process group.
//
// For node the signal itself is the hazard: around each runInContext with
// breakOnSigint, node swaps its SIGINT handlers, and a SIGINT landing in
// that gap kills node (measured: a few hundred signals in a loop of short
// scripts do). So node gets an interrupt record on fd 3 first, which ends
// the request at once unless it is in synchronous code; only a request
// still running after nodeSigintGrace (synchronous code, deep inside
// runInContext, away from the gap, or a child process it waits for) gets
// the SIGINT, followed by a {"sigint"} record on fd 3.
func (k *Kernel) Interrupt(ctx context.Context) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed {
		return ErrShutdown
	}
	if k.p == nil {
		return fmt.Errorf("subprocess: %s kernel is dead; restart it", k.langName)
	}
	if k.lang.interrupt == nil {
		if k.lang.noIdleSigint && k.currentID() == "" {
			return nil // nothing runs (see language.noIdleSigint)
		}
		id := k.currentID()
		if err := k.sigintNoted(id); err != nil {
			return err
		}
		if k.lang.resendSigint {
			k.resendSigint(id, sigintResends)
		}
		return nil
	}
	id := k.currentID()
	if id == "" || k.p.isGone() {
		return nil // nothing runs: the driver would ignore it anyway
	}
	deadline := time.Now().Add(interruptWriteWait)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = k.p.reqW.SetWriteDeadline(deadline)
	if _, err := k.p.reqW.Write(k.lang.interrupt(id)); err != nil {
		// A driver that does not read fd 3 is stuck in synchronous code:
		// the signal is what stops it.
		return k.sigint()
	}
	p := k.p
	time.AfterFunc(nodeSigintGrace, func() {
		k.mu.Lock()
		defer k.mu.Unlock()
		// current is still id under mu: the request has not been reported
		// over, and no later one can have been sent.
		if !k.closed && k.p == p && !p.isGone() && k.currentID() == id {
			_ = k.sigintNoted(id)
		}
	})
	return nil
}

const (
	// interruptWriteWait bounds the write of an interrupt record on fd 3.
	interruptWriteWait = time.Second
	// nodeSigintGrace is how long node has to end a request on the
	// interrupt record before it gets SIGINT.
	nodeSigintGrace = 50 * time.Millisecond
)

// sigintResends are the delays after an interrupt at which bash gets SIGINT
// again if the same request still runs. A SIGINT that lands while bash forks
// a command substitution (`for i in $(seq 600)`) is taken by the child before
// it resets its traps; the child exits normally, so bash assumes the command
// handled the signal and runs on (measured: 0.5-3% of interrupts timed
// within 2 ms of a loop's start hung; a second SIGINT ended nearly all of
// them; the rare rest, about 1 in 3,000, ignores the later ones too and is
// left to the engine, which restarts the kernel after InterruptGrace).
var sigintResends = []time.Duration{100 * time.Millisecond, 400 * time.Millisecond, time.Second}

// resendSigint sends SIGINT again after each of delays while request id is
// still the current one. Called with mu held.
func (k *Kernel) resendSigint(id string, delays []time.Duration) {
	if id == "" || len(delays) == 0 {
		return
	}
	p := k.p
	time.AfterFunc(delays[0], func() {
		k.mu.Lock()
		defer k.mu.Unlock()
		// Still id under mu: its end has not been reported, and no later
		// request can have been sent.
		if !k.closed && k.p == p && !p.isGone() && k.currentID() == id {
			_ = k.sigintNoted(id)
			k.resendSigint(id, delays[1:])
		}
	})
}

// sigintNoted sends SIGINT for request id and then, for a driver that
// takes it (language.sigintSent), the record that says so. Node and the
// JVM can handle a signal after the request it was sent for is over, in
// the next one (see drainSigint in driver.js, awaitSignals in
// Driver.java); the record, on fd 3 before any later request, lets the
// driver take the signal first. Called with mu held.
func (k *Kernel) sigintNoted(id string) error {
	if err := k.sigint(); err != nil {
		return err
	}
	if id != "" && k.lang.sigintSent != nil {
		k.noteSigint(id)
	}
	return nil
}

// noteSigint writes the record of a SIGINT sent for request id on fd 3.
// Called with mu held.
func (k *Kernel) noteSigint(id string) {
	_ = k.p.reqW.SetWriteDeadline(time.Now().Add(interruptWriteWait))
	_, _ = k.p.reqW.Write(k.lang.sigintSent(id))
}

// sigint sends SIGINT to the interpreter's process group. Called with mu held.
func (k *Kernel) sigint() error {
	pid, pgid, _ := k.p.ids()
	if err := syscall.Kill(-pgid, syscall.SIGINT); err != nil {
		return fmt.Errorf("subprocess: interrupt %s kernel (pid %d): %w", k.langName, pid, err)
	}
	return nil
}

// Restart implements core.Kernel: it kills the interpreter's process group,
// emits status restarting and starts a fresh interpreter.
func (k *Kernel) Restart(ctx context.Context) error {
	k.cutWrites()
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed {
		return ErrShutdown
	}
	if k.p != nil {
		k.p.kill()
		k.setProc(nil)
	}
	k.setCurrent("")
	// The old pump has ended, so nothing of an earlier request follows this.
	select {
	case k.msgs <- core.Message{Type: core.MsgStatus, State: core.StateRestarting}:
	case <-k.quit:
		return ErrShutdown
	case <-ctx.Done():
		return fmt.Errorf("subprocess: restart %s kernel: %w", k.langName, ctx.Err())
	}
	p, err := k.startInterpreter(ctx)
	if err != nil {
		return fmt.Errorf("subprocess: restart: %w", err)
	}
	k.setProc(p)
	return nil
}

// startInterpreter takes a ready interpreter from the pool when it serves
// the kernel's cwd (moved there: see pool.go), and otherwise starts one.
func (k *Kernel) startInterpreter(ctx context.Context) (*proc, error) {
	if p := k.forks.fork(ctx, k, k.procSpec, k.cwd); p != nil {
		return p, nil
	}
	if k.pool.serves(k.lang, k.cwd) {
		if p := k.pool.take(ctx, k, k.cwd); p != nil {
			return p, nil
		}
	}
	return startProc(ctx, k.procSpec, k)
}

// setProc makes p the current interpreter. Called with mu held.
func (k *Kernel) setProc(p *proc) {
	k.p = p
	k.live.Store(p)
}

// cutWrites ends writes to the request pipe of the current interpreter,
// which is about to be killed, without waiting for mu: an Execute blocked
// writing a large request to an interpreter that does not read (it is busy)
// holds mu until its deadline, up to the engine's helper timeout, and
// Restart and Shutdown would wait that long. The write fails at once
// instead. A deadline in the past, not a close: a driver that saw its pipe
// close would exit by itself, and its children would be re-parented before
// killTree could find them. Execute checks cut after it set its own
// deadline, so whichever comes second, the write is cut.
func (k *Kernel) cutWrites() {
	if p := k.live.Load(); p != nil {
		p.cut.Store(true)
		_ = p.reqW.SetWriteDeadline(aLongTimeAgo)
	}
}

// Shutdown implements core.Kernel: it kills the process group, waits for it
// and its goroutines, and closes Messages. It is safe to call more than once.
func (k *Kernel) Shutdown(ctx context.Context) error {
	k.quitOnce.Do(func() { close(k.quit) })
	k.cutWrites()
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed {
		return nil
	}
	k.closed = true
	if k.p != nil {
		k.p.kill()
		k.setProc(nil)
	}
	if k.forget != nil {
		k.forget()
	}
	close(k.msgs)
	return nil
}

func (k *Kernel) setCurrent(id string) {
	k.curMu.Lock()
	k.current = id
	k.curMu.Unlock()
}

// clearCurrent forgets id if it is still the running request.
func (k *Kernel) clearCurrent(id string) {
	k.curMu.Lock()
	if k.current == id {
		k.current = ""
	}
	k.curMu.Unlock()
}

func (k *Kernel) currentID() string {
	k.curMu.Lock()
	defer k.curMu.Unlock()
	return k.current
}
