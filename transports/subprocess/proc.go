package subprocess

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/kernelhost/kernelhost/core"
)

const (
	// killWait bounds the wait for a SIGKILLed process group to be reaped.
	killWait = 5 * time.Second
	// exitWait bounds the wait for a driver that closed fd 4 to exit.
	exitWait = 2 * time.Second
	// sandboxExitWait bounds the wait for bwrap to exit by itself after its
	// interpreter's pipes closed, before what is left is killed.
	sandboxExitWait = 500 * time.Millisecond
	// drainLimit bounds one drain of fd 1 or 2, so a process that writes
	// without pause cannot starve fd 4. It is above the largest pipe buffer,
	// so whatever was in the pipe when fd 4 was read is always taken.
	drainLimit = 2 << 20
	// stderrKeep is how much early stderr a failed start quotes.
	stderrKeep = 4 << 10
)

// proc is one interpreter process and the goroutines that own it: the
// waiter (cmd.Wait), the pump (reads fd 4) and one stream reader each for
// fd 1 and 2.
//
// All three read ends are non-blocking pipes registered with Go's netpoller
// (os.NewFile of a non-blocking fd), so a reader waiting for the interpreter
// parks its goroutine instead of holding an OS thread in a poll syscall. That
// matters for latency: when the pump wakes and hands a message to the
// engine's goroutine, that goroutine runs on the same thread as soon as the
// pump parks again, instead of waiting for another thread to be woken to
// steal it (measured: see docs/benchmarks.md, "Subprocess transport").
type proc struct {
	spec procSpec
	// owner is the kernel that receives the messages: nil while the
	// interpreter waits in a pool, where nothing it says is delivered.
	owner atomic.Pointer[Kernel]
	cmd   *exec.Cmd
	// idsMu guards pid, pgid and nsInit: in a sandbox they are set once the
	// driver is ready, while the readers (and driverGone) already run. Read
	// them through ids().
	idsMu sync.Mutex
	pid   int
	reqW  *os.File    // fd 3 in the child
	cut   atomic.Bool // writes to reqW are cut: it is about to be killed (Kernel.cutWrites)
	// In a sandbox (sandbox.go), pid is the interpreter's, not bwrap's,
	// pgid the group of the sandbox's init, nsInit, whose end ends every
	// process in the sandbox. Without one, pgid is pid and nsInit 0.
	pgid, nsInit int

	msgF  *os.File // read end of fd 4
	msgFD int      // its descriptor, for the non-blocking reads after exit
	// streams are fd 1 (stdout) and 2 (stderr). Their fields other than f
	// and fd are guarded by mu.
	streams [2]stream

	cgMu     sync.Mutex
	cg       *cgroup       // the interpreter's own cgroup until removed; guarded by cgMu
	inCgroup bool          // it was started in cg; false where the machine offers none (killTree then)
	lim      *limitGroups  // its limits (limits.go), nil: none; guarded by cgMu
	stop     chan struct{} // closed when the kernel kills this process on purpose
	stopOnce sync.Once
	exited   atomic.Bool   // cmd.Wait returned; set before msgF's deadline wakes the pump
	waitDone chan struct{} // closed after cmd.Wait returned
	pumpDone chan struct{} // closed when the pump and the stream readers returned
	readers  sync.WaitGroup
	ready    chan error  // the start's outcome, one value
	isReady  atomic.Bool // the driver said kh_ready
	gone     atomic.Bool // the driver is gone (exited or killed)
	// cwdAck carries the driver's answer to a hand-out's cwd record
	// (enterCwd): "" when it entered the directory, else why not.
	cwdAck chan string
	// adoptMu orders a pooled interpreter's hand-out (adopt) against its
	// death (driverGone): it is handed out alive, and then its owner hears
	// of its death, or it is not handed out at all.
	adoptMu sync.Mutex

	// mu serialises each read of fd 1/2 together with the emission of what
	// it read, against the pump's handling of what it read from fd 4. The
	// pump drains fd 1/2 under mu after each read of fd 4: output a stream
	// reader took before that is already emitted (it held mu from its read
	// to its emit), and the rest is still in the pipe for the drain. So no
	// output the driver wrote before its reply is emitted after it.
	mu        sync.Mutex
	closing   bool           // the pump did its final drain: the stream readers stop
	startErr  bytes.Buffer   // stderr before ready, quoted when the start fails
	opened    string         // the request whose busy was delivered
	held      []core.Message // fd-1/2 output of a request that has not opened yet
	heldBytes int            // the text of held
	drainBuf  []byte         // the pump's buffer for drains
	// frameReader, for python, reads the driver's messages out of fd 1
	// (frames.go); nil for the drivers that write them to fd 4.
	frameReader *frameReader

	// The flush ticks (startTicks), for a driver that reads them.
	tickMu    sync.Mutex
	tickFD    int         // non-blocking write end of the tick pipe (fd 5 in the child); -1: none, or closed
	tickTimer *time.Timer // the one timer of this process, made by the first request
	tickFor   string      // the request the ticks are for; "": none
}

