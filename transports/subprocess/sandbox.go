package subprocess

import (
	"fmt"
	"slices"
	"syscall"

	"github.com/kernelhost/kernelhost/transports/subprocess/internal/sandbox"
)

// Each interpreter runs in a sandbox of its own (internal/sandbox: bwrap,
// its walls and its network). What is here is the transport's side: the
// settings, and how a sandboxed interpreter's pids are found and it is
// killed.

// Sandbox modes (Options.Sandbox.Mode, the -sandbox setting).
const (
	SandboxAuto = sandbox.Auto // a sandbox where the machine allows one, else none with a warning
	SandboxOn   = sandbox.On   // a sandbox, or no interpreter at all
	SandboxOff  = sandbox.Off  // no sandbox
)

// SandboxOptions configures the sandbox of every interpreter.
type SandboxOptions = sandbox.Options

// ParseSandboxMode checks a -sandbox value.
func ParseSandboxMode(s string) (string, error) { return sandbox.ParseMode(s) }

// withDriverCache is opts with the drivers' cache among the read-only
// paths: no sandbox writes the compiled drivers the host runs.
func withDriverCache(opts SandboxOptions) SandboxOptions {
	if dir, err := driverCacheDir(); err == nil {
		opts.ReadOnly = append(slices.Clone(opts.ReadOnly), dir)
	}
	return opts
}

// findSandboxed points pid and pgid at the interpreter and its sandbox's
// init once the driver is ready; nothing without a sandbox.
func (p *proc) findSandboxed() error {
	if p.spec.sandbox == nil {
		return nil
	}
	init, interp, err := sandbox.Pids(p.cmd.Process.Pid)
	if err != nil {
		return fmt.Errorf("start %s kernel: %w", p.spec.lang.name, err)
	}
	p.idsMu.Lock()
	p.nsInit, p.pgid, p.pid = init, init, interp
	p.idsMu.Unlock()
	return nil
}

// killSandbox kills bwrap and the sandbox's init: the kernel then kills
// every process left in the sandbox's PID namespace. Before findSandboxed,
// bwrap's end takes the init with it (--die-with-parent).
func (p *proc) killSandbox() {
	if p.cmd.Process != nil { // not a context forked in a sandbox, whose init is nsInit
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	}
	if p.familyOf().isApart() {
		return // the init of a family of contexts: killAll ends the member's cgroup (family.go)
	}
	if _, _, nsInit := p.ids(); nsInit > 0 && !p.exited.Load() {
		_ = syscall.Kill(nsInit, syscall.SIGKILL)
	}
}
