package subprocess

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kernelhost/kernelhost/core"
	"github.com/kernelhost/kernelhost/transports/subprocess/internal/cgroup"
	"github.com/kernelhost/kernelhost/transports/subprocess/internal/sandbox"
)

// proc is one interpreter process, its pipes and its lifecycle: the waiter
// (cmd.Wait) and the kill. Its reader (rd, msgreader.go) owns the read
// ends: the pump (reads fd 4) and one stream reader each for fd 1 and 2.
//
// All three read ends are non-blocking pipes registered with Go's netpoller
// (os.NewFile of a non-blocking fd), so a reader waiting for the interpreter
// parks its goroutine instead of holding an OS thread in a poll syscall. That
// matters for latency: when the pump wakes and hands a message to the
// engine's goroutine, that goroutine runs on the same thread as soon as the
// pump parks again, instead of waiting for another thread to be woken to
// steal it.
type proc struct {
	spec procSpec
	// rd reads its pipes and hands on what it says (msgreader.go).
	rd *procReader
	// req is the request it runs.
	req running
	cmd *exec.Cmd
	// fork is its part in forking (forksandbox.go): its control socket,
	// where an interpreter that can fork gets its forks' descriptors
	// (hasControl), and in a sandbox more; nil for other interpreters.
	fork *forking
	// net is the user-mode network stack of its namespace (network.go),
	// ended with it.
	net netAttach
	// idsMu guards pid, pgid and nsInit: in a sandbox they are set once the
	// driver is ready, while the readers (and driverGone) already run. Read
	// them through ids().
	idsMu sync.Mutex
	pid   int
	reqW  *os.File    // fd 3 in the child
	cut   atomic.Bool // writes to reqW are cut: it is about to be killed (Kernel.cutWrites)
	// In a sandbox (internal/sandbox), pid is the interpreter's, not bwrap's,
	// pgid the group of the sandbox's init, nsInit, whose end ends every
	// process in the sandbox. Without one, pgid is pid and nsInit 0.
	pgid, nsInit int

	// groups are its cgroups (internal/cgroup): its own cgroup v2, where
	// the machine offers one (killTree without), and its limits' groups.
	groups   *cgroup.Set
	stop     chan struct{} // closed when the kernel kills this process on purpose
	stopOnce sync.Once
	exited   atomic.Bool   // cmd.Wait returned; set before rd.msgF's deadline wakes the pump
	waitDone chan struct{} // closed after cmd.Wait returned
	gone     atomic.Bool   // the driver is gone (exited or killed)
	// adoptMu orders a pooled interpreter's hand-out (adopt) against its
	// death (driverGone): it is handed out alive, and then its owner hears
	// of its death, or it is not handed out at all.
	adoptMu sync.Mutex
}

// pipe returns a close-on-exec pipe whose read end is non-blocking.
func pipe() (r, w int, err error) {
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_CLOEXEC); err != nil {
		return -1, -1, err
	}
	if err := unix.SetNonblock(fds[0], true); err != nil {
		unix.Close(fds[0])
		unix.Close(fds[1])
		return -1, -1, err
	}
	return fds[0], fds[1], nil
}

// pollable wraps the non-blocking read end fd in an *os.File, which
// registers it with the netpoller. Deadlines are how the pump and the
// readers are stopped, so a file that cannot have one is an error.
func pollable(fd int, name string) (*os.File, error) {
	f := os.NewFile(uintptr(fd), name)
	if err := f.SetReadDeadline(time.Time{}); err != nil {
		f.Close()
		return nil, fmt.Errorf("pipe %s is not pollable: %w", name, err)
	}
	return f, nil
}