// stream is the read end of fd 1 or 2.
type stream struct {
	name    string
	f       *os.File
	fd      int
	partial []byte // an incomplete UTF-8 sequence left over from the last read
	eof     bool
	framed  bool // fd 1 of a driver that writes its messages into it (frames.go)
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
	lang     language
	langName string
	cwd      string
	env      []string
	cgroups  bool     // a cgroup per interpreter where the machine offers one
	sandbox  *sandbox // nil: none
	// maxMessage caps one message line and one batch's output (msgLines).
	maxMessage int
	limits     *limiter // nil: no limits (limits.go)
}

// startProc starts an interpreter for spec and waits (bounded by ctx) until
// its driver reported ready. owner receives its messages; nil for a pooled
// interpreter, which is given one when it is handed out (adopt).
func startProc(ctx context.Context, spec procSpec, owner *Kernel) (_ *proc, err error) {
	p := newProc(spec, owner)
	childEnds, err := p.openPipes()
	defer func() {
		for _, f := range childEnds {
			f.Close() // the parent's copies: the child has its own
		}
		if err != nil && p.cmd == nil {
			p.closeFiles()
		}
	}()
	if err != nil {
		return nil, fmt.Errorf("start %s kernel: %w", spec.langName, err)
	}
	if err := p.launch(childEnds); err != nil {
		return nil, err
	}
	go p.wait()
	p.readers.Add(2)
	go p.readStream(&p.streams[0])
	go p.readStream(&p.streams[1])
	go p.pump()
	if err := p.awaitReady(ctx); err != nil {
		return nil, err
	}
	if err := p.findSandboxed(); err != nil {
		p.kill()
		return nil, err
	}
	return p, nil
}

// newProc is the state of an interpreter not started yet (startProc, and
// forkProc in fork.go).
func newProc(spec procSpec, owner *Kernel) *proc {
	p := &proc{
		spec:     spec,
		stop:     make(chan struct{}),
		waitDone: make(chan struct{}),
		pumpDone: make(chan struct{}),
		ready:    make(chan error, 1),
		cwdAck:   make(chan string, 1),
		drainBuf: make([]byte, 64<<10),
		tickFD:   -1,
	}
	p.owner.Store(owner)
	p.streams[0].name, p.streams[1].name = "stdout", "stderr"
	p.streams[0].framed = spec.lang.framed
	return p
}

// childFiles are the child's ends of its pipes, in descriptor order.
type childFiles struct {
	requests, messages, stdout, stderr *os.File // fd 3, 4, 1, 2
	ticks                              *os.File // fd 5, for a driver that reads flush ticks
}

func (c *childFiles) all() []*os.File {
	return []*os.File{c.requests, c.messages, c.stdout, c.stderr, c.ticks}
}

// openPipes makes the pipes of an interpreter (four, five with ticks): it
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
	}{{&p.msgF, &p.msgFD, &c.messages, "fd4"}, {&p.streams[0].f, &p.streams[0].fd, &c.stdout, "stdout"}, {&p.streams[1].f, &p.streams[1].fd, &c.stderr, "stderr"}} {
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
	if p.spec.lang.ticks {
		if c.ticks, err = p.openTickPipe(); err != nil {
			return nil, err
		}
	}
	return nil, nil
}

// openTickPipe makes the tick pipe: the child's read end blocks (its
// flusher thread waits in read), the parent's write end never does.
func (p *proc) openTickPipe() (child *os.File, err error) {
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_CLOEXEC); err != nil {
		return nil, err
	}
	if err := unix.SetNonblock(fds[1], true); err != nil {
		unix.Close(fds[0])
		unix.Close(fds[1])
		return nil, err
	}
	p.tickFD = fds[1]
	return os.NewFile(uintptr(fds[0]), "child-ticks"), nil
}

