package envd

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/creack/pty"

	pb "github.com/kernelhost/kernelhost/hostcmd/envd/gen/process"
)

// A command's life: started by Start (in its sandbox), its output fanned
// out to every stream attached to it (Start's, then Connect's), its input
// taken from SendInput/StreamInput. It runs on when its streams go away
// and is forgotten once it ended and its end was sent.

// command is one running command.
type command struct {
	info    *pb.ProcessInfo
	cmd     *exec.Cmd
	tty     *os.File // the PTY's master; nil without one
	release func()   // releases its cgroups (Config.Limits); nil: none
	stopNet func()   // stops its network stack (Wrapper); nil: none

	mu    sync.Mutex
	stdin io.WriteCloser // nil: closed, or none was asked for
	subs  map[chan *pb.ProcessEvent]struct{}
	end   *pb.ProcessEvent_EndEvent // set once it ended
	done  chan struct{}             // closed once it ended
}

// subscriberBuffer is how many events a slow stream may be behind before
// it is cut (the command goes on; the client may Connect again).
const subscriberBuffer = 1024

// subscribe attaches a stream: the events from now on, the end last.
// After the end it returns a closed channel holding only the end.
func (c *command) subscribe() chan *pb.ProcessEvent {
	ch := make(chan *pb.ProcessEvent, subscriberBuffer)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.end != nil {
		ch <- &pb.ProcessEvent{Event: &pb.ProcessEvent_End{End: c.end}}
		close(ch)
		return ch
	}
	c.subs[ch] = struct{}{}
	return ch
}

func (c *command) unsubscribe(ch chan *pb.ProcessEvent) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.subs[ch]; ok {
		delete(c.subs, ch)
		close(ch)
	}
}

// publish sends ev to every stream; one that is too far behind is cut.
func (c *command) publish(ev *pb.ProcessEvent) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for ch := range c.subs {
		select {
		case ch <- ev:
		default:
			delete(c.subs, ch)
			close(ch)
		}
	}
}

// pump publishes what r yields as data events of kind wrap.
func (c *command) pump(r io.Reader, wrap func([]byte) *pb.ProcessEvent_DataEvent, wg *sync.WaitGroup) {
	defer wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			data := append([]byte(nil), buf[:n]...)
			c.publish(&pb.ProcessEvent{Event: &pb.ProcessEvent_Data{Data: wrap(data)}})
		}
		if err != nil {
			return
		}
	}
}

// finish waits for the command and its output, then sends its end to
// every stream and closes them.
func (c *command) finish(wg *sync.WaitGroup, onEnd func()) {
	err := c.cmd.Wait()
	if c.release != nil {
		c.release() // kills what is left in its cgroup
	}
	if c.stopNet != nil {
		c.stopNet()
	}
	// bwrap's init is in bwrap's process group and may outlive it (a
	// namespace's init does not take its parent-death signal): killed, it
	// takes the whole sandbox with it, and the output pipes it holds close.
	_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
	wg.Wait()
	if c.tty != nil {
		c.tty.Close()
	}
	end := endEvent(c.cmd.ProcessState, err)
	c.mu.Lock()
	c.end = end
	for ch := range c.subs {
		select {
		case ch <- &pb.ProcessEvent{Event: &pb.ProcessEvent_End{End: end}}:
		default: // too far behind: it is cut without the end
		}
		close(ch)
	}
	c.subs = nil
	if c.stdin != nil {
		c.stdin.Close()
		c.stdin = nil
	}
	c.mu.Unlock()
	close(c.done)
	onEnd()
}

// endEvent describes how the command ended.
func endEvent(st *os.ProcessState, waitErr error) *pb.ProcessEvent_EndEvent {
	end := &pb.ProcessEvent_EndEvent{ExitCode: -1}
	if st == nil {
		msg := fmt.Sprint(waitErr)
		end.Error, end.Status = &msg, msg
		return end
	}
	end.Exited = st.Exited()
	end.ExitCode = int32(st.ExitCode())
	end.Status = st.String()
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		// The shell's convention, so the SDKs show a killed command as one.
		end.ExitCode = -1
		end.Status = "signal: " + ws.Signal().String()
	}
	return end
}

