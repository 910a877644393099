package subprocess

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
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

// procReader reads an interpreter's pipes and hands on what it says: the
// pump, the only reader of its message channel (fd 4), and a stream reader
// each for fd 1 and 2, with what they hold between reads. A proc has one
// (proc.rd); its process, pipes to write and lifecycle are the proc's.
//
// mu serialises each read of fd 1/2 together with the emission of what it
// read, against the pump's handling of what it read from fd 4. The pump
// drains fd 1/2 under mu after each read of fd 4: output a stream reader
// took before that is already emitted (it held mu from its read to its
// emit), and the rest is still in the pipe for the drain. So no output the
// driver wrote before its reply is emitted after it.
type procReader struct {
	// out is where its messages go, the owning kernel's Messages: nil
	// while the interpreter waits in a pool, where nothing it says is
	// delivered (proc.adopt).
	out atomic.Pointer[chan<- core.Message]
	// stop is closed when the kernel kills the process on purpose: what
	// is read then is not delivered.
	stop <-chan struct{}
	// req is the request the interpreter runs (the proc's).
	req *running
	// maxMessage caps one message line and one batch's output (msgLines).
	maxMessage int
	// gone is told that fd 4 ended or failed: the driver went away
	// (proc.driverGone).
	gone func(cause error)

	ready   chan error  // the start's outcome, one value
	isReady atomic.Bool // the driver said kh_ready
	// cwdAck carries the driver's answer to a hand-out's cwd record
	// (proc.enterCwd): "" when it entered the directory, else why not.
	cwdAck chan string

	msgF  *os.File // read end of fd 4
	msgFD int      // its descriptor, for the non-blocking reads after exit
	// streams are fd 1 (stdout) and 2 (stderr). Their fields other than f
	// and fd are guarded by mu.
	streams  [2]stream
	readers  sync.WaitGroup
	pumpDone chan struct{} // closed when the pump and the stream readers returned

	mu        sync.Mutex
	closing   bool           // the pump did its final drain: the stream readers stop
	startErr  bytes.Buffer   // stderr before ready, quoted when the start fails
	held      []core.Message // fd-1/2 output of a request that has not opened yet
	heldBytes int            // the text of held
	drainBuf  []byte         // the pump's buffer for drains
}

// newProcReader is the reader of an interpreter whose messages go to out
// (nil: none yet), before its pipes are open (openPipes).
func newProcReader(out chan<- core.Message, stop <-chan struct{}, req *running, maxMessage int, gone func(error)) *procReader {
	r := &procReader{
		stop:       stop,
		req:        req,
		maxMessage: maxMessage,
		gone:       gone,
		ready:      make(chan error, 1),
		cwdAck:     make(chan string, 1),
		pumpDone:   make(chan struct{}),
		drainBuf:   make([]byte, 64<<10),
	}
	if out != nil {
		r.out.Store(&out)
	}
	r.streams[0].name, r.streams[1].name = "stdout", "stderr"
	r.streams[0].reader, r.streams[1].reader = outputReader{}, outputReader{}
	return r
}

// start starts the pump and the stream readers.
func (r *procReader) start() {
	r.readers.Add(2)
	go r.readStream(&r.streams[0])
	go r.readStream(&r.streams[1])
	go r.pump()
}

// wake wakes the pump: the process exited or is being killed.
func (r *procReader) wake() { _ = r.msgF.SetReadDeadline(aLongTimeAgo) }

// closeFiles closes the read ends; the pump and the readers are done with
// them (or never ran).
func (r *procReader) closeFiles() {
	for _, f := range []*os.File{r.msgF, r.streams[0].f, r.streams[1].f} {
		if f != nil {
			f.Close()
		}
	}
}

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
// pump (msgLines). Its methods are called with r.mu held and return false
// when the kernel stopped the process.
type streamReader interface {
	// read takes data, just read from s.
	read(r *procReader, s *stream, data []byte) bool
	// empty is called when s is empty or closed: what read held back as a
	// possible frame start is text then.
	empty(r *procReader, s *stream) bool
}

// outputReader forwards what it reads as stream messages.
type outputReader struct{}

func (outputReader) read(r *procReader, s *stream, data []byte) bool {
	return r.stream(s, data, false)
}
func (outputReader) empty(*procReader, *stream) bool { return true }

// emit hands m to the kernel's Messages; false when the kernel stopped this process.
func (r *procReader) emit(m core.Message) bool {
	out := r.out.Load()
	if out == nil {
		return true // pooled: nobody listens yet
	}
	select {
	case *out <- m:
		return true
	case <-r.stop:
		return false
	}
}