// launch starts the interpreter on the child's ends of the pipes (as
// openPipes returned them), in a cgroup of its own where there is one.
func (p *proc) launch(child []*os.File) (err error) {
	s := p.spec
	cmd := exec.Command(s.lang.path, s.lang.args...)
	cmd.Dir = s.cwd
	cmd.Env = slices.Clip(s.env)
	if pwd := pwdOf(s.cwd); pwd != "" {
		cmd.Env = append(cmd.Env, "PWD="+pwd)
	}
	cmd.ExtraFiles = []*os.File{child[0], child[1]} // fd 3, fd 4
	cmd.Stdout, cmd.Stderr = child[2], child[3]
	if len(child) > 4 { // the tick pipe: fd 5, named to the driver
		cmd.ExtraFiles = append(cmd.ExtraFiles, child[4])
		cmd.Env = append(cmd.Env, tickFDEnv+"=5")
	}
	if s.lang.framed {
		fr, env, err := newFrameReader()
		if err != nil {
			return fmt.Errorf("start %s kernel: %w", s.langName, err)
		}
		p.frameReader = fr
		cmd.Env = append(cmd.Env, env)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if s.sandbox != nil {
		s.sandbox.wrap(cmd, s.cwd)
	}
	if s.cgroups {
		if p.cg, err = newCgroup(); err != nil {
			return fmt.Errorf("start %s kernel: %w", s.langName, err)
		}
		if p.cg != nil {
			cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, p.cg.fd
		}
	}
	if s.limits != nil {
		p.lim, err = s.limits.newGroups(p.cg)
	}
	if err == nil {
		err = p.lim.start(cmd)
	}
	if err != nil {
		p.lim.remove(0) // nothing started in them
	}
	if p.cg != nil {
		p.inCgroup = err == nil
		p.cg.started()
		if err != nil {
			_ = p.cg.kill(killWait)
		}
	}
	if err != nil {
		return fmt.Errorf("start %s kernel in %q: %w", s.langName, s.cwd, err)
	}
	p.cmd = cmd
	p.idsMu.Lock()
	p.pid = cmd.Process.Pid
	p.pgid = p.pid
	p.idsMu.Unlock()
	return nil
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
	case err = <-p.ready:
	case <-ctx.Done():
		err = ctx.Err()
	}
	if err != nil {
		p.kill()
		return fmt.Errorf("start %s kernel in %q: %w", p.spec.langName, p.spec.cwd, err)
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
	_ = p.cmd.Wait()
	// Wake the pump: a driver whose fd 4 is still held open elsewhere (a
	// child of bash) has exited all the same.
	p.exited.Store(true)
	_ = p.msgF.SetReadDeadline(aLongTimeAgo)
	close(p.waitDone)
}

// currentID is the owner's running request; "" when none or while pooled.
func (p *proc) currentID() string {
	if k := p.owner.Load(); k != nil {
		return k.currentID()
	}
	return ""
}

// clearCurrent forgets id if it is the owner's running request.
func (p *proc) clearCurrent(id string) {
	if k := p.owner.Load(); k != nil {
		k.clearCurrent(id)
	}
}

// forgetCurrent forgets the owner's running request, whichever it is.
func (p *proc) forgetCurrent() {
	if k := p.owner.Load(); k != nil {
		k.setCurrent("")
	}
}

func (p *proc) isGone() bool { return p.gone.Load() }

// adopt hands a pooled interpreter to k, whose Messages then carry what it
// says; false when it died while it waited.
func (p *proc) adopt(k *Kernel) bool {
	p.adoptMu.Lock()
	defer p.adoptMu.Unlock()
	if p.gone.Load() {
		return false
	}
	p.owner.Store(k)
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
	if _, err := p.reqW.Write(p.spec.lang.enterCwd(dir)); err != nil {
		return fmt.Errorf("send the cwd record: %w", err)
	}
	_ = p.reqW.SetWriteDeadline(time.Time{})
	select {
	case why := <-p.cwdAck:
		if why != "" {
			return fmt.Errorf("enter %q: %s", dir, why)
		}
		return nil
	case <-p.pumpDone:
		return errors.New("the interpreter died")
	case <-ctx.Done():
		return ctx.Err()
	}
}

// kill SIGKILLs the interpreter and every descendant (killAll) and waits
// (bounded) until the process is reaped and the pump has returned. Safe to
// call more than once.
func (p *proc) kill() {
	p.stopOnce.Do(func() {
		close(p.stop)
		p.gone.Store(true)
		p.killAll()
		_ = p.msgF.SetReadDeadline(aLongTimeAgo)
	})
	select {
	case <-p.waitDone:
	case <-time.After(killWait):
	}
	p.removeCgroup()
	<-p.pumpDone
	p.closeFiles()
}

// killAll SIGKILLs the interpreter and all its descendants, those in
// sessions of their own included: its cgroup's, or its process tree's.
// It may run twice at once (a kill while the driver's exit is handled:
// driverGone), hence cgMu.
func (p *proc) killAll() {
	p.cgMu.Lock()
	defer p.cgMu.Unlock()
	if p.spec.sandbox != nil {
		p.killSandbox()
	}
	if p.inCgroup {
		pid, _, _ := p.ids()
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		if p.cg != nil && p.cg.kill(0) == nil {
			p.cg = nil // empty already, and removed
		}
		return
	}
	if p.spec.sandbox == nil {
		pid, _, _ := p.ids()
		killTree(pid)
	}
}

// removeCgroup waits (bounded) for the killed cgroup to empty and removes it.
func (p *proc) removeCgroup() {
	p.cgMu.Lock()
	defer p.cgMu.Unlock()
	if p.cg != nil && p.cg.kill(killWait) == nil {
		p.cg = nil
	}
	p.lim.remove(killWait)
}

// Flush ticks. A driver that coalesces output (python) sends what it
// buffered on a timer while a cell runs; waking that timer at the start of
// every cell costs a short cell (1+1) 15-20 µs. So the host keeps the time
// instead: while a request runs tickEvery after it was sent, it writes a
// byte to the tick pipe every tickEvery until the request's idle arrives,
// and the driver's flusher thread, blocked reading the pipe, flushes on
// each. A cell shorter than tickEvery costs nothing. The write never
// blocks: a full pipe (a driver that does not read) drops the tick.
const tickEvery = 2 * time.Millisecond

// tickFDEnv names the variable that tells the driver its tick fd; the
// driver unsets it first thing.
const tickFDEnv = "KH_TICK_FD"

var tickByte = []byte{0}

// startTicks has ticks sent for request id (sent just now) until its idle
// (stopTicks); a no-op for a driver without the tick pipe.
func (p *proc) startTicks(id string) {
	p.tickMu.Lock()
	defer p.tickMu.Unlock()
	if p.tickFD < 0 {
		return
	}
	p.tickFor = id
	if p.tickTimer == nil {
		p.tickTimer = time.AfterFunc(tickEvery, p.tick)
	} else {
		p.tickTimer.Reset(tickEvery)
	}
}

func (p *proc) tick() {
	p.tickMu.Lock()
	defer p.tickMu.Unlock()
	if p.tickFor == "" || p.tickFD < 0 {
		return
	}
	_, _ = unix.Write(p.tickFD, tickByte) // EAGAIN: the pipe holds ticks enough
	p.tickTimer.Reset(tickEvery)
}

// stopTicks stops the ticks of request id; of any request when id is "".
func (p *proc) stopTicks(id string) {
	p.tickMu.Lock()
	defer p.tickMu.Unlock()
	if id != "" && id != p.tickFor {
		return
	}
	p.tickFor = ""
	if p.tickTimer != nil {
		p.tickTimer.Stop()
	}
}

// closeTicks stops the ticks for good and closes the tick pipe, under
// tickMu so that no tick writes to a descriptor number reused meanwhile.
func (p *proc) closeTicks() {
	p.stopTicks("")
	p.tickMu.Lock()
	defer p.tickMu.Unlock()
	if p.tickFD >= 0 {
		unix.Close(p.tickFD)
		p.tickFD = -1
	}
}

// closeFiles closes the parent's ends; the pump and the readers are done
// with them (or never ran).
func (p *proc) closeFiles() {
	p.closeTicks()
	for _, f := range []*os.File{p.reqW, p.msgF, p.streams[0].f, p.streams[1].f} {
		if f != nil {
			f.Close()
		}
	}
}

// emit hands m to the kernel's Messages; false when the kernel stopped this process.
func (p *proc) emit(m core.Message) bool {
	k := p.owner.Load()
	if k == nil {
		return true // pooled: nobody listens yet
	}
	select {
	case k.msgs <- m:
		return true
	case <-p.stop:
		return false
	}
}

// readStream forwards fd 1 or 2 as it comes, also while fd 4 is quiet (a
// long-running cell that prints). It waits through the netpoller: RawRead
// calls the function when the pipe may be readable and, when it returns
// false, parks until the pipe is readable again.
func (p *proc) readStream(s *stream) {
	defer p.readers.Done()
	rc, err := s.f.SyscallConn()
	if err != nil {
		return // only when the file is closed already
	}
	buf := make([]byte, 64<<10)
	// RawRead returns when the function says done, or with an error when the
	// pump ends the readers with a past deadline.
	_ = rc.Read(func(uintptr) bool {
		for {
			// mu is taken per read, not per readiness, so the pump gets in
			// between the reads of a fast writer.
			p.mu.Lock()
			if p.closing {
				p.mu.Unlock()
				return true
			}
			_, done, more := p.readOnce(s, buf, false)
			p.mu.Unlock()
			if done || !more {
				return done
			}
		}
	})
}

// readOnce reads fd 1 or 2 once without blocking and emits what it got (n
// bytes). more says the pipe may hold more; done says the stream ended or
// the kernel stopped this process. With closing, incomplete UTF-8 left over
// is flushed once the pipe is empty. Called with mu held.
func (p *proc) readOnce(s *stream, buf []byte, closing bool) (n int, done, more bool) {
	if s.eof {
		return 0, true, false
	}
	n, err := unix.Read(s.fd, buf)
	switch {
	case n > 0 && s.framed:
		// fd 2 first: what a child wrote there before this reached fd 1
		// (os.system('echo E >&2'); print('q')) comes before it.
		return n, !p.drainStream(&p.streams[1], false) || !p.frames(s, buf[:n]), true
	case n > 0:
		return n, !p.stream(s, buf[:n], false), true
	case err == unix.EINTR:
		return 0, false, true
	case err == unix.EAGAIN:
		// The pipe is empty: what frames held back is text (frames.go).
		if s.framed && !p.flushFramePending(s) {
			return 0, true, false
		}
		if closing && len(s.partial) > 0 {
			return 0, !p.stream(s, nil, true), false
		}
		return 0, false, false
	}
	s.eof = true // EOF, or an error that will not go away
	if s.framed {
		p.flushFramePending(s) // a false here (stopped) ends the stream all the same
	}
	if len(s.partial) > 0 {
		p.stream(s, nil, true)
	}
	return 0, true, false
}

// drain reads what fd 1 and 2 hold now, up to drainLimit each, so a process
// that writes without pause cannot starve fd 4. With closing it also flushes
// incomplete UTF-8 left over. Called with mu held; false when the kernel
// stopped this process.
func (p *proc) drain(closing bool) bool {
	return p.drainStream(&p.streams[0], closing) && p.drainStream(&p.streams[1], closing)
}

func (p *proc) drainStream(s *stream, closing bool) bool {
	for total := 0; total < drainLimit; {
		n, done, more := p.readOnce(s, p.drainBuf, closing)
		if done {
			return s.eof // false: stopped
		}
		if !more {
			break
		}
		total += n
	}
	return true
}

// pump is the only reader of fd 4. It reads, parses and hands on under mu
// (see the package doc), so no fd-1/2 output read after a message was read
// from fd 4 is emitted before it, and it drains fd 1 and 2 before handing
// on what it read, so no output written before a message comes after it.
func (p *proc) pump() {
	defer close(p.pumpDone)
	defer p.stopReaders()
	rc, err := p.msgF.SyscallConn()
	if err != nil {
		p.driverGone(err) // only when the file is closed already
		return
	}
	r := &fd4Reader{p: p, lines: newMsgLines(p.spec.maxMessage), buf: make([]byte, 64<<10)}
	for {
		// RawRead calls readReady when fd 4 may be readable and parks the
		// goroutine in the poller while it returns false.
		if err := rc.Read(r.readReady); err != nil {
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				p.driverGone(err)
				return
			}
			select {
			case <-p.stop:
				return
			default:
			}
			// The process exited (wait set the deadline): everything it
			// wrote is in the pipes now.
			r.readAfterExit()
		}
		if !r.ok {
			return
		}
		if r.eof {
			p.driverGone(nil)
			return
		}
	}
}

