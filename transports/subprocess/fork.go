package subprocess

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kernelhost/kernelhost/core"
	"github.com/kernelhost/kernelhost/transports/subprocess/internal/cgroup"
)

// Contexts by fork (issue 28; docs/RATIONALE.md, "Contexts by fork"): a
// python interpreter can be asked, on fd 3, to fork a child that becomes
// a new interpreter (drivers/forkserver.py). The child is cloned with
// CLONE_PARENT, so it is this process's child exactly as an interpreter
// started by exec is: forkProc gives it its own pipes (made here, opened by
// the child through /proc/<this pid>/fd), its own process group, cgroup and
// limits, and from then on it is a proc like any other: the same pump,
// readers, interrupt, kill and reaping.

// forkAckWait bounds the wait for the forking interpreter's answer (the
// child's pid) when ctx has no sooner deadline.
const forkAckWait = 30 * time.Second

// forkRequest is the record on fd 3 that asks a python driver to fork.
type forkRequest struct {
	Fork forkSpec `json:"fork"`
}

type forkSpec struct {
	Host int   `json:"host"` // this process: the child opens /proc/<host>/fd/<n>
	Fds  []int `json:"fds"`  // the child's ends, in childFiles order (3, 4, 1, 2)
	Ack  int   `json:"ack"`  // where the forking driver writes the child's pid, or "error <why>"
	// Inodes are those of Fds' pipes, then Ack's: a descriptor number the
	// host closed meanwhile (it gave up) may name another file by then,
	// which the driver must not open as its pipe.
	Inodes []uint64 `json:"inodes"`
	Mark   string   `json:"mark"` // the child's frame mark (frames.go)
	Cwd    string   `json:"cwd,omitempty"`
	// Seq numbers a request to a sandboxed template (forksandbox.go) or
	// context (family.go), whose answer names it.
	Seq uint64 `json:"seq,omitempty"`
	// Family asks a sandboxed context for a copy in its sandbox, whose
	// descriptors come on its control socket (family.go).
	Family bool `json:"family,omitempty"`
	// WarmUp: procSpec.warmUp.
	WarmUp bool `json:"warm_up,omitempty"`
}

// errNoFamily is why a sandboxed context that bwrap started (from the
// warm pool or cold, when the fork template was not ready) cannot be
// copied (docs/RATIONALE.md, "Contexts by fork").
const errNoFamily = "subprocess: this context cannot be copied: bwrap started it (the fork template was not ready, or the context's directory is one the template cannot serve), " +
	"and a copy shares its source's sandbox, whose init, bwrap's, ends with its interpreter; " +
	"restart the context once the fork template is ready (kernelhost_fork_template_failing is 0) to copy it, or run the host with -sandbox=off"

// errForkRefused wraps what the forking driver answered instead of a pid.
var errForkRefused = errors.New("fork refused")

// forkProc makes a new interpreter for spec, whose messages go to out, as a fork of
// src's interpreter, moved into cwd ("": it stays in src's). The caller
// makes sure nothing else is written to src's fd 3 meanwhile and that src
// runs no request.
func forkProc(ctx context.Context, src *proc, spec procSpec, cwd string, out chan<- core.Message) (*proc, error) {
	return newInterpreter(ctx, spec, out, "fork", func(p *proc, child []*os.File, mark string) error {
		if err := p.forkOf(ctx, src, cwd, child, mark); err != nil {
			return fmt.Errorf("fork %s kernel: %w", spec.lang.name, err)
		}
		return nil
	})
}

// forkOf asks src's interpreter to fork a child on the child's ends of p's
// pipes, and moves the child into p's groups: the begin of forkProc.
func (p *proc) forkOf(ctx context.Context, src *proc, cwd string, child []*os.File, mark string) error {
	ackR, ackW, err := os.Pipe()
	if err != nil {
		return err
	}
	defer ackR.Close()
	defer ackW.Close()
	req := forkRequest{Fork: forkSpec{Host: os.Getpid(), Ack: int(ackW.Fd()), Mark: mark, Cwd: cwd, WarmUp: p.spec.warmUp}}
	for _, f := range append(child, ackW) {
		var st unix.Stat_t
		if err := unix.Fstat(int(f.Fd()), &st); err != nil {
			return err
		}
		if f != ackW {
			req.Fork.Fds = append(req.Fork.Fds, int(f.Fd()))
		}
		req.Fork.Inodes = append(req.Fork.Inodes, st.Ino)
	}
	pid, err := askFork(ctx, src, req, ackR)
	if err != nil {
		return err
	}
	process, err := os.FindProcess(pid)
	if err != nil {
		return err
	}
	if err := p.enterGroups(pid); err != nil {
		_ = process.Kill()
		_, _ = process.Wait()
		p.removeCgroup()
		return err
	}
	p.cmd = &exec.Cmd{Path: src.cmd.Path, Args: src.cmd.Args, Process: process}
	p.idsMu.Lock()
	p.pid, p.pgid = pid, pid // the child made its own group before it opened its pipes
	p.idsMu.Unlock()
	return nil
}