// procSpec is everything an interpreter's start depends on. A pooled
// interpreter is started from the same spec as a fresh one of its language
// (the host's environment and the language's, the pool's cwd), so the two
// differ only in when they were started.
type procSpec struct {
	lang    language
	args    []string // the interpreter's, that run the driver (driver.command)
	cwd     string
	env     []string
	cgroups bool             // a cgroup per interpreter where the machine offers one
	sandbox *sandbox.Sandbox // nil: none
	// maxMessage caps one message line and one batch's output (msgLines).
	maxMessage int
	limits     *cgroup.Limiter // nil: no limits (internal/cgroup)
	// forkTemplate marks a fork template's spec (forkserver.go): in a
	// sandbox, its bwrap and control socket are a template's.
	forkTemplate bool
	// warmUp asks a context forked from a template to use what the
	// template preloaded once before it says ready (forkserver.py's
	// _warm_up): the pool's contexts, made ahead of need, pay then the
	// first use's cost that a new context's first cells would.
	warmUp bool
	// cells is the transport's cell activity, which p's cells count in
	// (nil: none).
	cells *cellActivity
}

// startProc starts an interpreter for spec and waits (bounded by ctx) until
// its driver reported ready. Its messages go to out; nil for a pooled
// interpreter, which is given one when it is handed out (adopt).
func startProc(ctx context.Context, spec procSpec, out chan<- core.Message) (*proc, error) {
	p, err := newInterpreter(ctx, spec, out, "start", (*proc).launch)
	if err != nil {
		return nil, err
	}
	if err := p.findSandboxed(); err != nil {
		p.kill()
		return nil, err
	}
	if err := p.awaitStack(); err != nil {
		p.kill()
		return nil, fmt.Errorf("start %s kernel: %w", spec.lang.name, err)
	}
	return p, nil
}

// begin brings the process of a new interpreter into being on the child's
// ends of its pipes (in childFiles order) with the frame mark of its fd 1
// ("": none): it starts it (launch) or has an interpreter fork it
// (forkOf, forkInSandbox, copyOf), and sets p.cmd and p's ids. On
// error nothing it started runs.
type begin func(p *proc, child []*os.File, mark string) error

// newInterpreter is the one way a proc comes to be: it opens the pipes of
// an interpreter for spec whose messages go to out (nil: none yet, see
// adopt), has begin bring its process into being on them (verb names what
// begin does, for errors), and serves it until its driver is ready,
// bounded by ctx.
func newInterpreter(ctx context.Context, spec procSpec, out chan<- core.Message, verb string, begin begin) (*proc, error) {
	p := newProc(spec, out)
	child, err := p.openPipes()
	defer func() {
		for _, f := range child {
			f.Close() // the parent's copies: the child has its own by now, or failed
		}
	}()
	var mark string
	if err == nil {
		mark, err = p.frameMark()
	}
	if err != nil {
		p.closeFiles()
		return nil, fmt.Errorf("%s %s kernel: %w", verb, spec.lang.name, err)
	}
	if err := begin(p, child, mark); err != nil {
		p.closeFiles()
		return nil, err
	}
	if err := p.serve(ctx); err != nil {
		return nil, err
	}
	return p, nil
}

// newProc is the state of an interpreter not started yet. Its messages go
// to out (nil: none yet, see adopt).
func newProc(spec procSpec, out chan<- core.Message) *proc {
	p := &proc{
		spec:     spec,
		stop:     make(chan struct{}),
		waitDone: make(chan struct{}),
	}
	p.req.cells = spec.cells
	p.rd = newProcReader(out, p.stop, &p.req, spec.maxMessage, p.driverGone)
	return p
}

// frameMark gives fd 1 a frame reader when the driver writes its messages
// there (fd1Frames), and returns its mark; "" for other drivers.
func (p *proc) frameMark() (string, error) {
	if p.spec.lang.drv.channel() != fd1Frames {
		return "", nil
	}
	fr, mark, err := newFrameReader()
	if err != nil {
		return "", err
	}
	p.rd.streams[0].reader = fr
	return mark, nil
}

// childFiles are the child's ends of its pipes, in descriptor order.
type childFiles struct {
	requests, messages, stdout, stderr *os.File // fd 3, 4, 1, 2
}

func (c *childFiles) all() []*os.File {
	return []*os.File{c.requests, c.messages, c.stdout, c.stderr}
}

