package subprocess

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"

	"github.com/kernelhost/kernelhost/transports/subprocess/internal/sandbox"
)

// A sandboxed interpreter's network (SandboxOptions.Network, the
// -context-network setting; internal/sandbox's network.go): its stack,
// pasta, is attached while it starts and ends with it (netAttach).

// Network settings (SandboxOptions.Network).
const (
	NetworkIsolated = sandbox.Isolated
	NetworkNone     = sandbox.None
	NetworkHost     = sandbox.Host
)

// ParseNetwork checks a -context-network value.
func ParseNetwork(s string) (string, error) { return sandbox.ParseNetwork(s) }

// unsetNetwork is the network of a transport whose SandboxOptions.Network
// is "": NetworkIsolated, the setting's default. This package's tests make
// it NetworkNone (TestMain): most are not about the network, and pasta
// costs each sandboxed interpreter ~140 ms of CPU; those that are name
// theirs.
var unsetNetwork = NetworkIsolated

// netAttach is an interpreter's network stack while it lives: set once it
// is attached, stopped when the interpreter ended (proc.wait), whichever
// comes first. The stack is attached in the background, while the
// interpreter starts (attach), and the start waits for it at its end
// (await): no cell runs before its network is there.
type netAttach struct {
	mu    sync.Mutex
	stack *sandbox.Stack
	ended bool
	// done carries the attachment's outcome; nil: none under way.
	done chan error
}

// set keeps s, or stops it when the interpreter ended already.
func (a *netAttach) set(s *sandbox.Stack) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.ended {
		s.Stop()
		return errors.New("network: the interpreter ended before its network was set up")
	}
	a.stack = s
	return nil
}

// end stops the stack, now or when it is set.
func (a *netAttach) end() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.ended = true
	a.stack.Stop()
	a.stack = nil
}

// needsStack says whether p's namespace gets pasta: an interpreter's under
// NetworkIsolated, not a fork template's, which needs no network.
func (p *proc) needsStack() bool {
	sb := p.spec.sandbox
	return sb != nil && sb.Network() == NetworkIsolated && !p.spec.forkTemplate
}

// attachStack attaches pasta, in the background, to the namespace of the
// process pidOf names (a process of p's sandbox); awaitStack waits for it.
// pidOf's wait must be bounded.
func (p *proc) attachStack(pidOf func() (int, error)) {
	p.net.done = make(chan error, 1)
	go func() {
		pid, err := pidOf()
		var s *sandbox.Stack
		if err == nil {
			s, err = sandbox.Attach(p.spec.sandbox.Pasta(), pid)
		}
		if err == nil {
			if err = s.Wait(); err == nil {
				err = p.net.set(s)
			}
		}
		p.net.done <- err
	}()
}

// awaitStack waits until the stack attachStack attaches is set up; nil at
// once when none is under way. Its steps are bounded, so is this.
func (p *proc) awaitStack() error {
	if p.net.done == nil {
		return nil
	}
	return <-p.net.done
}

// stackInfo gives cmd, when p's network needs a stack, the pipe bwrap
// says its sandbox's init's pid on (--info-fd, the descriptor fd): r is
// the read end (nil: none), w the write end, the caller's to close once
// cmd started.
func (p *proc) stackInfo(cmd *exec.Cmd) (r, w *os.File, fd int, err error) {
	if !p.needsStack() {
		return nil, nil, 0, nil
	}
	if r, w, err = os.Pipe(); err != nil {
		return nil, nil, 0, fmt.Errorf("network: %w", err)
	}
	cmd.ExtraFiles = append(cmd.ExtraFiles, w)
	return r, w, 2 + len(cmd.ExtraFiles), nil
}