// write sends input to the command's stdin or its PTY.
func (c *command) write(in *pb.ProcessInput) error {
	switch {
	case in.GetPty() != nil:
		if c.tty == nil {
			return fmt.Errorf("%w: the process has no PTY", errInvalid)
		}
		_, err := c.tty.Write(in.GetPty())
		return err
	case in.GetStdin() != nil:
		if c.tty != nil {
			_, err := c.tty.Write(in.GetStdin())
			return err
		}
		c.mu.Lock()
		w := c.stdin
		c.mu.Unlock()
		if w == nil {
			return fmt.Errorf("%w: the process's stdin is closed or was not asked for (stdin: true)", errInvalid)
		}
		_, err := w.Write(in.GetStdin())
		return err
	}
	return nil
}

// closeStdin closes the command's stdin (EOF for it).
func (c *command) closeStdin() error {
	if c.tty != nil {
		return fmt.Errorf("%w: a PTY has no stdin to close; send Ctrl+D (0x04) instead", errInvalid)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stdin == nil {
		return nil
	}
	err := c.stdin.Close()
	c.stdin = nil
	return err
}

// resize sets the PTY's size.
func (c *command) resize(size *pb.PTY_Size) error {
	if c.tty == nil {
		return fmt.Errorf("%w: the process has no PTY to resize", errInvalid)
	}
	if size.GetCols() == 0 || size.GetRows() == 0 || size.GetCols() > 10000 || size.GetRows() > 10000 {
		return fmt.Errorf("%w: a PTY size needs 1-10000 columns and rows, got %dx%d", errInvalid, size.GetCols(), size.GetRows())
	}
	return pty.Setsize(c.tty, &pty.Winsize{Cols: uint16(size.GetCols()), Rows: uint16(size.GetRows())})
}

// signal sends sig to the command's process group: bwrap and the
// sandbox's init, whose end ends everything in the sandbox (finish), or
// the plain process and its group.
func (c *command) signal(sig syscall.Signal) error {
	select {
	case <-c.done:
		return errGone
	default:
	}
	return syscall.Kill(-c.cmd.Process.Pid, sig)
}

var errGone = errors.New("the process has ended")

// processes are the commands by pid.
type processes struct {
	mu   sync.Mutex
	byID map[uint32]*command
}

func newProcesses() *processes { return &processes{byID: map[uint32]*command{}} }

func (p *processes) add(c *command) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.byID[c.info.Pid] = c
}

func (p *processes) remove(pid uint32) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.byID, pid)
}

// find returns the command a selector names (by pid or tag).
func (p *processes) find(sel *pb.ProcessSelector) (*command, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch s := sel.GetSelector().(type) {
	case *pb.ProcessSelector_Pid:
		if c, ok := p.byID[s.Pid]; ok {
			return c, nil
		}
		return nil, fmt.Errorf("process with pid %d not found", s.Pid)
	case *pb.ProcessSelector_Tag:
		for _, c := range p.byID {
			if c.info.GetTag() == s.Tag {
				return c, nil
			}
		}
		return nil, fmt.Errorf("process with tag '%s' not found", s.Tag)
	}
	return nil, fmt.Errorf("%w: a process selector needs a pid or a tag", errInvalid)
}

func (p *processes) list() []*pb.ProcessInfo {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]*pb.ProcessInfo, 0, len(p.byID))
	for _, c := range p.byID {
		out = append(out, c.info)
	}
	return out
}

// killAll kills every command (the host shuts down).
func (p *processes) killAll() {
	p.mu.Lock()
	cmds := make([]*command, 0, len(p.byID))
	for _, c := range p.byID {
		cmds = append(cmds, c)
	}
	p.mu.Unlock()
	timeout := time.After(10 * time.Second)
	for _, c := range cmds {
		_ = c.signal(syscall.SIGKILL)
		select {
		case <-c.done:
		case <-timeout: // a process that will not die is left to the kernel
		}
	}
}
