package subprocess

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kernelhost/kernelhost/core"
	"github.com/kernelhost/kernelhost/transports/subprocess/internal/cgroup"
	"github.com/kernelhost/kernelhost/transports/subprocess/internal/sandbox"
)

// Families (issue 43; docs/RATIONALE.md, "Contexts by fork"): a context
// forked from the sandboxed template and its live copies share one
// sandbox, the namespaces of its init B. A copy is a clone of a member's
// interpreter made with CLONE_PARENT, so it is B's child: B reaps every
// member, writes each one's wait status to that member's status pipe, and
// ends (and the namespaces with it) once the last member ended
// (drivers/forkserver.py, _family_init). The host's part is here:
//
//   - Each member has its own cgroup and limits; killing a member kills its
//     cgroup, not B. So at the family's first copy B leaves its first
//     member's cgroups for one of its own (apart), and the family's network
//     stack (pasta, attached to B's namespace) becomes the family's.
//   - The copy's descriptors travel over its source's control socket
//     (SCM_RIGHTS, fd 5 in the interpreter), which every member gets at its
//     start: a sandboxed interpreter cannot open the host's /proc/<pid>/fd.
//     The copy says "c" on a handshake socket (its pid comes with the
//     credentials), is moved into its cgroup, B is sent its status pipe, and
//     only then is it told to go on.

var _ core.FamilyKernel = (*Kernel)(nil)

// familySeq numbers families: a family's id is stable while it lives.
var familySeq atomic.Uint64

// family is the host's record of one shared sandbox.
type family struct {
	id   string
	init int           // B, in this process's PID namespace
	ctl  *net.UnixConn // the host's end of B's family socket

	mu      sync.Mutex
	members int
	apart   bool           // B is in a cgroup of its own: a member's end leaves it running
	cg      *cgroup.Set    // B's own cgroup, once apart
	stack   *sandbox.Stack // the family's network stack, once apart
	ended   bool
}

// openFamily makes B's family socket: the host keeps one end (in the
// returned family), the other goes to B.
func openFamily() (*family, *os.File, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("family socket: %w", err)
	}
	host := os.NewFile(uintptr(fds[0]), "family")
	defer host.Close()
	conn, err := net.FileConn(host)
	if err != nil {
		unix.Close(fds[1])
		return nil, nil, fmt.Errorf("family socket: %w", err)
	}
	f := &family{id: "f" + strconv.FormatUint(familySeq.Add(1), 10), ctl: conn.(*net.UnixConn), members: 1}
	return f, os.NewFile(uintptr(fds[1]), "family-child"), nil
}

// ID is the family's id, for GET /contexts.
func (f *family) ID() string {
	if f == nil {
		return ""
	}
	return f.id
}

