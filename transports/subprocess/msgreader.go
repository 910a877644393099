package subprocess

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/kernelhost/kernelhost/core"
)

const (
	// drainLimit bounds one drain of fd 1 or 2, so a process that writes
	// without pause cannot starve fd 4. It is above the largest pipe buffer,
	// so whatever was in the pipe when fd 4 was read is always taken.
	drainLimit = 2 << 20
	// stderrKeep is how much early stderr a failed start quotes.
	stderrKeep = 4 << 10
)

// stream is the read end of fd 1 or 2.
type stream struct {
	name    string
	f       *os.File
	fd      int
	partial []byte // an incomplete UTF-8 sequence left over from the last read
	eof     bool
	reader  streamReader // what takes the bytes read
}

// A streamReader takes the bytes read from fd 1 or 2. Every driver's fd 2,
// and fd 1 of a driver that writes its messages to fd 4, carry output only
// (outputReader); python's fd 1 carries its messages too, as frames among
// the prints (frameReader, frames.go). fd 4's JSON lines are read by the
// pump (msgLines). Its methods are called with mu held and return false
// when the kernel stopped the process.
type streamReader interface {
	// read takes data, just read from s.
	read(p *proc, s *stream, data []byte) bool
	// empty is called when s is empty or closed: what read held back as a
	// possible frame start is text then.
	empty(p *proc, s *stream) bool
}

// outputReader forwards what it reads as stream messages.
type outputReader struct{}

func (outputReader) read(p *proc, s *stream, data []byte) bool { return p.stream(s, data, false) }
func (outputReader) empty(*proc, *stream) bool                 { return true }

// emit hands m to the kernel's Messages; false when the kernel stopped this process.
func (p *proc) emit(m core.Message) bool {
	out := p.out.Load()
	if out == nil {
		return true // pooled: nobody listens yet
	}
	select {
	case *out <- m:
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
	case n > 0:
		return n, !s.reader.read(p, s, buf[:n]), true
	case err == unix.EINTR:
		return 0, false, true
	case err == unix.EAGAIN:
		if !s.reader.empty(p, s) {
			return 0, true, false
		}
		if closing && len(s.partial) > 0 {
			return 0, !p.stream(s, nil, true), false
		}
		return 0, false, false
	}
	s.eof = true         // EOF, or an error that will not go away
	s.reader.empty(p, s) // a false here (stopped) ends the stream all the same
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
	cur, opened := p.req.now()
	keep := p.held[:0]
	for _, m := range p.held {
		switch {
		case m.ParentID == cur && opened:
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

func opensRequest(m core.Message) bool {
	return m.Type == core.MsgExecuteInput || (m.Type == core.MsgStatus && m.State == core.StateBusy)
}

// deliver tags m with the running request when the driver left it untagged
// and emits it.
func (p *proc) deliver(m core.Message) bool {
	cur, opened := p.req.now()
	if m.ParentID == "" {
		m.ParentID = cur
		if m.ParentID == "" {
			return true // output of no request (e.g. a background thread after idle)
		}
	}
	if m.Type == core.MsgStream && (m.ParentID != cur || !opened) {
		// A thread's print between requests: hold it until its request
		// opens, as fd-1/2 output is held; drop it if it belongs to one
		// that is over.
		if m.ParentID == cur {
			p.hold(m)
		}
		return true
	}
	if m.Type == core.MsgStatus && m.State == core.StateIdle {
		// Ended before its idle is delivered: whoever acts on the idle
		// finds the interpreter idle (ForkKernel refuses a busy one).
		p.req.end(m.ParentID)
	}
	if !p.emit(m) {
		return false
	}
	if m.Type == core.MsgStatus && m.State == core.StateBusy {
		p.req.open(m.ParentID)
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
	parent, opened := p.req.now()
	if parent == "" {
		return true
	}
	m := core.Message{ParentID: parent, Type: core.MsgStream, Name: s.name, Text: validUTF8(b)}
	if !opened {
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
