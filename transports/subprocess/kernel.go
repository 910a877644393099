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
	frame, err := k.lang.drv.encode(req)
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
		return fmt.Errorf("subprocess: %s kernel is dead; restart it", k.lang.name)
	}
	p.req.begin(req.MsgID, !req.Silent)
	if deadline, ok := ctx.Deadline(); ok {
		_ = p.reqW.SetWriteDeadline(deadline)
	} else {
		_ = p.reqW.SetWriteDeadline(time.Time{})
	}
	if p.cut.Load() { // after the deadline was set: see cutWrites
		_ = p.reqW.SetWriteDeadline(aLongTimeAgo)
	}
	if _, err := p.reqW.Write(frame); err != nil {
		p.req.end(req.MsgID)
		return fmt.Errorf("subprocess: send request %s to %s kernel: %w", req.MsgID, k.lang.name, err)
	}
	return nil
}

// Interrupt implements core.Kernel: the language's driver interrupts the
// running request (driver.interrupt; most send SIGINT to the interpreter's
// process group).
func (k *Kernel) Interrupt(ctx context.Context) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed {
		return ErrShutdown
	}
	if k.p == nil {
		return fmt.Errorf("subprocess: %s kernel is dead; restart it", k.lang.name)
	}
	return k.lang.drv.interrupt(ctx, procSignaller{k, k.p}, k.p.req.current())
}

// procSignaller is the signaller of interpreter p of kernel k.
type procSignaller struct {
	k *Kernel
	p *proc
}

func (s procSignaller) sigint() error {
	pid, pgid, _ := s.p.ids()
	if err := syscall.Kill(-pgid, syscall.SIGINT); err != nil {
		return fmt.Errorf("subprocess: interrupt %s kernel (pid %d): %w", s.k.lang.name, pid, err)
	}
	return nil
}

func (s procSignaller) send(ctx context.Context, record []byte) error {
	deadline := time.Now().Add(interruptWriteWait)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = s.p.reqW.SetWriteDeadline(deadline)
	_, err := s.p.reqW.Write(record)
	return err
}

func (s procSignaller) alive() bool { return !s.p.isGone() }

func (s procSignaller) later(d time.Duration, id string, f func()) {
	k, p := s.k, s.p
	time.AfterFunc(d, func() {
		k.mu.Lock()
		defer k.mu.Unlock()
		// Still id under mu: its end has not been reported, and no later
		// request can have been sent.
		if !k.closed && k.p == p && !p.isGone() && p.req.current() == id {
			f()
		}
	})
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
	// The old pump has ended, so nothing of an earlier request follows this.
	select {
	case k.msgs <- core.Message{Type: core.MsgStatus, State: core.StateRestarting}:
	case <-k.quit:
		return ErrShutdown
	case <-ctx.Done():
		return fmt.Errorf("subprocess: restart %s kernel: %w", k.lang.name, ctx.Err())
	}
	p, err := k.startInterpreter(ctx)
	if err != nil {
		return fmt.Errorf("subprocess: restart: %w", err)
	}
	k.setProc(p)
	return nil
}

// startInterpreter takes a ready interpreter from the pool when it serves
// the kernel's cwd (moved there: see pool.go), else forks one from the
// fork server's template, and otherwise starts one. The pool refills once
// no kernel waits (pool.awaitQuiet).
func (k *Kernel) startInterpreter(ctx context.Context) (*proc, error) {
	defer k.pool.ask()()
	k.forks.awaitFirstTemplate(ctx)
	if k.pool.serves(k.lang, k.cwd) {
		if p := k.pool.take(ctx, k.msgs, k.cwd); p != nil {
			return p, nil
		}
	}
	if p, _ := k.forks.fork(ctx, k.msgs, k.procSpec, k.cwd); p != nil {
		return p, nil
	}
	return startProc(ctx, k.procSpec, k.msgs)
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