// readStream forwards fd 1 or 2 as it comes, also while fd 4 is quiet (a
// long-running cell that prints). It waits through the netpoller: RawRead
// calls the function when the pipe may be readable and, when it returns
// false, parks until the pipe is readable again.
func (r *procReader) readStream(s *stream) {
	defer r.readers.Done()
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
			r.mu.Lock()
			if r.closing {
				r.mu.Unlock()
				return true
			}
			_, done, more := r.readOnce(s, buf, false)
			r.mu.Unlock()
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
func (r *procReader) readOnce(s *stream, buf []byte, closing bool) (n int, done, more bool) {
	if s.eof {
		return 0, true, false
	}
	n, err := unix.Read(s.fd, buf)
	switch {
	case n > 0:
		return n, !s.reader.read(r, s, buf[:n]), true
	case err == unix.EINTR:
		return 0, false, true
	case err == unix.EAGAIN:
		if !s.reader.empty(r, s) {
			return 0, true, false
		}
		if closing && len(s.partial) > 0 {
			return 0, !r.stream(s, nil, true), false
		}
		return 0, false, false
	}
	s.eof = true         // EOF, or an error that will not go away
	s.reader.empty(r, s) // a false here (stopped) ends the stream all the same
	if len(s.partial) > 0 {
		r.stream(s, nil, true)
	}
	return 0, true, false
}

// drain reads what fd 1 and 2 hold now, up to drainLimit each, so a process
// that writes without pause cannot starve fd 4. With closing it also flushes
// incomplete UTF-8 left over. Called with mu held; false when the kernel
// stopped this process.
func (r *procReader) drain(closing bool) bool {
	return r.drainStream(&r.streams[0], closing) && r.drainStream(&r.streams[1], closing)
}

func (r *procReader) drainStream(s *stream, closing bool) bool {
	for total := 0; total < drainLimit; {
		n, done, more := r.readOnce(s, r.drainBuf, closing)
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
func (r *procReader) pump() {
	defer close(r.pumpDone)
	defer r.stopReaders()
	rc, err := r.msgF.SyscallConn()
	if err != nil {
		r.gone(err) // only when the file is closed already
		return
	}
	f4 := &fd4Reader{rd: r, lines: newMsgLines(r.maxMessage), buf: make([]byte, 64<<10)}
	for {
		// RawRead calls readReady when fd 4 may be readable and parks the
		// goroutine in the poller while it returns false.
		if err := rc.Read(f4.readReady); err != nil {
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				r.gone(err)
				return
			}
			select {
			case <-r.stop:
				return
			default:
			}
			// The process exited (wait set the deadline): everything it
			// wrote is in the pipes now.
			f4.readAfterExit()
		}
		if !f4.ok {
			return
		}
		if f4.eof {
			r.gone(nil)
			return
		}
	}
}

// stopReaders ends the stream readers once the pump is done: the flag for
// one that is about to take mu, the deadline for one parked in the poller.
func (r *procReader) stopReaders() {
	r.mu.Lock()
	r.closing = true
	r.mu.Unlock()
	for i := range r.streams {
		_ = r.streams[i].f.SetReadDeadline(aLongTimeAgo)
	}
	r.readers.Wait()
}

// fd4Reader is the pump's state: what it read from fd 4 and the outcome of
// handing it on.
type fd4Reader struct {
	rd    *procReader
	lines *msgLines // parses fd 4's lines as they come, each byte once
	buf   []byte
	msgs  []core.Message
	ok    bool // the last hand-on went through (false: the kernel stopped the process)
	eof   bool // fd 4 ended
}

// readReady reads fd 4 once it may be readable; false (nothing there yet)
// parks the pump in the poller again.
func (r *fd4Reader) readReady(uintptr) bool {
	r.rd.mu.Lock()
	defer r.rd.mu.Unlock()
	var n int
	var err error
	for {
		n, err = unix.Read(r.rd.msgFD, r.buf)
		if err != unix.EINTR {
			break
		}
	}
	if err == unix.EAGAIN {
		return false
	}
	r.msgs = r.msgs[:0]
	if n > 0 {
		r.msgs = r.lines.add(r.rd, r.msgs, r.buf[:n])
	} else {
		r.eof = true // EOF, or an error that will not go away
	}
	r.ok = r.take(r.eof)
	return true
}

// readAfterExit takes all the exited process left on fd 4, and hands it on
// as the last of it.
func (r *fd4Reader) readAfterExit() {
	r.rd.mu.Lock()
	defer r.rd.mu.Unlock()
	r.msgs = r.msgs[:0]
	for {
		n, err := unix.Read(r.rd.msgFD, r.buf)
		if n > 0 {
			r.msgs = r.lines.add(r.rd, r.msgs, r.buf[:n])
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
	return r.rd.handle(mergeStreams(r.msgs), final)
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
func (r *procReader) handle(msgs []core.Message, final bool) bool {
	// A request's opening messages go first: the fd-1/2 output now in the
	// pipes may have been written after them. Everything else waits for the
	// drain, so no output written before it comes after it.
	rest, ok := r.deliverOpening(msgs)
	if !ok || !r.drain(final) {
		return false
	}
	if final {
		r.closing = true // nothing read from fd 1/2 after this is delivered
	}
	return r.deliverAll(rest)
}

// handleFrame delivers a batch of messages framed in fd 1 (frames.go): in
// their place among the prints already, so only fd 2 is drained first.
// Called with mu held; false when the kernel stopped this process.
func (r *procReader) handleFrame(msgs []core.Message) bool {
	rest, ok := r.deliverOpening(msgs)
	return ok && r.drainStream(&r.streams[1], false) && r.deliverAll(rest)
}

// deliverOpening delivers the request-opening messages at the start of msgs
// and the output held for that request, and returns the rest of msgs.
func (r *procReader) deliverOpening(msgs []core.Message) (rest []core.Message, ok bool) {
	i := 0
	for ; i < len(msgs) && opensRequest(msgs[i]); i++ {
		if !r.deliver(msgs[i]) {
			return nil, false
		}
	}
	return msgs[i:], r.flushHeld()
}

func (r *procReader) deliverAll(msgs []core.Message) bool {
	for _, m := range msgs {
		if !r.deliver(m) {
			return false
		}
	}
	return true
}

// flushHeld emits the held output of the request that has opened, keeps
// that of the running one if it has not opened yet, and drops the rest (a
// request that is over). Called with mu held; false when the kernel stopped
// this process.
func (r *procReader) flushHeld() bool {
	if len(r.held) == 0 {
		return true
	}
	cur, opened := r.req.now()
	keep := r.held[:0]
	for _, m := range r.held {
		switch {
		case m.ParentID == cur && opened:
			if !r.emit(m) {
				return false
			}
		case m.ParentID == cur:
			keep = append(keep, m)
		}
	}
	clear(r.held[len(keep):])
	r.held = keep
	r.heldBytes = 0
	for _, m := range keep {
		r.heldBytes += len(m.Text)
	}
	return true
}

// parse appends the messages of one line from fd 4 to msgs: a line holds
// one message, or a JSON array of messages written together.
func (r *procReader) parse(msgs []core.Message, line []byte) []core.Message {
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
			if !r.isReady.Swap(true) {
				r.ready <- nil
			}
			continue
		}
		if m.Type == "kh_cwd" {
			select {
			case r.cwdAck <- m.EValue:
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
func (r *procReader) deliver(m core.Message) bool {
	cur, opened := r.req.now()
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
			r.hold(m)
		}
		return true
	}
	if m.Type == core.MsgStatus && m.State == core.StateIdle {
		// Ended before its idle is delivered: whoever acts on the idle
		// finds the interpreter idle (ForkKernel refuses a busy one).
		r.req.end(m.ParentID)
	}
	if !r.emit(m) {
		return false
	}
	if m.Type == core.MsgStatus && m.State == core.StateBusy {
		r.req.open(m.ParentID)
	}
	return true
}

// stream forwards fd-1/2 bytes as a stream message of the running request,
// holding back a trailing incomplete UTF-8 sequence until the next read.
// Called with mu held; false when the kernel stopped this process.
func (r *procReader) stream(s *stream, data []byte, final bool) bool {
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
	if !r.isReady.Load() { // keep early stderr to explain a failed start
		if s.name == "stderr" && r.startErr.Len() < stderrKeep {
			r.startErr.Write(b)
		}
		return true
	}
	parent, opened := r.req.now()
	if parent == "" {
		return true
	}
	m := core.Message{ParentID: parent, Type: core.MsgStream, Name: s.name, Text: validUTF8(b)}
	if !opened {
		r.hold(m)
		return true
	}
	return r.emit(m)
}

// hold keeps m until its request opens (flushHeld), up to 1024 messages
// and maxMessage bytes. Called with mu held.
func (r *procReader) hold(m core.Message) {
	if len(r.held) >= 1024 || r.heldBytes+len(m.Text) > r.maxMessage {
		return
	}
	r.heldBytes += len(m.Text)
	r.held = append(r.held, m)
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