// forkable says which languages' contexts can be forked (their driver is
// a forker), for errors: "only python contexts can".
func (t *Transport) forkable() string {
	var names []string
	for name, lang := range t.langs {
		if _, ok := lang.drv.(forker); ok {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return "no context of this host can"
	}
	slices.Sort(names)
	return "only " + strings.Join(names, " or ") + " contexts can"
}

// askFork writes req on src's fd 3 and reads the answer: the child's pid.
func askFork(ctx context.Context, src *proc, req forkRequest, ack *os.File) (int, error) {
	line, err := json.Marshal(req)
	if err != nil {
		return 0, err
	}
	deadline := time.Now().Add(forkAckWait)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = src.reqW.SetWriteDeadline(deadline)
	_, err = src.reqW.Write(append(line, '\n'))
	_ = src.reqW.SetWriteDeadline(time.Time{})
	if err != nil {
		return 0, fmt.Errorf("send the fork request: %w", err)
	}
	// The driver writes its answer with one write and closes its end; ours
	// stays open (the child could not open it otherwise), so the answer is
	// what one read returns. A driver that died never answers: the deadline
	// or src's end says so.
	_ = ack.SetReadDeadline(deadline)
	answer := make(chan string, 1)
	go func() {
		buf := make([]byte, 4096)
		n, _ := ack.Read(buf)
		answer <- string(buf[:n])
	}()
	var got string
	select {
	case got = <-answer:
	case <-src.rd.pumpDone:
		_ = ack.SetReadDeadline(aLongTimeAgo)
		return 0, errors.New("the forking interpreter died")
	case <-ctx.Done():
		_ = ack.SetReadDeadline(aLongTimeAgo)
		return 0, ctx.Err()
	}
	if why, ok := strings.CutPrefix(got, "error "); ok {
		return 0, fmt.Errorf("%w: %s", errForkRefused, why)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(got))
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("the forking interpreter answered %q", got)
	}
	return pid, nil
}

// enterGroups moves the forked child into a cgroup of its own and its
// limits' groups (cgroup.Set.Enter), as launch starts an interpreter in
// them. On error the caller ends the child and removes them
// (removeCgroup).
func (p *proc) enterGroups(pid int) (err error) {
	if p.groups, err = cgroup.NewSet(p.spec.limits, p.spec.cgroups); err != nil {
		return err
	}
	return p.groups.Enter(pid)
}

// ForkKernel starts a new kernel holding a copy of src's interpreter state
// (variables, imports, functions, cwd, IPython history; not a running
// request, which src must not have; not what src's cells made of the
// process environment: the copy starts with its context's start
// environment, drivers/forkserver.py's _reset_env): src's python
// interpreter forks (fork.go). src runs on untouched. Only python kernels can be forked; in
// a sandbox only those forked from the fork template, whose copy joins
// their sandbox's family (family.go).
func (t *Transport) ForkKernel(ctx context.Context, src core.Kernel) (core.Kernel, error) {
	k, ok := src.(*Kernel)
	if !ok {
		return nil, &core.Error{Kind: core.KindInvalid, Msg: "subprocess: not a kernel of this transport"}
	}
	if _, ok := k.lang.drv.(forker); !ok {
		return nil, &core.Error{Kind: core.KindUnsupported, Msg: fmt.Sprintf("subprocess: a %s context cannot be forked: %s", k.lang.name, t.forkable())}
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed {
		return nil, ErrShutdown
	}
	if k.p == nil || k.p.isGone() {
		return nil, fmt.Errorf("subprocess: %s kernel is dead; restart it", k.lang.name)
	}
	if id := k.p.req.current(); id != "" {
		return nil, &core.Error{Kind: core.KindQueueFull, Msg: fmt.Sprintf("subprocess: the context runs request %s; fork it once it is idle", id)}
	}
	nk := &Kernel{
		procSpec: k.procSpec,
		pool:     k.pool,
		forks:    k.forks,
		msgs:     make(chan core.Message, 1024),
		quit:     make(chan struct{}),
	}
	var p *proc
	var err error
	switch {
	case t.sandbox == nil:
		p, err = forkProc(ctx, k.p, k.procSpec, "", nk.msgs)
	case k.p.familyOf() == nil:
		return nil, &core.Error{Kind: core.KindUnsupported, Msg: errNoFamily}
	default:
		p, err = forkInFamily(ctx, k.p, k.procSpec, nk.msgs)
	}
	if errors.Is(err, errForkRefused) {
		return nil, &core.Error{Kind: core.KindInvalid, Msg: "subprocess: " + err.Error(), Err: err}
	}
	if err != nil {
		return nil, err
	}
	nk.setProc(p)
	t.track(nk)
	return nk, nil
}
