package subprocess

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
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
	// drainLimit bounds one drain of fd 1 or 2, so a process that writes
	// without pause cannot starve fd 4. It is above the largest pipe buffer,
	// so whatever was in the pipe when fd 4 was read is always taken.
	drainLimit = 2 << 20
	// stderrKeep is how much early stderr a failed start quotes.
	stderrKeep = 4 << 10
)

// proc is one interpreter process and the two goroutines that own it: the
// waiter (cmd.Wait) and the pump (reads fd 1, 2 and 4, emits messages).
type proc struct {
	k    *Kernel
	cmd  *exec.Cmd
	pid  int
	reqW *os.File // fd 3 in the child

	msgR, outR, errR int // raw non-blocking read ends of fd 4, 1, 2
	wakeR, wakeW     int // wakes the pump: the kernel stops it, or the process exited

	stop     chan struct{} // closed when the kernel kills this process on purpose
	stopOnce sync.Once
	waitDone chan struct{} // closed after cmd.Wait returned
	pumpDone chan struct{} // closed when the pump returned
	ready    chan error    // the start's outcome, one value
	isReady  atomic.Bool   // the driver said kh_ready
	gone     atomic.Bool   // the driver is gone (exited or killed)

	startErr bytes.Buffer // stderr before ready, quoted when the start fails

	// Owned by the pump. opened is the request whose busy was delivered;
	// fd-1/2 output of a request that has not opened yet (it was drained
	// between the pump's read of fd 4 and the driver's busy) is held until
	// busy and execute_input are out.
	opened string
	held   []core.Message
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

func (k *Kernel) startProc(ctx context.Context) (_ *proc, err error) {
	p := &proc{
		k: k, msgR: -1, outR: -1, errR: -1, wakeR: -1, wakeW: -1,
		stop:     make(chan struct{}),
		waitDone: make(chan struct{}),
		pumpDone: make(chan struct{}),
		ready:    make(chan error, 1),
	}
	var childEnds []*os.File // closed in the parent once the child has them
	defer func() {
		for _, f := range childEnds {
			f.Close()
		}
		if err != nil && p.cmd == nil {
			p.closeFDs()
		}
	}()
	reqR, reqW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("start %s kernel: %w", k.langName, err)
	}
	p.reqW = reqW
	childEnds = append(childEnds, reqR)
	var msgW, outW, errW int
	for _, pr := range []struct{ r, w *int }{{&p.msgR, &msgW}, {&p.outR, &outW}, {&p.errR, &errW}} {
		if *pr.r, *pr.w, err = pipe(); err != nil {
			return nil, fmt.Errorf("start %s kernel: %w", k.langName, err)
		}
		childEnds = append(childEnds, os.NewFile(uintptr(*pr.w), "child"))
	}
	if p.wakeR, p.wakeW, err = pipe(); err != nil {
		return nil, fmt.Errorf("start %s kernel: %w", k.langName, err)
	}

	cmd := exec.Command(k.lang.path, k.lang.args...)
	cmd.Dir = k.cwd
	cmd.Env = k.env
	cmd.Stdout = childEnds[2]
	cmd.Stderr = childEnds[3]
	cmd.ExtraFiles = []*os.File{reqR, childEnds[1]} // fd 3, fd 4
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s kernel in %q: %w", k.langName, k.cwd, err)
	}
	p.cmd = cmd
	p.pid = cmd.Process.Pid

	go p.wait()
	go p.pump()

	select {
	case err = <-p.ready:
	case <-ctx.Done():
		err = ctx.Err()
	}
	if err != nil {
		p.kill()
		return nil, fmt.Errorf("start %s kernel in %q: %w", k.langName, k.cwd, err)
	}
	return p, nil
}

func (p *proc) wait() {
	_ = p.cmd.Wait()
	// Tell the pump: a driver whose fd 4 is still held open elsewhere has
	// exited all the same.
	_, _ = unix.Write(p.wakeW, []byte{1})
	close(p.waitDone)
}

