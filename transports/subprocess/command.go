package subprocess

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"

	"github.com/kernelhost/kernelhost/transports/subprocess/internal/cgroup"
	"github.com/kernelhost/kernelhost/transports/subprocess/internal/sandbox"
)

// The names of the subprocess plugin's settings
// (plugins/cmd/kernelhost-transport-subprocess, settings.go) that the host
// reads too, from its settings.Config.TransportSettings: the sandbox API
// gives its commands a context's walls and limits from them
// (hostcmd/server/sandboxapi.go). Both sides name them by these constants,
// so a rename reaches both; the plugin's TestSettingsTheHostReads fails if
// one is no longer declared there, or no longer sets its field.
const (
	SettingSandbox          = "sandbox"
	SettingSandboxWritable  = "sandbox-writable"
	SettingContextNetwork   = "context-network"
	SettingContextMemory    = "context-memory"
	SettingContextPids      = "context-pids"
	SettingContextCPUWeight = "context-cpu-weight"
	SettingKernelCgroups    = "kernel-cgroups"
)

// CommandSandbox runs commands other than interpreters (the sandbox API's
// process.Process, hostcmd/envd) in the same walls as a context's
// interpreter: built from the same SandboxOptions by the same code
// (internal/sandbox: Build, Sandbox.Args), so the two never drift apart.
type CommandSandbox struct {
	sb *sandbox.Sandbox
}

// NewCommandSandbox builds the sandbox of commands for opts. Unlike a
// transport in auto mode, it never falls back to running commands
// unsandboxed: without bwrap it fails, unless opts.Mode is SandboxOff, where
// it returns nil (commands run as plain host processes, as the operator
// asked).
func NewCommandSandbox(opts SandboxOptions) (*CommandSandbox, error) {
	sb, err := sandbox.ForCommands(withDriverCache(opts))
	if sb == nil || err != nil {
		return nil, err
	}
	return &CommandSandbox{sb: sb}, nil
}

// SandboxWritable is the writable set a sandbox built from opts has (its
// user directories made), whether or not bwrap works here: the sandbox
// API's files side writes only under it.
func SandboxWritable(opts SandboxOptions) []string {
	return unprobed(opts).Writable()
}

// SandboxHidden is what a sandbox built from opts hides, whether or not
// bwrap works here: opts.Hidden and the service's own directories, less
// those holding a path every sandbox shows (internal/sandbox's walls.go,
// hiddenPaths). The sandbox API's files side refuses them too.
func SandboxHidden(opts SandboxOptions) []string {
	return unprobed(opts).Hidden()
}

// unprobed is the sandbox built from opts without asking whether bwrap
// works here.
func unprobed(opts SandboxOptions) *sandbox.Sandbox {
	sb, _ := sandbox.Build(withDriverCache(opts), func() (*sandbox.Sandbox, error) { return &sandbox.Sandbox{}, nil })
	return sb
}

// Writable is the sandbox's writable set: absolute, symlinks resolved,
// existing. The sandbox API's files side writes only under it.
func (c *CommandSandbox) Writable() []string { return c.sb.Writable() }

