package subprocess

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/kernelhost/kernelhost/core"
	"github.com/kernelhost/kernelhost/transports/subprocess/internal/cgroup"
)

// Contexts by fork (issue 28; docs/RATIONALE.md, "Contexts by fork"): a
// python interpreter can be asked, on fd 3, to fork a child that becomes
// a new interpreter (drivers/forkserver.py). The child is cloned with
// CLONE_PARENT, so it is this process's child exactly as an interpreter
// started by exec is: forkProc gives it its own pipes (made here, sent with
// the request over the forking interpreter's control socket), its own
// process group, cgroup and limits, and from then on it is a proc like any
// other: the same pump, readers, interrupt, kill and reaping.
//
// The pipes travel as SCM_RIGHTS, not by the child opening
// /proc/<this pid>/fd/<n>: this process (the transport plugin) is not
// dumpable (pluginrpc, to keep the host's settings from its interpreters),
// which makes its /proc/<pid>/fd root's, open only to a process with
// CAP_SYS_PTRACE. Under an unprivileged host every fork failed that way.
// So every interpreter that can fork has a control socket (fd 5; launch
// gives one to an interpreter it starts, forkOf to the child it forks).

// forkAckWait bounds the wait for the forking interpreter's answer (the
// child's pid) when ctx has no sooner deadline.
const forkAckWait = 30 * time.Second

// forkRequest is the record on fd 3 that asks a python driver to fork.
type forkRequest struct {
	Fork forkSpec `json:"fork"`
}

type forkSpec struct {
	// Host is this process, which the child checks is its parent (the
	// host did not die meanwhile). Outside a sandbox only.
	Host int `json:"host,omitempty"`
	// Seq numbers the request: its descriptors on the control socket
	// come with it, and its answer names it (a request given up on is
	// skipped by number).
	Seq  uint64 `json:"seq,omitempty"`
	Mark string `json:"mark"` // the child's frame mark (frames.go)
	Cwd  string `json:"cwd,omitempty"`
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
func (p *proc) forkOf(ctx context.Context, src *proc, cwd string, child []*os.File, mark string) (err error) {
	ctl, ctlChild, err := openControl() // the child's, for its own forks
	if err != nil {
		return err
	}
	defer ctlChild.Close() // the child has its own once forked
	defer func() {
		if err != nil {
			ctl.Close()
		}
	}()
	spec := forkSpec{Host: os.Getpid(), Seq: forkSeq.Add(1), Mark: mark, Cwd: cwd, WarmUp: p.spec.warmUp}
	// In the order forkserver.py takes them: the pipes (childFiles), then
	// the control socket.
	pid, err := askFork(ctx, src, spec, append(slices.Clip(child), ctlChild))
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
	p.fork = &forking{ctl: ctl}
	p.idsMu.Lock()
	p.pid, p.pgid = pid, pid // the child made its own group before it serves
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

// askFork sends files, the child's descriptors, on src's control socket
// and the request on its fd 3, and reads the answer on the control socket:
// the child's pid. Bounded by ctx and forkAckWait; src's death ends it at
// once.
func askFork(ctx context.Context, src *proc, spec forkSpec, files []*os.File) (int, error) {
	if src.fork == nil {
		return 0, errors.New("the forking interpreter has no control socket")
	}
	deadline := forkDeadline(ctx)
	if err := sendFork(src, spec, files, deadline); err != nil {
		return 0, err
	}
	ctl := src.fork.ctl
	_ = ctl.SetReadDeadline(deadline)
	defer ctl.SetReadDeadline(time.Time{})
	type result struct {
		answer string
		err    error
	}
	done := make(chan result, 1)
	go func() {
		answer, err := readAnswer(ctl, spec.Seq)
		done <- result{answer, err}
	}()
	var got result
	select {
	case got = <-done:
	case <-src.rd.pumpDone:
		_ = ctl.SetReadDeadline(aLongTimeAgo)
		<-done // no reader of src's socket is left for the next request
		return 0, fmt.Errorf("%w: it died", errNoForkAnswer)
	case <-ctx.Done():
		_ = ctl.SetReadDeadline(aLongTimeAgo)
		<-done
		return 0, ctx.Err()
	}
	if got.err != nil {
		return 0, got.err
	}
	if why, ok := strings.CutPrefix(got.answer, "error "); ok {
		return 0, fmt.Errorf("%w: %s", errForkRefused, why)
	}
	pid, err := strconv.Atoi(got.answer)
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("the forking interpreter answered %q", got.answer)
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