// stopReaders ends the stream readers once the pump is done: the flag for
// one that is about to take mu, the deadline for one parked in the poller.
func (p *proc) stopReaders() {
	p.mu.Lock()
	p.closing = true
	p.mu.Unlock()
	for i := range p.streams {
		_ = p.streams[i].f.SetReadDeadline(aLongTimeAgo)
	}
	p.readers.Wait()
}

// fd4Reader is the pump's state: what it read from fd 4 and the outcome of
// handing it on.
type fd4Reader struct {
	p     *proc
	lines *msgLines // parses fd 4's lines as they come, each byte once
	buf   []byte
	msgs  []core.Message
	ok    bool // the last hand-on went through (false: the kernel stopped the process)
	eof   bool // fd 4 ended
}

// readReady reads fd 4 once it may be readable; false (nothing there yet)
// parks the pump in the poller again.
func (r *fd4Reader) readReady(uintptr) bool {
	r.p.mu.Lock()
	defer r.p.mu.Unlock()
	var n int
	var err error
	for {
		n, err = unix.Read(r.p.msgFD, r.buf)
		if err != unix.EINTR {
			break
		}
	}
	if err == unix.EAGAIN {
		return false
	}
	r.msgs = r.msgs[:0]
	if n > 0 {
		r.msgs = r.lines.add(r.p, r.msgs, r.buf[:n])
	} else {
		r.eof = true // EOF, or an error that will not go away
	}
	r.ok = r.take(r.eof)
	return true
}