// isApart says whether B lives apart from the members' cgroups: a
// member's kill then spares B.
func (f *family) isApart() bool {
	if f == nil {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.apart
}

// join counts a copy of src in before it is made: B moves apart at the
// first one. An error when the family cannot take a member (no cgroups to
// kill one member with, or it ended).
//
// src's cgroup lock is never taken under f.mu: a kill of src holds it while
// it waits for the cgroup to empty, and isApart (asked by every member's
// kill) must not wait on that.
func (f *family) join(src *proc) error {
	inCgroup := src.groups.In()
	f.mu.Lock()
	movedApart, err := f.count(src, inCgroup)
	f.mu.Unlock()
	if movedApart {
		// Best effort: what ends a member is its v2 cgroup. B left in src's
		// v1 groups only counts its few pages there, and keeps them from
		// being removed.
		src.groups.MoveOut(f.init)
	}
	return err
}

// count counts a member in, moving B apart first if it is not yet; it says
// whether it did. Called with mu held.
func (f *family) count(src *proc, inCgroup bool) (movedApart bool, err error) {
	if f.ended {
		return false, errors.New("the context's sandbox ended")
	}
	if !f.apart {
		if !inCgroup {
			return false, &core.Error{Kind: core.KindUnsupported, Msg: errNoFamilyCgroups}
		}
		if err := f.moveApart(src); err != nil {
			return false, err
		}
		movedApart = true
	}
	f.members++
	return movedApart, nil
}

// moveApart moves B out of src's cgroup into one of its own, and takes
// src's network stack as the family's. Called with mu held.
func (f *family) moveApart(src *proc) error {
	cg, err := cgroup.NewSet(nil, true)
	if err != nil {
		return err
	}
	if err := cg.Enter(f.init); err != nil {
		cg.Remove(0)
		return fmt.Errorf("move the context's sandbox init into its own cgroup: %w", err)
	}
	if !cg.In() {
		cg.Remove(0)
		return &core.Error{Kind: core.KindUnsupported, Msg: errNoFamilyCgroups}
	}
	src.net.mu.Lock()
	f.stack, src.net.stack = src.net.stack, nil
	src.net.mu.Unlock()
	f.cg, f.apart = cg, true
	return nil
}

// errNoFamilyCgroups is why a sandboxed context cannot be copied where
// interpreters get no cgroups of their own.
const errNoFamilyCgroups = "subprocess: a sandboxed context can be copied only where each interpreter gets a cgroup of its own " +
	"(a copy shares its source's sandbox, and a cgroup is how one member is ended without the others): " +
	"run the host with a writable cgroup v2 (root, or systemd's Delegate=yes), or with -sandbox=off"

// leave counts a member out (it ended, or its copy failed); the last one
// ends the family: B, if it did not exit by itself, its cgroup and the
// network stack.
func (f *family) leave() {
	if f == nil {
		return
	}
	f.mu.Lock()
	f.members--
	last := f.members == 0 && !f.ended
	if last {
		f.ended = true
	}
	cg, stack := f.cg, f.stack
	f.mu.Unlock()
	if !last {
		return
	}
	f.ctl.Close()
	stack.Stop()
	cg.Kill(killWait)
}

// tell sends B the status pipe of a new member, whose pid is pid in this
// process's namespace.
func (f *family) tell(pid int, status *os.File, deadline time.Time) error {
	inner := sandbox.NsPid(pid)
	if inner <= 0 {
		return fmt.Errorf("the copy (pid %d) has no pid in its namespace", pid)
	}
	_ = f.ctl.SetWriteDeadline(deadline)
	defer f.ctl.SetWriteDeadline(time.Time{})
	if _, _, err := f.ctl.WriteMsgUnix([]byte(strconv.Itoa(inner)), unix.UnixRights(int(status.Fd())), nil); err != nil {
		return fmt.Errorf("tell the sandbox's init of the copy: %w", err)
	}
	return nil
}

// copyFiles are the host's and the forked context's ends of what it is
// made with besides its pipes: its handshake and control socket go to it
// (after its pipes, in toChild); its status pipe's write end to its
// sandbox's init.
type copyFiles struct {
	toChild []*os.File
	statusW *os.File
	hs      *handshake
	status  *os.File // the read end, p.fork.status
}

// sent closes the host's copies of what went to the child (and to B): the
// child's end then is the only one, whose close the host sees.
func (c *copyFiles) sent() {
	for _, f := range c.toChild {
		f.Close()
	}
	c.toChild = nil
	if c.statusW != nil {
		c.statusW.Close()
		c.statusW = nil
	}
}

// close closes the host's ends once the fork is over; with failed (the
// fork's error, nil when it worked) the status pipe's read end too.
func (c *copyFiles) close(failed error) {
	c.sent()
	if c.hs != nil {
		c.hs.Close()
	}
	if failed != nil && c.status != nil {
		c.status.Close()
	}
}

// openForkFiles makes the status pipe, handshake and control socket of a
// context forked in a sandbox, whose pipes' child ends are child; p keeps
// its ends (p.fork). On error the caller still closes what it returns.
func (p *proc) openForkFiles(child []*os.File) (*copyFiles, error) {
	c := &copyFiles{toChild: slices.Clone(child)}
	statusR, statusW, err := pipe()
	if err != nil {
		return c, err
	}
	c.statusW = os.NewFile(uintptr(statusW), "member-status")
	if c.status, err = pollable(statusR, "status"); err != nil {
		return c, err
	}
	hs, hsChild, err := newHandshake()
	if err != nil {
		return c, err
	}
	c.hs = hs
	c.toChild = append(c.toChild, hsChild)
	ctl, ctlChild, err := openControl()
	if err != nil {
		return c, err
	}
	p.fork = &forking{ctl: ctl, status: c.status}
	c.toChild = append(c.toChild, ctlChild)
	return c, nil
}

// forkInFamily makes a new interpreter for spec, whose messages go to out,
// as a copy of src's in src's sandbox (a member of its family). The
// caller makes sure src runs no request and nothing else is written to
// its fd 3 meanwhile.
func forkInFamily(ctx context.Context, src *proc, spec procSpec, out chan<- core.Message) (*proc, error) {
	f := src.familyOf()
	deadline := forkDeadline(ctx)
	if err := f.join(src); err != nil {
		return nil, err
	}
	joined := false // the copy is a member: its end leaves the family (proc.wait)
	p, err := newInterpreter(ctx, spec, out, "fork", func(p *proc, child []*os.File, mark string) error {
		if err := p.copyOf(src, f, child, mark, deadline); err != nil {
			return fmt.Errorf("fork %s kernel: %w", spec.lang.name, err)
		}
		joined = true
		return nil
	})
	if !joined {
		f.leave()
	}
	return p, err
}

// copyOf asks src's interpreter for a copy on the child's ends of p's
// pipes, in family f, and follows its handshake: the begin of
// forkInFamily.
func (p *proc) copyOf(src *proc, f *family, child []*os.File, mark string, deadline time.Time) (err error) {
	files, err := p.openForkFiles(child)
	defer func() { files.close(err) }()
	if err != nil {
		return err
	}
	seq := forkSeq.Add(1)
	if err := askFamilyFork(src, forkSpec{Seq: seq, Mark: mark, Family: true}, files.toChild, deadline); err != nil {
		return err
	}
	for _, c := range files.toChild {
		c.Close() // the copy has its own now
	}
	files.toChild = nil
	pid, err := p.admit(f, files, deadline)
	files.sent() // B has the status pipe's write end now, or the copy ended
	if err != nil {
		return err
	}
	p.cmd = &exec.Cmd{Path: src.cmd.Path, Args: src.cmd.Args}
	p.idsMu.Lock()
	p.pid, p.pgid, p.nsInit = pid, pid, f.init // the copy leads a session of its own
	p.idsMu.Unlock()
	p.fork.family = f
	return nil
}

// admit follows the copy's handshake: it says "c" (its pid), is moved
// into its cgroup and limits, B is given its status pipe, and it is told
// to go on. On failure the copy is ended (it is in its own cgroup, or
// still in its source's, where it exits once the handshake closes).
func (p *proc) admit(f *family, files *copyFiles, deadline time.Time) (int, error) {
	_ = files.hs.SetDeadline(deadline)
	pid, err := files.hs.next('c')
	if err == nil {
		err = p.enterGroups(pid)
	}
	if err == nil {
		err = f.tell(pid, files.statusW, deadline)
	}
	if err == nil {
		_, err = files.hs.Write([]byte("go"))
	}
	if err != nil {
		p.removeCgroup()
		return 0, err
	}
	return pid, nil
}

// askFamilyFork sends the copy's descriptors on src's control socket, then
// the request on its fd 3, and reads the answer on the control socket.
func askFamilyFork(src *proc, spec forkSpec, files []*os.File, deadline time.Time) error {
	if src.fork == nil {
		return errors.New("the context has no control socket")
	}
	if err := sendFork(src, spec, files, deadline); err != nil {
		return err
	}
	_ = src.fork.ctl.SetReadDeadline(deadline)
	defer src.fork.ctl.SetReadDeadline(time.Time{})
	answer, err := readAnswer(src.fork.ctl, spec.Seq)
	if err != nil {
		return err
	}
	return parseForkAnswer(answer)
}

// sendFork sends files, a fork's descriptors, on src's control socket
// with the request's number, then the request on its fd 3: the driver
// takes the descriptors of the request it reads (forkserver.py's
// _fork_descriptors).
func sendFork(src *proc, spec forkSpec, files []*os.File, deadline time.Time) error {
	fds := make([]int, len(files))
	for i, f := range files {
		fds[i] = int(f.Fd())
	}
	ctl := src.fork.ctl
	_ = ctl.SetWriteDeadline(deadline)
	_, _, err := ctl.WriteMsgUnix([]byte(strconv.FormatUint(spec.Seq, 10)), unix.UnixRights(fds...), nil)
	_ = ctl.SetWriteDeadline(time.Time{})
	if err != nil {
		return fmt.Errorf("send the fork's descriptors: %w", err)
	}
	line, err := json.Marshal(forkRequest{Fork: spec})
	if err != nil {
		return err
	}
	_ = src.reqW.SetWriteDeadline(deadline)
	_, err = src.reqW.Write(append(line, '\n'))
	_ = src.reqW.SetWriteDeadline(time.Time{})
	if err != nil {
		return fmt.Errorf("send the fork request: %w", err)
	}
	return nil
}

// errNoForkAnswer marks a forking interpreter that did not answer (it
// died, or is stuck).
var errNoForkAnswer = errors.New("the forking interpreter did not answer")

// readAnswer reads the answer to request seq from conn, what follows
// "<seq> ", skipping the answers to requests given up on (conn's read
// deadline bounds it).
func readAnswer(conn *net.UnixConn, seq uint64) (string, error) {
	buf := make([]byte, 4096)
	for {
		n, _, _, _, err := conn.ReadMsgUnix(buf, nil)
		if err != nil || n == 0 {
			if err == nil {
				err = io.EOF
			}
			return "", fmt.Errorf("%w: %v", errNoForkAnswer, err)
		}
		id, answer, _ := strings.Cut(string(buf[:n]), " ")
		if id == strconv.FormatUint(seq, 10) {
			return answer, nil
		}
	}
}

// Family implements core.FamilyKernel: the id of the family the kernel's
// interpreter belongs to (the contexts that share its sandbox: itself and
// its live copies); "" when it has none (not sandboxed, or started by
// bwrap). It reads the current interpreter without mu, which a restart
// holds for seconds.
func (k *Kernel) Family() string {
	if p := k.live.Load(); p != nil {
		return p.familyOf().ID()
	}
	return ""
}

// FamilyStat is one family of contexts that share a sandbox (one that had
// a copy: a context alone in its sandbox is a context), for metrics.
type FamilyStat struct {
	Language, Family string
	Members          int
	// Memory sums the members' interpreters and the family's init (PSS:
	// what they take together; they share their source's pages).
	Memory
	// MemoryLimit is what the family may take in all, 0: no limit. Each
	// member has the per-context limit (-context-memory) of its own, so
	// the family's is that times its members.
	MemoryLimit int64
}

// FamilyStats reports the live families that had a copy, sorted by id.
func (t *Transport) FamilyStats() []FamilyStat {
	by := map[*family]*FamilyStat{}
	t.live.Range(func(key, _ any) bool {
		k := key.(*Kernel)
		p := k.live.Load()
		if p == nil || p.isGone() || !p.familyOf().isApart() {
			return true
		}
		fam := p.familyOf()
		st := by[fam]
		if st == nil {
			st = &FamilyStat{Language: k.lang.name, Family: fam.id}
			st.add(ProcessMemory(fam.init))
			by[fam] = st
		}
		pid, _, _ := p.ids()
		st.Members++
		st.add(ProcessMemory(pid))
		return true
	})
	out := make([]FamilyStat, 0, len(by))
	for _, st := range by {
		if t.limits != nil {
			st.MemoryLimit = t.limits.Limits().MemoryBytes * int64(st.Members)
		}
		out = append(out, *st)
	}
	slices.SortFunc(out, func(a, b FamilyStat) int { return strings.Compare(a.Family, b.Family) })
	return out
}

// ContextLimits are the limits each context's interpreter has (each
// member of a family too), for metrics.
func (t *Transport) ContextLimits() Limits {
	return t.limits.Limits()
}
