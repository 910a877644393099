package pluginrpc

import (
	"context"
	"io"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin/runner"
	"golang.org/x/sys/unix"
)

// procRunner starts the plugin process for go-plugin. We supply our own
// instead of letting go-plugin run an exec.Cmd so that (1) the supervisor
// learns the moment the process exits (exited closes), and (2) the plugin gets
// PR_SET_PDEATHSIG: if the host dies, even by SIGKILL, the kernel sends the
// plugin SIGTERM, and Serve stops its interpreters and exits.
type procRunner struct {
	cmd    *exec.Cmd
	stdout io.ReadCloser
	stderr io.ReadCloser

	pidfd     int           // -1 when pidfd_open is unavailable
	watchDone chan struct{} // closed when the pidfd watcher returns
	exitOnce  sync.Once
	exited    chan struct{} // closed the moment the process dies

	mu      sync.Mutex
	exitErr error // set by Wait
}

var _ runner.Runner = (*procRunner)(nil)

// newProcRunner builds the runner for path with the environment go-plugin
// prepared in spec (the host's environment, then the magic cookie, protocol
// versions, mTLS client cert) minus the host's own settings (the plugin gets
// its settings over the protocol: Configure).
func newProcRunner(path string, args []string, extraEnv []string, spec *exec.Cmd) (*procRunner, error) {
	cmd := exec.Command(path, args...)
	cmd.Env = append(withoutHostSettings(spec.Env), extraEnv...)
	// A process group of its own: a signal to the host's group (a SIGTERM
	// to `make run-jupyter`'s, Ctrl-C in a terminal) reaches the host only,
	// which shuts its contexts down through the plugin and then stops it;
	// the plugin stopping at the same moment failed those shutdowns. The
	// plugin still ends with the host (Pdeathsig, and it watches its
	// parent).
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM, Setpgid: true}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	return &procRunner{cmd: cmd, stdout: stdout, stderr: stderr, pidfd: -1, exited: make(chan struct{})}, nil
}

// withoutHostSettings drops the host's KERNELHOST_* variables from env (but
// the magic cookie, which go-plugin put there for the plugin): the access
// token, a Jupyter token and policy configs would otherwise sit in the
// plugin's /proc/<pid>/environ and in every interpreter's environment.
func withoutHostSettings(env []string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, hostEnvPrefix) && k != handshake.MagicCookieKey {
			continue
		}
		out = append(out, kv)
	}
	return out
}

// Start starts the process and watches it through a pidfd, which becomes
// readable the moment the process dies (before go-plugin has drained its
// pipes and reaped it).
func (r *procRunner) Start(context.Context) error {
	if err := r.cmd.Start(); err != nil {
		return err
	}
	fd, err := unix.PidfdOpen(r.cmd.Process.Pid, 0)
	if err != nil {
		return nil // old kernel: Wait alone reports the exit
	}
	r.pidfd = fd
	r.watchDone = make(chan struct{})
	go func() {
		defer close(r.watchDone)
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		for {
			if _, err := unix.Poll(fds, -1); err != unix.EINTR {
				break
			}
		}
		r.markExited()
	}()
	return nil
}

func (r *procRunner) markExited() { r.exitOnce.Do(func() { close(r.exited) }) }

// gone reports, without waiting, whether the process has died.
func (r *procRunner) gone() bool {
	select {
	case <-r.exited:
		return true
	default:
	}
	if r.pidfd < 0 {
		return false
	}
	fds := []unix.PollFd{{Fd: int32(r.pidfd), Events: unix.POLLIN}}
	n, _ := unix.Poll(fds, 0)
	return n > 0
}

// Wait is called once, by go-plugin, after it has drained stdout and stderr.
func (r *procRunner) Wait(context.Context) error {
	err := r.cmd.Wait()
	r.mu.Lock()
	r.exitErr = err
	r.mu.Unlock()
	r.markExited()
	if r.pidfd >= 0 {
		// The process is reaped, so the pidfd is readable and the watcher
		// returns; close the fd only after it has.
		<-r.watchDone
		unix.Close(r.pidfd)
	}
	return err
}

func (r *procRunner) exitError() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.exitErr
}

func (r *procRunner) Kill(context.Context) error {
	if r.cmd.Process == nil {
		return nil
	}
	err := r.cmd.Process.Kill()
	if err != nil && err.Error() == "os: process already finished" {
		return nil
	}
	return err
}

func (r *procRunner) pid() int {
	if r.cmd.Process == nil {
		return 0
	}
	return r.cmd.Process.Pid
}

func (r *procRunner) ID() string                                       { return strconv.Itoa(r.pid()) }
func (r *procRunner) Name() string                                     { return r.cmd.Path }
func (r *procRunner) Stdout() io.ReadCloser                            { return r.stdout }
func (r *procRunner) Stderr() io.ReadCloser                            { return r.stderr }
func (r *procRunner) Diagnose(context.Context) string                  { return "" }
func (r *procRunner) PluginToHost(n, a string) (string, string, error) { return n, a, nil }
func (r *procRunner) HostToPlugin(n, a string) (string, string, error) { return n, a, nil }

// runnerFunc adapts newProcRunner to go-plugin's ClientConfig.RunnerFunc and
// hands the runner back through out.
func runnerFunc(path string, args, env []string, out **procRunner) func(hclog.Logger, *exec.Cmd, string) (runner.Runner, error) {
	return func(_ hclog.Logger, spec *exec.Cmd, _ string) (runner.Runner, error) {
		r, err := newProcRunner(path, args, env, spec)
		if err != nil {
			return nil, err
		}
		*out = r
		return r, nil
	}
}