// readAfterExit takes all the exited process left on fd 4, and hands it on
// as the last of it.
func (r *fd4Reader) readAfterExit() {
	r.p.mu.Lock()
	defer r.p.mu.Unlock()
	r.msgs = r.msgs[:0]
	for {
		n, err := unix.Read(r.p.msgFD, r.buf)
		if n > 0 {
			r.msgs = r.lines.add(r.p, r.msgs, r.buf[:n])
			continue
		}
		if err == unix.EINTR {
			continue
		}
		break
	}
	r.ok, r.eof = r.take(true), true
}

// take hands on the messages of the complete lines read so far. Called
// with mu held.
func (r *fd4Reader) take(final bool) bool {
	r.lines.endBatch(r.msgs)
	return r.p.handle(mergeStreams(r.msgs), final)
}

// mergeStreams joins runs of stream messages of one name and request in
// msgs, in place: a burst of prints read at once becomes one message, as
// the fd-1/2 readers merge a burst of writes.
func mergeStreams(msgs []core.Message) []core.Message {
	out := msgs[:0]
	for i := 0; i < len(msgs); {
		m, j := msgs[i], i+1
		if m.Type == core.MsgStream {
			n := len(m.Text)
			for ; j < len(msgs) && msgs[j].Type == core.MsgStream && msgs[j].Name == m.Name && msgs[j].ParentID == m.ParentID; j++ {
				n += len(msgs[j].Text)
			}
			if j > i+1 {
				var b strings.Builder
				b.Grow(n)
				for _, r := range msgs[i:j] {
					b.WriteString(r.Text)
				}
				m.Text = b.String()
			}
		}
		out = append(out, m)
		i = j
	}
	return out
}