// Wrap makes cmd run in the sandbox with its working directory dir (which
// stays as writable as it is: Wrap never adds it to the writable set, unlike
// an interpreter's cwd). Hidden paths (files or directories: the host's
// secrets) are covered with an empty read-only file or directory. tty keeps
// the command in the session of its caller, so that a terminal the caller
// gave it (a PTY) stays its controlling terminal: the terminal is its own,
// so nothing it could inject (TIOCSTI) reaches another's.
//
// Under -context-network=isolated the command's namespace gets pasta, as an
// interpreter's does: net's Attach, once cmd started, attaches it; net's
// Close, if cmd did not start. net is nil under none and host.
func (c *CommandSandbox) Wrap(cmd *exec.Cmd, dir string, hidden []string, tty bool) (net *CommandNet, err error) {
	if cmd.Path == "" || len(cmd.Args) == 0 {
		return nil, errors.New("subprocess: wrap: no command")
	}
	args := c.sb.Args("", false)
	args = args[:len(args)-1] // the closing "--"
	if tty {
		args = slices.DeleteFunc(args, func(a string) bool { return a == "--new-session" })
	}
	for _, h := range sandbox.ExistingDirs(hidden) {
		if sandbox.UnderAny(h, []string{"/tmp"}) && !sandbox.UnderAny(h, c.sb.Writable()) {
			continue // the sandbox's own /tmp hides it already
		}
		if fi, err := os.Stat(h); err == nil && fi.IsDir() {
			args = append(args, "--tmpfs", h, "--remount-ro", h)
		} else {
			args = append(args, "--ro-bind", "/dev/null", h)
		}
	}
	if dir != "" {
		args = append(args, "--chdir", dir)
	}
	if c.sb.Network() == NetworkIsolated {
		r, w, err := os.Pipe()
		if err != nil {
			return nil, fmt.Errorf("network: %w", err)
		}
		cmd.ExtraFiles = append(cmd.ExtraFiles, w)
		args = append(args, "--info-fd", strconv.Itoa(2+len(cmd.ExtraFiles)))
		net = &CommandNet{pasta: c.sb.Pasta(), info: r, infoW: w}
	}
	args = append(args, "--")
	cmd.Args = append(append([]string{c.sb.Bwrap()}, args...), append([]string{cmd.Path}, cmd.Args[1:]...)...)
	cmd.Path = c.sb.Bwrap()
	return net, nil
}

// CommandNet is a wrapped command's outbound network stack, to attach once
// it started (Wrap).
type CommandNet struct {
	pasta       string
	info, infoW *os.File // the pipe bwrap says its init's pid on
}

// Attach gives the started command's network namespace pasta, waiting
// (bounded) until it is set up, and returns what stops it once the
// command ended. A nil net attaches nothing.
func (n *CommandNet) Attach() (stop func(), err error) {
	if n == nil {
		return func() {}, nil
	}
	n.infoW.Close() // bwrap has its own
	pid, err := sandbox.InitPidFrom(n.info)
	if errors.Is(err, sandbox.ErrEnded) {
		return func() {}, nil // a command that already ran to its end needs none
	}
	if err != nil {
		return nil, err
	}
	s, err := sandbox.Attach(n.pasta, pid)
	if err == nil {
		if err = s.Wait(); err != nil {
			s.Stop()
		}
	}
	if err != nil && (errors.Is(err, sandbox.ErrEnded) || sandbox.Ended(pid)) {
		return func() {}, nil // it ended while pasta was being attached
	}
	if err != nil {
		return nil, err
	}
	return s.Stop, nil
}

// Close releases the pipe of a command that did not start.
func (n *CommandNet) Close() {
	if n != nil {
		n.infoW.Close()
		n.info.Close()
	}
}

// CommandLimits put each command in cgroups of its own, as an interpreter
// is (internal/cgroup): a cgroup that ends every process the command
// started, and a context's limits (memory, pids, CPU weight).
type CommandLimits struct {
	limits  *cgroup.Limiter
	cgroups bool
}

// NewCommandLimits finds the controllers for lim, as a transport does;
// cgroups false: no cgroup (and so no limit can be set).
func NewCommandLimits(lim Limits, cgroups bool) (*CommandLimits, error) {
	l, err := cgroup.NewLimiter(lim, cgroups)
	if err != nil {
		return nil, err
	}
	return &CommandLimits{limits: l, cgroups: cgroups}, nil
}

// Start starts cmd in its cgroups. end, called once cmd was waited for,
// kills what is left in them and removes them.
func (c *CommandLimits) Start(cmd *exec.Cmd) (end func(), err error) {
	groups, err := cgroup.NewSet(c.limits, c.cgroups)
	if err != nil {
		return nil, err
	}
	end = func() { groups.Remove(killWait) }
	if err := groups.Start(cmd); err != nil {
		end()
		return nil, err
	}
	return end, nil
}