// openPipes makes the four pipes of an interpreter: it
// keeps the parent's ends in p and returns the child's, to be closed once
// the child has them.
func (p *proc) openPipes() (child []*os.File, err error) {
	var c childFiles
	// The child's ends made so far are returned whatever happens, for the
	// caller to close.
	defer func() {
		for _, f := range c.all() {
			if f != nil {
				child = append(child, f)
			}
		}
	}()
	if c.requests, p.reqW, err = os.Pipe(); err != nil {
		return nil, err
	}
	for _, e := range []struct {
		f     **os.File
		fd    *int
		child **os.File
		name  string
	}{{&p.rd.msgF, &p.rd.msgFD, &c.messages, "fd4"}, {&p.rd.streams[0].f, &p.rd.streams[0].fd, &c.stdout, "stdout"}, {&p.rd.streams[1].f, &p.rd.streams[1].fd, &c.stderr, "stderr"}} {
		r, w, err := pipe()
		if err != nil {
			return nil, err
		}
		*e.child = os.NewFile(uintptr(w), "child-"+e.name)
		if *e.f, err = pollable(r, e.name); err != nil {
			return nil, err
		}
		*e.fd = r
	}
	return nil, nil
}

// launch starts the interpreter on the child's ends of the pipes (as
// openPipes returned them), in a cgroup of its own where there is one: the
// begin of startProc.
func (p *proc) launch(child []*os.File, mark string) (err error) {
	s := p.spec
	cmd := exec.Command(s.lang.path, s.args...)
	cmd.Dir = s.cwd
	cmd.Env = slices.Clip(s.env)
	if pwd := pwdOf(s.cwd); pwd != "" {
		cmd.Env = append(cmd.Env, "PWD="+pwd)
	}
	cmd.ExtraFiles = []*os.File{child[0], child[1]} // fd 3, fd 4
	if s.hasControl() {
		ctl, ctlChild, err := openControl()
		if err != nil {
			return fmt.Errorf("start %s kernel: %w", s.lang.name, err)
		}
		p.fork = &forking{ctl: ctl}
		defer ctlChild.Close()                            // the child has its own once started
		cmd.ExtraFiles = append(cmd.ExtraFiles, ctlChild) // fd 5
	}
	cmd.Stdout, cmd.Stderr = child[2], child[3]
	if mark != "" {
		cmd.Env = append(cmd.Env, frameMarkEnv+"="+mark)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	info, infoW, infoFd, err := p.stackInfo(cmd)
	if err != nil {
		return fmt.Errorf("start %s kernel: %w", s.lang.name, err)
	}
	if info != nil {
		defer infoW.Close() // bwrap has its own once started
		defer func() {
			if err != nil {
				info.Close()
			}
		}()
	}
	if s.sandbox != nil {
		s.sandbox.Wrap(cmd, s.cwd, s.forkTemplate, infoFd)
	}
	if p.groups, err = cgroup.NewSet(s.limits, s.cgroups); err == nil {
		if err = p.groups.Start(cmd); err != nil {
			p.groups.Remove(killWait)
		}
	}
	if err != nil {
		return fmt.Errorf("start %s kernel in %q: %w", s.lang.name, s.cwd, err)
	}
	p.cmd = cmd
	if info != nil {
		p.attachStack(func() (int, error) { return sandbox.InitPidFrom(info) }) // while the interpreter starts
	}
	p.idsMu.Lock()
	p.pid = cmd.Process.Pid
	p.pgid = p.pid
	p.idsMu.Unlock()
	return nil
}

// hasControl says whether an interpreter started for s gets a control
// socket (fd 5, openControl): a sandboxed fork template, for its requests;
// outside a sandbox every interpreter of a driver that forks (python's),
// for its forks' descriptors (fork.go). A sandboxed interpreter bwrap
// starts cannot fork (errNoFamily).
func (s procSpec) hasControl() bool {
	if s.sandbox != nil {
		return s.forkTemplate
	}
	_, ok := s.lang.drv.(forker)
	return ok
}

// pwdOf is the PWD an interpreter in cwd gets: cwd made absolute, as a shell
// or exec.Cmd with the default environment sets it, not the host's own PWD,
// which names another directory; "" (no cwd: the host's) keeps the host's.
// A pooled interpreter moved on hand-out gets the same (pool.moveTo, the
// drivers' cwd record), so PWD never tells a pooled interpreter from a cold
// one, whether the interpreter reads it (a pyenv shim is a bash script,
// which resets a PWD that names another directory) or not.
func pwdOf(cwd string) string {
	if cwd == "" {
		return ""
	}
	abs, err := filepath.Abs(cwd)
	if err != nil {
		return ""
	}
	return abs
}

// awaitReady waits for the driver's kh_ready, or for it to fail; on failure
// the process is killed.
func (p *proc) awaitReady(ctx context.Context) error {
	var err error
	select {
	case err = <-p.rd.ready:
	case <-ctx.Done():
		err = ctx.Err()
	}
	if err != nil {
		p.kill()
		return fmt.Errorf("start %s kernel in %q: %w", p.spec.lang.name, p.spec.cwd, err)
	}
	return nil
}

// ids are the interpreter's pid, the process group SIGINT goes to and, in
// a sandbox, the sandbox's init (0 without one).
func (p *proc) ids() (pid, pgid, nsInit int) {
	p.idsMu.Lock()
	defer p.idsMu.Unlock()
	return p.pid, p.pgid, p.nsInit
}

// aLongTimeAgo is a deadline in the past: setting it wakes a parked reader.
var aLongTimeAgo = time.Unix(1, 0)

func (p *proc) wait() {
	if f := p.fork; f != nil && f.status != nil {
		f.readExitStatus()
		f.family.leave()
	} else {
		if p.cmd.Process != nil {
			parkUntilExit(p.cmd.Process.Pid)
		}
		_ = p.cmd.Wait()
	}
	p.net.end()
	// Wake the pump: a driver whose fd 4 is still held open elsewhere (a
	// child of bash) has exited all the same.
	p.exited.Store(true)
	p.rd.wake()
	close(p.waitDone)
}

func (p *proc) isGone() bool { return p.gone.Load() }

// adopt hands a pooled interpreter to its kernel, whose Messages, out,
// then carry what it says; false when it died while it waited.
func (p *proc) adopt(out chan<- core.Message) bool {
	p.adoptMu.Lock()
	defer p.adoptMu.Unlock()
	if p.gone.Load() {
		return false
	}
	p.rd.out.Store(&out)
	return true
}

// enterCwd moves a pooled interpreter, not handed out yet, into dir: the
// driver chdirs and redoes what its start derived from the directory it
// started in (driver.py, driver.js), then answers kh_cwd. An error when it
// could not (the directory went away since StartKernel checked it), died,
// or ctx ended; the caller then kills it.
func (p *proc) enterCwd(ctx context.Context, dir string) error {
	if deadline, ok := ctx.Deadline(); ok {
		_ = p.reqW.SetWriteDeadline(deadline)
	}
	if _, err := p.reqW.Write(p.spec.lang.drv.cwdRecord(dir)); err != nil {
		return fmt.Errorf("send the cwd record: %w", err)
	}
	_ = p.reqW.SetWriteDeadline(time.Time{})
	select {
	case why := <-p.rd.cwdAck:
		if why != "" {
			return &cwdRefused{dir: dir, why: why}
		}
		return nil
	case <-p.rd.pumpDone:
		return errors.New("the interpreter died")
	case <-ctx.Done():
		return ctx.Err()
	}
}

// cwdRefused is the driver's answer to a hand-out's cwd record when it
// did not enter dir, or (a context forked ahead of need) what its
// template preloaded changed on disk since: why starts with staleMark.
type cwdRefused struct{ dir, why string }

func (e *cwdRefused) Error() string { return fmt.Sprintf("enter %q: %s", e.dir, e.why) }

// closeFiles closes the parent's ends; the pump and the readers are done
// with them (or never ran).
func (p *proc) closeFiles() {
	if p.reqW != nil {
		p.reqW.Close()
	}
	p.rd.closeFiles()
	if p.fork != nil {
		p.fork.ctl.Close()
	}
}

// serve starts reaping the launched interpreter and reading its pipes, and
// waits (bounded by ctx) for its driver's ready: the same for a started and a
// forked interpreter.
func (p *proc) serve(ctx context.Context) error {
	go p.wait()
	p.rd.start()
	return p.awaitReady(ctx)
}