func (p *proc) isGone() bool { return p.gone.Load() }

// kill SIGKILLs the process group and waits (bounded) until the process is
// reaped and the pump has returned. Safe to call more than once.
func (p *proc) kill() {
	p.stopOnce.Do(func() {
		close(p.stop)
		p.gone.Store(true)
		_ = syscall.Kill(-p.pid, syscall.SIGKILL)
		_, _ = unix.Write(p.wakeW, []byte{1})
	})
	select {
	case <-p.waitDone:
	case <-time.After(killWait):
	}
	<-p.pumpDone
	p.closeFDs()
}

func (p *proc) closeFDs() {
	if p.reqW != nil {
		p.reqW.Close()
	}
	// The pump closes the read ends it owns; wakeW is written by wait and
	// kill, both done by now.
	for _, fd := range []*int{&p.wakeW} {
		if *fd >= 0 {
			unix.Close(*fd)
			*fd = -1
		}
	}
	if p.cmd == nil { // the pump never ran
		for _, fd := range []*int{&p.msgR, &p.outR, &p.errR, &p.wakeR} {
			if *fd >= 0 {
				unix.Close(*fd)
				*fd = -1
			}
		}
	}
}

// emit hands m to the kernel's Messages; false when the kernel stopped this process.
func (p *proc) emit(m core.Message) bool {
	select {
	case p.k.msgs <- m:
		return true
	case <-p.stop:
		return false
	}
}

// pump is the only reader of fd 4, 1 and 2. See the package doc for why it
// drains fd 1 and 2 right after each read of fd 4.
func (p *proc) pump() {
	defer close(p.pumpDone)
	fds := []unix.PollFd{
		{Fd: int32(p.msgR), Events: unix.POLLIN},
		{Fd: int32(p.outR), Events: unix.POLLIN},
		{Fd: int32(p.errR), Events: unix.POLLIN},
		{Fd: int32(p.wakeR), Events: unix.POLLIN},
	}
	defer func() {
		for _, fd := range []int{p.msgR, p.outR, p.errR, p.wakeR} {
			unix.Close(fd)
		}
	}()
	var (
		lines   []byte
		buf     = make([]byte, 64<<10)
		partial [2][]byte // an incomplete UTF-8 sequence left over per stream
	)
	streams := [2]struct {
		idx  int
		name string
	}{{1, "stdout"}, {2, "stderr"}}

	drain := func(closing bool) bool {
		for i, s := range streams {
			final := closing
			fd := int(fds[s.idx].Fd)
			if fd < 0 {
				continue
			}
			for total := 0; total < drainLimit; {
				n, err := unix.Read(fd, buf)
				if n > 0 {
					total += n
					if !p.stream(s.name, &partial[i], buf[:n], false) {
						return false
					}
					continue
				}
				if err == unix.EINTR {
					continue
				}
				if err == unix.EAGAIN {
					break
				}
				fds[s.idx].Fd = -1 // EOF or error: poll ignores negative fds
				final = true
				break
			}
			if final && len(partial[i]) > 0 && !p.stream(s.name, &partial[i], nil, true) {
				return false
			}
		}
		return true
	}

	for {
		if _, err := unix.Poll(fds, -1); err != nil && err != unix.EINTR {
			p.driverGone(fmt.Errorf("poll: %w", err))
			return
		}
		select {
		case <-p.stop:
			return
		default:
		}
		exited := fds[3].Revents != 0
		if exited {
			// The process exited: everything it wrote is in the pipes now.
			var b [8]byte
			_, _ = unix.Read(p.wakeR, b[:])
			fds[3].Fd = -1
		}
		eof := false
		for {
			n, err := unix.Read(p.msgR, buf)
			if n > 0 {
				lines = append(lines, buf[:n]...)
				if exited {
					continue // read everything the dead driver left
				}
				break
			}
			if err == unix.EINTR {
				continue
			}
			if err != unix.EAGAIN {
				eof = true
			}
			break
		}
		// Split the complete lines off and parse them.
		var msgs []core.Message
		for {
			nl := bytes.IndexByte(lines, '\n')
			if nl < 0 {
				break
			}
			msgs = p.parse(msgs, lines[:nl])
			lines = lines[nl+1:]
		}
		// A request's opening messages go first: the fd-1/2 output now in
		// the pipes may have been written after them. Everything else waits
		// for the drain, so no output written before it comes after it.
		i := 0
		for ; i < len(msgs) && opensRequest(msgs[i]); i++ {
			if !p.deliver(msgs[i]) {
				return
			}
		}
		for _, m := range p.held {
			if !p.emit(m) {
				return
			}
		}
		p.held = nil
		if !drain(eof || exited) {
			return
		}
		for ; i < len(msgs); i++ {
			if !p.deliver(msgs[i]) {
				return
			}
		}
		if eof || exited {
			p.driverGone(nil)
			return
		}
	}
}