// handle delivers what the pump read from fd 4, draining fd 1 and 2 in
// between. Called with mu held; false when the kernel stopped this process.
func (p *proc) handle(msgs []core.Message, final bool) bool {
	// A request's opening messages go first: the fd-1/2 output now in the
	// pipes may have been written after them. Everything else waits for the
	// drain, so no output written before it comes after it.
	rest, ok := p.deliverOpening(msgs)
	if !ok || !p.drain(final) {
		return false
	}
	if final {
		p.closing = true // nothing read from fd 1/2 after this is delivered
	}
	return p.deliverAll(rest)
}

// handleFrame delivers a batch of messages framed in fd 1 (frames.go): in
// their place among the prints already, so only fd 2 is drained first.
// Called with mu held; false when the kernel stopped this process.
func (p *proc) handleFrame(msgs []core.Message) bool {
	rest, ok := p.deliverOpening(msgs)
	return ok && p.drainStream(&p.streams[1], false) && p.deliverAll(rest)
}

// deliverOpening delivers the request-opening messages at the start of msgs
// and the output held for that request, and returns the rest of msgs.
func (p *proc) deliverOpening(msgs []core.Message) (rest []core.Message, ok bool) {
	i := 0
	for ; i < len(msgs) && opensRequest(msgs[i]); i++ {
		if !p.deliver(msgs[i]) {
			return nil, false
		}
	}
	return msgs[i:], p.flushHeld()
}

func (p *proc) deliverAll(msgs []core.Message) bool {
	for _, m := range msgs {
		if !p.deliver(m) {
			return false
		}
	}
	return true
}

// flushHeld emits the held output of the request that has opened, keeps
// that of the running one if it has not opened yet, and drops the rest (a
// request that is over). Called with mu held; false when the kernel stopped
// this process.
func (p *proc) flushHeld() bool {
	if len(p.held) == 0 {
		return true
	}
	cur, keep := p.currentID(), p.held[:0]
	for _, m := range p.held {
		switch {
		case m.ParentID == p.opened && p.opened != "":
			if !p.emit(m) {
				return false
			}
		case m.ParentID == cur:
			keep = append(keep, m)
		}
	}
	clear(p.held[len(keep):])
	p.held = keep
	p.heldBytes = 0
	for _, m := range keep {
		p.heldBytes += len(m.Text)
	}
	return true
}

// parse appends the messages of one line from fd 4 to msgs: a line holds
// one message, or a JSON array of messages written together.
func (p *proc) parse(msgs []core.Message, line []byte) []core.Message {
	line = bytes.TrimSpace(line)
	if len(line) == 0 {
		return msgs
	}
	if m, ok := parseStream(line); ok {
		return append(msgs, m)
	}
	var batch []core.Message
	var err error
	if line[0] == '[' {
		err = json.Unmarshal(line, &batch)
	} else {
		batch = make([]core.Message, 1)
		err = json.Unmarshal(line, &batch[0])
	}
	if err != nil {
		// A driver bug, or a write the interpreter was interrupted in:
		// surface it on the request rather than lose it.
		quoted := line
		if len(quoted) > 200 {
			quoted = quoted[:200]
		}
		batch = []core.Message{{Type: core.MsgStream, Name: "stderr", Text: fmt.Sprintf("kernelhost: bad driver message (%d bytes) %q: %v\n", len(line), quoted, err)}}
	}
	for _, m := range batch {
		if m.Type == "kh_ready" {
			if !p.isReady.Swap(true) {
				p.ready <- nil
			}
			continue
		}
		if m.Type == "kh_cwd" {
			select {
			case p.cwdAck <- m.EValue:
			default: // one record, one answer: a second is a driver bug, dropped
			}
			continue
		}
		msgs = append(msgs, m)
	}
	return msgs
}

// streamPrefix starts every stream message of the python and node drivers,
// which write the fields in this order: name, parent_id, text.
var streamPrefix = []byte(`{"type":"stream","name":"`)

