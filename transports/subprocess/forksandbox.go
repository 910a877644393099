package subprocess

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kernelhost/kernelhost/core"
)

// Contexts forked from a sandboxed template (docs/RATIONALE.md, "Contexts
// by fork"). The template runs in a bwrap sandbox of its own, in a user
// namespace of its own where it holds the capabilities to make namespaces
// (sandbox.Sandbox.Args), and runs only code from read-only paths. Each context it
// forks gives itself the walls bwrap gives an interpreter it starts: its
// own mount, PID, IPC, cgroup and network namespaces, /proc and /tmp, no
// capability, no_new_privs (drivers/forkserver.py: B, C). The host's part is here:
//
//   - The template's pipes to the host cannot be opened from inside its
//     sandbox (no /proc/<host pid>), so the context's pipes, the pipe its
//     namespace's init writes the exit status to, a handshake socket, its
//     init's family socket and its own control socket (for its live copies:
//     family.go) go with the request over the template's control socket
//     (SCM_RIGHTS).
//   - The context is not this process's child (it is nested in the
//     template's PID namespace), so its pids come from the credentials the
//     kernel attaches to what it says on the handshake socket, translated
//     into this process's PID namespace; its end is the status pipe's end.
//   - Before it leaves the template's namespaces, the host moves it into
//     its cgroup and limits (enterGroups), so everything it starts is there.
//
// A forked context lives in the template's PID namespace, so a retired
// template lives on (reaping) until its last context ended (forkServer.retire).

// forkSeq numbers fork requests: an answer (or, on a control socket, the
// descriptors) of a request given up on is skipped by the next one.
var forkSeq atomic.Uint64

// forking is a proc's part in forking. Outside a sandbox, an interpreter
// that can fork (procSpec.hasControl; a fork template's, a context's) has
// only ctl, its end of the control socket (fd 5 in it), where the
// descriptors of its forks go (fork.go). A sandboxed fork template has ctl,
// and line, the requests on it (forkline.go). A context forked in a
// sandbox has ctl too, where the descriptors of its copies go (family.go),
// and:
//
//   - status, the read end of the pipe its namespace's init writes the
//     interpreter's wait status to before it exits (the interpreter is not
//     this process's child, so cmd.Wait cannot say); exitStatus is what it
//     wrote, set before the proc's waitDone closes;
//   - family, the sandbox it shares with its live copies.
//
// Other interpreters (those of a driver that does not fork, and those
// bwrap started) have none (proc.fork is nil).
type forking struct {
	ctl        *net.UnixConn
	line       *forkLine // a template's, once it is ready
	status     *os.File
	exitStatus *syscall.WaitStatus
	family     *family
}

// familyOf is the family of a context forked in a sandbox; nil for others.
func (p *proc) familyOf() *family {
	if p.fork == nil {
		return nil
	}
	return p.fork.family
}

// openControl makes an interpreter's control socket: the host keeps ctl,
// child is the interpreter's fd 5.
func openControl() (ctl *net.UnixConn, child *os.File, err error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("control socket: %w", err)
	}
	host := os.NewFile(uintptr(fds[0]), "fork-control")
	defer host.Close()
	conn, err := net.FileConn(host)
	if err != nil {
		unix.Close(fds[1])
		return nil, nil, fmt.Errorf("control socket: %w", err)
	}
	return conn.(*net.UnixConn), os.NewFile(uintptr(fds[1]), "fork-control-child"), nil
}

// forkDeadline bounds a fork's steps: ctx's deadline, or forkAckWait
// when that is sooner.
func forkDeadline(ctx context.Context) time.Time {
	deadline := time.Now().Add(forkAckWait)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	return deadline
}

// forkSandboxed makes a new interpreter for spec, whose messages go to out,
// as a context forked from the sandboxed template tmpl, moved into cwd
// ("": the template's).
func forkSandboxed(ctx context.Context, tmpl *proc, spec procSpec, cwd string, out chan<- core.Message) (*proc, error) {
	deadline := forkDeadline(ctx)
	return newInterpreter(ctx, spec, out, "fork", func(p *proc, child []*os.File, mark string) error {
		if err := p.forkInSandbox(tmpl, cwd, child, mark, deadline); err != nil {
			return fmt.Errorf("fork %s kernel: %w", spec.lang.name, err)
		}
		return nil
	})
}