// parse appends the messages of one line from fd 4 to msgs: a line holds
// one message, or a JSON array of messages written together.
func (p *proc) parse(msgs []core.Message, line []byte) []core.Message {
	line = bytes.TrimSpace(line)
	if len(line) == 0 {
		return msgs
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
		// A driver bug: surface it on the request rather than lose it.
		batch = []core.Message{{Type: core.MsgStream, Name: "stderr", Text: fmt.Sprintf("kernelhost: bad driver message %q: %v\n", line, err)}}
	}
	for _, m := range batch {
		if m.Type == "kh_ready" {
			if !p.isReady.Swap(true) {
				p.ready <- nil
			}
			continue
		}
		msgs = append(msgs, m)
	}
	return msgs
}

func opensRequest(m core.Message) bool {
	return m.Type == core.MsgExecuteInput || (m.Type == core.MsgStatus && m.State == core.StateBusy)
}

// deliver tags m with the running request when the driver left it untagged
// and emits it.
func (p *proc) deliver(m core.Message) bool {
	if m.ParentID == "" {
		m.ParentID = p.k.currentID()
		if m.ParentID == "" {
			return true // output of no request (e.g. a background thread after idle)
		}
	}
	if !p.emit(m) {
		return false
	}
	if m.Type == core.MsgStatus && m.State == core.StateBusy {
		p.opened = m.ParentID
	}
	if m.Type == core.MsgStatus && m.State == core.StateIdle {
		p.opened = ""
		p.k.clearCurrent(m.ParentID)
	}
	return true
}

// stream forwards fd-1/2 bytes as a stream message of the running request,
// holding back a trailing incomplete UTF-8 sequence until the next read.
func (p *proc) stream(name string, partial *[]byte, data []byte, final bool) bool {
	b := append(*partial, data...)
	*partial = nil
	if !final {
		if cut := incompleteTail(b); cut > 0 {
			*partial = append([]byte(nil), b[len(b)-cut:]...)
			b = b[:len(b)-cut]
		}
	}
	if len(b) == 0 {
		return true
	}
	if !p.isReady.Load() { // keep early stderr to explain a failed start
		if name == "stderr" && p.startErr.Len() < stderrKeep {
			p.startErr.Write(b)
		}
		return true
	}
	parent := p.k.currentID()
	if parent == "" {
		return true
	}
	m := core.Message{ParentID: parent, Type: core.MsgStream, Name: name, Text: string(b)}
	if parent != p.opened && len(p.held) < 1024 {
		p.held = append(p.held, m)
		return true
	}
	return p.emit(m)
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
	p.gone.Store(true)
	_ = syscall.Kill(-p.pid, syscall.SIGKILL) // leftover children of the group
	select {
	case <-p.waitDone:
	case <-time.After(exitWait + killWait):
	}
	if !p.isReady.Swap(true) {
		p.ready <- startFailure(p, cause) // it died while starting: StartKernel reports it
		return
	}
	p.k.setCurrent("")
	p.emit(core.Message{Type: core.MsgStatus, State: core.StateDead})
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