// parseStream decodes a line in the drivers' stream message layout without
// reflection: a burst of prints is a line each, and encoding/json would
// cost about as much as the print itself. ok is false for any other line,
// which then goes through encoding/json.
func parseStream(line []byte) (m core.Message, ok bool) {
	rest, ok := bytes.CutPrefix(line, streamPrefix)
	if !ok {
		return m, false
	}
	switch {
	case bytes.HasPrefix(rest, []byte(`stdout"`)):
		m.Name, rest = "stdout", rest[len(`stdout"`):]
	case bytes.HasPrefix(rest, []byte(`stderr"`)):
		m.Name, rest = "stderr", rest[len(`stderr"`):]
	default:
		return m, false
	}
	if rest, ok = bytes.CutPrefix(rest, []byte(`,"parent_id":`)); !ok {
		return m, false
	}
	if m.ParentID, rest, ok = jsonString(rest); !ok {
		return m, false
	}
	if rest, ok = bytes.CutPrefix(rest, []byte(`,"text":`)); !ok {
		return m, false
	}
	if m.Text, rest, ok = jsonString(rest); !ok || string(rest) != "}" {
		return m, false
	}
	m.Type = core.MsgStream
	return m, true
}

// jsonString decodes the JSON string at the start of b and returns the rest.
// It decodes the escapes print output has (\n, \t, \", \\ ...) itself
// and leaves \u escapes and invalid UTF-8 to encoding/json.
func jsonString(b []byte) (s string, rest []byte, ok bool) {
	if len(b) == 0 || b[0] != '"' {
		return "", nil, false
	}
	var out []byte // the decoded text, once an escape was seen
	high, from := false, 1
	for i := 1; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"':
			if high && !utf8.Valid(b[1:i]) {
				return viaJSON(b[:i+1], b[i+1:])
			}
			if out == nil {
				return string(b[1:i]), b[i+1:], true
			}
			return string(append(out, b[from:i]...)), b[i+1:], true
		case c == '\\':
			if i+1 >= len(b) {
				return "", nil, false
			}
			r := jsonEscapes[b[i+1]]
			if r == 0 {
				// \u: find the end of the string, then let encoding/json decode it.
				for j := i + 2; j < len(b); j++ {
					if b[j] == '\\' {
						j++
					} else if b[j] == '"' {
						return viaJSON(b[:j+1], b[j+1:])
					}
				}
				return "", nil, false
			}
			out = append(append(out, b[from:i]...), r)
			i++
			from = i + 1
		case c < 0x20:
			return "", nil, false // not valid JSON: let encoding/json report it
		case c >= 0x80:
			high = true
		}
	}
	return "", nil, false
}

// jsonEscapes maps the byte after a backslash to what it stands for, for
// every JSON escape but \u; 0 for the rest.
var jsonEscapes = [256]byte{'"': '"', '\\': '\\', '/': '/', 'b': '\b', 'f': '\f', 'n': '\n', 'r': '\r', 't': '\t'}

func viaJSON(quoted, rest []byte) (string, []byte, bool) {
	var s string
	if err := json.Unmarshal(quoted, &s); err != nil {
		return "", nil, false
	}
	return s, rest, true
}

func opensRequest(m core.Message) bool {
	return m.Type == core.MsgExecuteInput || (m.Type == core.MsgStatus && m.State == core.StateBusy)
}

// deliver tags m with the running request when the driver left it untagged
// and emits it.
func (p *proc) deliver(m core.Message) bool {
	if m.ParentID == "" {
		m.ParentID = p.currentID()
		if m.ParentID == "" {
			return true // output of no request (e.g. a background thread after idle)
		}
	}
	if m.Type == core.MsgStream && m.ParentID != p.opened {
		// A thread's print between requests: hold it until its request
		// opens, as fd-1/2 output is held; drop it if it belongs to one
		// that is over.
		if m.ParentID == p.currentID() {
			p.hold(m)
		}
		return true
	}
	if !p.emit(m) {
		return false
	}
	if m.Type == core.MsgStatus && m.State == core.StateBusy {
		p.opened = m.ParentID
	}
	if m.Type == core.MsgStatus && m.State == core.StateIdle {
		p.opened = ""
		p.stopTicks(m.ParentID)
		p.clearCurrent(m.ParentID)
	}
	return true
}

// stream forwards fd-1/2 bytes as a stream message of the running request,
// holding back a trailing incomplete UTF-8 sequence until the next read.
// Called with mu held; false when the kernel stopped this process.
func (p *proc) stream(s *stream, data []byte, final bool) bool {
	b := data
	if len(s.partial) > 0 {
		b = append(s.partial, data...)
		s.partial = nil
	}
	if !final {
		if cut := incompleteTail(b); cut > 0 {
			s.partial = append([]byte(nil), b[len(b)-cut:]...)
			b = b[:len(b)-cut]
		}
	}
	if len(b) == 0 {
		return true
	}
	if !p.isReady.Load() { // keep early stderr to explain a failed start
		if s.name == "stderr" && p.startErr.Len() < stderrKeep {
			p.startErr.Write(b)
		}
		return true
	}
	parent := p.currentID()
	if parent == "" {
		return true
	}
	m := core.Message{ParentID: parent, Type: core.MsgStream, Name: s.name, Text: validUTF8(b)}
	if parent != p.opened {
		p.hold(m)
		return true
	}
	return p.emit(m)
}