// forkInSandbox asks the sandboxed template tmpl for a context on the
// child's ends of p's pipes and follows its handshake: the begin of
// forkSandboxed.
func (p *proc) forkInSandbox(tmpl *proc, cwd string, child []*os.File, mark string, deadline time.Time) (err error) {
	files, err := p.openForkFiles(child) // its status pipe, handshake, control socket
	defer func() { files.close(err) }()
	if err != nil {
		return err
	}
	fam, famChild, err := openFamily()
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			fam.ctl.Close()
		}
	}()
	// In the order forkserver.py takes them: pipes, status, handshake,
	// family socket, control socket.
	c := files.toChild
	toChild := []*os.File{c[0], c[1], c[2], c[3], files.statusW, c[4], famChild, c[5]}
	req := forkRequest{Fork: forkSpec{Seq: forkSeq.Add(1), Mark: mark, Cwd: cwd, WarmUp: p.spec.warmUp}}
	err = tmpl.fork.line.ask(req, toChild, deadline)
	files.sent()
	famChild.Close()
	if err != nil {
		return err
	}
	pidB, pidC, err := p.walls(files.hs, deadline)
	if err != nil {
		return err
	}
	p.cmd = &exec.Cmd{Path: tmpl.cmd.Path, Args: tmpl.cmd.Args}
	p.idsMu.Lock()
	p.pid, p.pgid, p.nsInit = pidC, pidC, pidB // C leads a session of its own
	p.idsMu.Unlock()
	fam.init = pidB
	p.fork.family = fam
	return nil
}

// walls follows the forked context's handshake: B, its namespace's init,
// says "b", is moved into its groups and told to go on; C, the
// interpreter, says "c". B's network namespace is there from its start:
// its stack is set up while B and C make the rest of the walls. On
// failure, what was started is ended.
func (p *proc) walls(hs *handshake, deadline time.Time) (pidB, pidC int, err error) {
	_ = hs.SetDeadline(deadline)
	pidB, err = hs.next('b')
	if err == nil && p.needsStack() {
		p.attachStack(func() (int, error) { return pidB, nil })
	}
	if err == nil {
		if err = p.enterGroups(pidB); err == nil {
			_, err = hs.Write([]byte("go"))
		}
	}
	if err == nil {
		pidC, err = hs.next('c')
	}
	if err == nil {
		err = p.awaitStack()
	}
	if err != nil {
		// What was started ends with B's namespace (or by itself, once
		// the handshake socket is closed).
		if pidB > 0 {
			_ = syscall.Kill(pidB, syscall.SIGKILL)
		}
		p.net.end() // a stack attached now or later
		p.removeCgroup()
		return 0, 0, err
	}
	return pidB, pidC, nil
}

// handshake is the host's end of the socket a forked context says "b" and
// "c" on; the kernel attaches each sender's credentials
// (SO_PASSCRED), whose pid is the sender's in this process's PID namespace.
type handshake struct{ *net.UnixConn }

func newHandshake() (*handshake, *os.File, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("handshake socket: %w", err)
	}
	child := os.NewFile(uintptr(fds[1]), "child-handshake")
	if err := unix.SetsockoptInt(fds[0], unix.SOL_SOCKET, unix.SO_PASSCRED, 1); err != nil {
		unix.Close(fds[0])
		child.Close()
		return nil, nil, fmt.Errorf("handshake socket: %w", err)
	}
	host := os.NewFile(uintptr(fds[0]), "handshake")
	defer host.Close()
	conn, err := net.FileConn(host)
	if err != nil {
		child.Close()
		return nil, nil, fmt.Errorf("handshake socket: %w", err)
	}
	return &handshake{conn.(*net.UnixConn)}, child, nil
}

// next reads the next message, which must be want, and returns its
// sender's pid.
func (h *handshake) next(want byte) (int, error) {
	buf := make([]byte, 4096)
	oob := make([]byte, unix.CmsgSpace(unix.SizeofUcred))
	n, oobn, _, _, err := h.ReadMsgUnix(buf, oob)
	if err != nil && !errors.Is(err, io.EOF) {
		return 0, fmt.Errorf("the forked context's step %c: %w", want, err)
	}
	msg := string(buf[:n])
	if why, ok := strings.CutPrefix(msg, "error "); ok {
		return 0, fmt.Errorf("the forked context's step %c failed: %s", want, why)
	}
	if n == 0 {
		return 0, fmt.Errorf("the forked context ended before its step %c", want)
	}
	if msg != string(want) {
		return 0, fmt.Errorf("the forked context said %q, want %q", msg, string(want))
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) != 1 {
		return 0, fmt.Errorf("the forked context's step %c came without credentials", want)
	}
	cred, err := unix.ParseUnixCredentials(&msgs[0])
	if err != nil || cred.Pid <= 0 {
		return 0, fmt.Errorf("the forked context's step %c came without its pid", want)
	}
	return int(cred.Pid), nil
}

// readExitStatus waits for the status pipe's end: its namespace's init
// wrote the interpreter's wait status there before it exited, or was
// killed (nothing written).
func (f *forking) readExitStatus() {
	got, _ := io.ReadAll(f.status)
	f.status.Close()
	if ws, err := strconv.Atoi(strings.TrimSpace(string(got))); err == nil {
		st := syscall.WaitStatus(ws)
		f.exitStatus = &st
	}
}
