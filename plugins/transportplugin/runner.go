package transportplugin

import (
	"context"
	"io"
	"os/exec"
	"strconv"
	"sync"
	"syscall"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin/runner"
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

	exitOnce sync.Once
	exited   chan struct{}
	exitErr  error
}

var _ runner.Runner = (*procRunner)(nil)

// newProcRunner builds the runner for path with the environment go-plugin
// prepared in spec (magic cookie, protocol versions, mTLS client cert).
func newProcRunner(path string, args []string, extraEnv []string, spec *exec.Cmd) (*procRunner, error) {
	cmd := exec.Command(path, args...)
	cmd.Env = append(append([]string(nil), spec.Env...), extraEnv...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	return &procRunner{cmd: cmd, stdout: stdout, stderr: stderr, exited: make(chan struct{})}, nil
}

func (r *procRunner) Start(context.Context) error { return r.cmd.Start() }

// Wait is called once, by go-plugin, after it has drained stdout and stderr.
func (r *procRunner) Wait(context.Context) error {
	err := r.cmd.Wait()
	r.exitOnce.Do(func() {
		r.exitErr = err
		close(r.exited)
	})
	return err
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