// hold keeps m until its request opens (flushHeld), up to 1024 messages
// and maxMessage bytes. Called with mu held.
func (p *proc) hold(m core.Message) {
	if len(p.held) >= 1024 || p.heldBytes+len(m.Text) > p.spec.maxMessage {
		return
	}
	p.heldBytes += len(m.Text)
	p.held = append(p.held, m)
}

// validUTF8 is b as a string with each byte that is not UTF-8 replaced by
// U+FFFD, as encoding/json would write it and as Python's print writes
// undecodable bytes.
func validUTF8(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	var out strings.Builder
	out.Grow(len(b) + 8)
	for len(b) > 0 {
		r, size := utf8.DecodeRune(b)
		if r == utf8.RuneError && size == 1 {
			out.WriteRune(utf8.RuneError)
		} else {
			out.Write(b[:size])
		}
		b = b[size:]
	}
	return out.String()
}

// incompleteTail returns how many bytes at the end of b start a UTF-8
// sequence that is not complete yet.
func incompleteTail(b []byte) int {
	for i := 1; i <= 3 && i <= len(b); i++ {
		c := b[len(b)-i]
		if c < 0x80 {
			return 0 // ASCII: complete
		}
		if utf8.RuneStart(c) {
			if utf8.FullRune(b[len(b)-i:]) {
				return 0
			}
			return i
		}
	}
	return 0
}

// driverGone handles a driver that went away by itself: it reaps the
// process, kills what is left of its group and reports the kernel dead.
func (p *proc) driverGone(cause error) {
	select {
	case <-p.stop:
		return // the kernel is killing it: Restart or Shutdown reports
	default:
	}
	p.adoptMu.Lock()
	p.gone.Store(true)
	p.adoptMu.Unlock()
	if p.spec.sandbox != nil {
		// The interpreter is the child of the sandbox's init, not ours:
		// only bwrap, left to exit by itself, says how it ended (128+signal).
		select {
		case <-p.waitDone:
		case <-time.After(sandboxExitWait):
		}
	}
	p.cgMu.Lock()
	overLimit := p.lim.memoryExceeded() // before killAll removes its cgroup
	p.cgMu.Unlock()
	p.killAll() // what it left behind
	select {
	case <-p.waitDone:
	case <-time.After(exitWait + killWait):
	}
	p.removeCgroup()
	if !p.isReady.Swap(true) {
		p.ready <- startFailure(p, cause) // it died while starting: StartKernel reports it
		return
	}
	if id := p.currentID(); overLimit != "" && id != "" {
		p.emit(core.Message{ParentID: id, Type: core.MsgError, EName: "MemoryLimitExceeded", EValue: overLimit})
	}
	p.forgetCurrent()
	p.stopTicks("")
	p.emit(core.Message{Type: core.MsgStatus, State: core.StateDead, Text: p.howItDied()})
}

// howItDied says what died and how, for the KernelDied error: "the python
// interpreter (pid 4242) was killed by signal 11 (segmentation fault)".
func (p *proc) howItDied() string {
	what := fmt.Sprintf("the %s interpreter", p.spec.langName)
	select {
	case <-p.waitDone:
	default:
		return what + " stopped answering" // not reaped within exitWait + killWait
	}
	st := p.cmd.ProcessState
	pid, _, _ := p.ids()
	what = fmt.Sprintf("%s (pid %d)", what, pid)
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return fmt.Sprintf("%s was killed by signal %d (%s)", what, int(ws.Signal()), ws.Signal())
	}
	if code := st.ExitCode(); p.spec.sandbox != nil && code > 128 && code < 128+65 {
		// bwrap exits with 128+N when the interpreter was killed by signal N.
		sig := syscall.Signal(code - 128)
		return fmt.Sprintf("%s was killed by signal %d (%s)", what, int(sig), sig)
	}
	return fmt.Sprintf("%s exited with status %d", what, st.ExitCode())
}

func startFailure(p *proc, cause error) error {
	msg := "the interpreter exited before it was ready"
	select {
	case <-p.waitDone:
		msg += " (" + p.cmd.ProcessState.String() + ")"
	default:
	}
	if p.startErr.Len() > 0 {
		msg += ": " + string(bytes.TrimSpace(p.startErr.Bytes()))
	}
	if cause != nil {
		return fmt.Errorf("%s: %w", msg, cause)
	}
	return errors.New(msg)
}
