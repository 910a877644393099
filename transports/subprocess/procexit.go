package subprocess

import (
	"bytes"
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/kernelhost/kernelhost/core"
)

const (
	// killWait bounds the wait for a SIGKILLed process group to be reaped.
	killWait = 5 * time.Second
	// exitWait bounds the wait for a driver that closed fd 4 to exit.
	exitWait = 2 * time.Second
	// sandboxExitWait bounds the wait for bwrap to exit by itself after its
	// interpreter's pipes closed, before what is left is killed.
	sandboxExitWait = 500 * time.Millisecond
)

// kill SIGKILLs the interpreter and every descendant (killAll) and waits
// (bounded) until the process is reaped and the pump has returned. Safe to
// call more than once.
func (p *proc) kill() {
	p.stopOnce.Do(func() {
		close(p.stop)
		p.gone.Store(true)
		p.killAll()
		p.rd.wake()
	})
	select {
	case <-p.waitDone:
	case <-time.After(killWait):
	}
	p.removeCgroup()
	<-p.rd.pumpDone
	p.closeFiles()
}

// killAll SIGKILLs the interpreter and all its descendants, those in
// sessions of their own included: its cgroup's, or its process tree's.
// It may run twice at once (a kill while the driver's exit is handled:
// driverGone): each of its steps may.
func (p *proc) killAll() {
	if p.spec.sandbox != nil {
		p.killSandbox()
	}
	if p.groups.In() {
		pid, _, _ := p.ids()
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		p.groups.Kill(0) // removed if empty already
		return
	}
	if p.spec.sandbox == nil {
		pid, _, _ := p.ids()
		killTree(pid)
	}
}

// removeCgroup waits (bounded) for the killed cgroup to empty and removes it.
func (p *proc) removeCgroup() { p.groups.Remove(killWait) }

// driverGone handles a driver that went away by itself: it reaps the
// process, kills what is left of its group and reports the kernel dead.
func (p *proc) driverGone(cause error) {
	select {
	case <-p.stop:
		return // the kernel is killing it: Restart or Shutdown reports
	default:
	}
	p.adoptMu.Lock()
	p.gone.Store(true)
	p.adoptMu.Unlock()
	if p.spec.sandbox != nil {
		// The interpreter is the child of the sandbox's init, not ours:
		// only bwrap, left to exit by itself, says how it ended (128+signal).
		select {
		case <-p.waitDone:
		case <-time.After(sandboxExitWait):
		}
	}
	overLimit := p.groups.MemoryExceeded() // before killAll removes its cgroup
	p.killAll()                            // what it left behind
	select {
	case <-p.waitDone:
	case <-time.After(exitWait + killWait):
	}
	p.removeCgroup()
	if !p.rd.isReady.Swap(true) {
		p.rd.ready <- startFailure(p, cause) // it died while starting: StartKernel reports it
		return
	}
	if id := p.req.current(); overLimit != "" && id != "" {
		p.rd.emit(core.Message{ParentID: id, Type: core.MsgError, EName: "MemoryLimitExceeded", EValue: overLimit})
	}
	p.req.end("")
	p.rd.emit(core.Message{Type: core.MsgStatus, State: core.StateDead, Text: p.howItDied()})
}

// howItDied says what died and how, for the KernelDied error: "the python
// interpreter (pid 4242) was killed by signal 11 (segmentation fault)".
func (p *proc) howItDied() string {
	what := fmt.Sprintf("the %s interpreter", p.spec.lang.name)
	select {
	case <-p.waitDone:
	default:
		return what + " stopped answering" // not reaped within exitWait + killWait
	}
	pid, _, _ := p.ids()
	what = fmt.Sprintf("%s (pid %d)", what, pid)
	if f := p.fork; f != nil && f.status != nil { // forked in a sandbox: its namespace's init said how it ended
		if f.exitStatus == nil {
			return what + " was killed with its sandbox"
		}
		if ws := *f.exitStatus; ws.Signaled() {
			return fmt.Sprintf("%s was killed by signal %d (%s)", what, int(ws.Signal()), ws.Signal())
		}
		return fmt.Sprintf("%s exited with status %d", what, f.exitStatus.ExitStatus())
	}
	st := p.cmd.ProcessState
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return fmt.Sprintf("%s was killed by signal %d (%s)", what, int(ws.Signal()), ws.Signal())
	}
	if code := st.ExitCode(); p.spec.sandbox != nil && code > 128 && code < 128+65 {
		// bwrap exits with 128+N when the interpreter was killed by signal N.
		sig := syscall.Signal(code - 128)
		return fmt.Sprintf("%s was killed by signal %d (%s)", what, int(sig), sig)
	}
	return fmt.Sprintf("%s exited with status %d", what, st.ExitCode())
}

func startFailure(p *proc, cause error) error {
	msg := "the interpreter exited before it was ready"
	select {
	case <-p.waitDone:
		if p.cmd != nil && p.cmd.ProcessState != nil {
			msg += " (" + p.cmd.ProcessState.String() + ")"
		}
	default:
	}
	if p.rd.startErr.Len() > 0 {
		msg += ": " + string(bytes.TrimSpace(p.rd.startErr.Bytes()))
	}
	if cause != nil {
		return fmt.Errorf("%s: %w", msg, cause)
	}
	return errors.New(msg)
}
