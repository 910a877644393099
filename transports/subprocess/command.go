package subprocess

import (
	"errors"
	"os"
	"os/exec"
	"slices"
	"syscall"
)

// CommandSandbox runs commands other than interpreters (the sandbox API's
// process.Process, hostcmd/envd) in the same walls as a context's
// interpreter: built from the same SandboxOptions by the same code
// (buildSandbox, sandbox.args), so the two never drift apart.
type CommandSandbox struct {
	sb *sandbox
}

// NewCommandSandbox builds the sandbox of commands for opts. Unlike a
// transport in auto mode, it never falls back to running commands
// unsandboxed: without bwrap it fails, unless opts.Mode is SandboxOff, where
// it returns nil (commands run as plain host processes, as the operator
// asked).
func NewCommandSandbox(opts SandboxOptions) (*CommandSandbox, error) {
	mode, err := ParseSandboxMode(opts.Mode)
	if err != nil {
		return nil, err
	}
	if mode == SandboxOff {
		return nil, nil
	}
	sb, err := buildSandbox(opts, bwrapWorks)
	if err != nil {
		return nil, err
	}
	return &CommandSandbox{sb: sb}, nil
}

// SandboxWritable is the writable set a sandbox built from opts has (its
// user directories made), whether or not bwrap works here: the sandbox
// API's files side writes only under it.
func SandboxWritable(opts SandboxOptions) []string {
	sb, _ := buildSandbox(opts, func() (*sandbox, error) { return &sandbox{}, nil })
	return sb.writable
}

// Writable is the sandbox's writable set: absolute, symlinks resolved,
// existing. The sandbox API's files side writes only under it.
func (c *CommandSandbox) Writable() []string { return slices.Clone(c.sb.writable) }

// Wrap makes cmd run in the sandbox with its working directory dir (which
// stays as writable as it is: Wrap never adds it to the writable set, unlike
// an interpreter's cwd). Hidden paths (files or directories: the host's
// secrets) are covered with an empty read-only file or directory. tty keeps
// the command in the session of its caller, so that a terminal the caller
// gave it (a PTY) stays its controlling terminal: the terminal is its own,
// so nothing it could inject (TIOCSTI) reaches another's.
func (c *CommandSandbox) Wrap(cmd *exec.Cmd, dir string, hidden []string, tty bool) error {
	if cmd.Path == "" || len(cmd.Args) == 0 {
		return errors.New("subprocess: wrap: no command")
	}
	args := c.sb.args("", false)
	args = args[:len(args)-1] // the closing "--"
	if tty {
		args = slices.DeleteFunc(args, func(a string) bool { return a == "--new-session" })
	}
	for _, h := range existingDirs(hidden) {
		if underAny(h, []string{"/tmp"}) && !underAny(h, c.sb.writable) {
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
	args = append(args, "--")
	cmd.Args = append(append([]string{c.sb.bwrap}, args...), append([]string{cmd.Path}, cmd.Args[1:]...)...)
	cmd.Path = c.sb.bwrap
	return nil
}

// CommandLimits put each command in cgroups of its own, as an interpreter
// is (reap.go, limits.go): a cgroup that ends every process the command
// started, and a context's limits (memory, pids, CPU weight).
type CommandLimits struct {
	limits  *limiter
	cgroups bool
}

// NewCommandLimits finds the controllers for lim, as a transport does;
// cgroups false: no cgroup (and so no limit can be set).
func NewCommandLimits(lim Limits, cgroups bool) (*CommandLimits, error) {
	l, err := newLimiter(lim, cgroups)
	if err != nil {
		return nil, err
	}
	return &CommandLimits{limits: l, cgroups: cgroups}, nil
}

// Start starts cmd in its cgroups. end, called once cmd was waited for,
// kills what is left in them and removes them.
func (c *CommandLimits) Start(cmd *exec.Cmd) (end func(), err error) {
	var cg *cgroup
	if c.cgroups {
		if cg, err = newCgroup(); err != nil {
			return nil, err
		}
		if cg != nil {
			if cmd.SysProcAttr == nil {
				cmd.SysProcAttr = &syscall.SysProcAttr{}
			}
			cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, cg.fd
		}
	}
	var g *limitGroups
	if c.limits != nil {
		g, err = c.limits.newGroups(cg)
	}
	if err == nil {
		err = g.start(cmd)
	}
	if cg != nil {
		cg.started()
	}
	end = func() {
		if cg != nil {
			_ = cg.kill(killWait)
		}
		g.remove(killWait)
	}
	if err != nil {
		end()
		return nil, err
	}
	return end, nil
}
