package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"github.com/kernelhost/kernelhost/core"
)

// ErrDetached is returned by a Stream's Next once another stream attached to
// the same execution (a client re-attached elsewhere) or the stream was closed.
var ErrDetached = errors.New("another stream attached to this execution")

// ErrSlowReader is returned by a stream's Next once it was cut for reading
// too slowly: its unread output would have passed the engine-wide bound on
// buffered output (Config.MaxBufferedBytes). The execution goes on; a new
// stream can attach after the last output read.
var ErrSlowReader = errors.New("the stream was cut: its client read too slowly and the host's buffer for slow clients is full")

// errReplayGone is wrapped by Attach when the outputs after the requested
// sequence number are no longer buffered.
var errReplayGone = errors.New("outputs are no longer buffered")

// outputLog is an execution's outputs between the engine (producer, never
// blocked) and the one stream attached to it (consumer). Every output gets a
// sequence number, 1, 2, 3, … with no gaps, so a client that lost its
// connection can re-attach after the last number it saw.
//
// Three bounds keep memory in check:
//   - while a stream is attached, unread outputs are bounded by unreadMax:
//     past it new outputs are dropped and a notice says how many (a slow
//     reader must not hold the kernel, invariant 1, nor grow the host);
//   - the unread outputs of all attached streams together are bounded by
//     the engine's budget: the stream whose output would pass it is cut
//     (detached, its next returns ErrSlowReader), so that many slow
//     clients cannot take unreadMax each;
//   - outputs already handed to the stream, and everything once no stream is
//     attached, are bounded by replayMax: the oldest are forgotten first.
//
// Errors and the end line are always kept.
type outputLog struct {
	mu        sync.Mutex
	entries   []logEntry // entries[head:] are live; entries[i].out.Seq increases by 1
	head      int
	nextSeq   uint64 // the Seq of the next output pushed
	cursor    uint64 // the Seq of the next output the attached stream reads
	readBytes int    // bytes of live entries before cursor
	unread    int    // bytes of entries from cursor on
	unreadMax int
	replayMax int

	attached uint64 // the attached stream's generation; 0: none
	gens     uint64 // generations handed out
	closed   bool   // the last output was pushed (or the execution never ran)
	dropped  int    // outputs dropped since the last one kept
	droppedB int
	cut      uint64 // the generation cut for reading too slowly; 0: none

	budget  *budget      // shared by every execution's log
	charged atomic.Int64 // what this log holds of budget: unread while attached

	// changed is closed (and cleared) when something a waiting stream cares
	// about happens; a stream about to wait makes it.
	changed chan struct{}
}

type logEntry struct {
	out  Output
	size int
}

func newOutputLog(unreadMax, replayMax int, b *budget) *outputLog {
	if b == nil {
		b = &budget{max: -1}
	}
	return &outputLog{nextSeq: 1, cursor: 1, unreadMax: unreadMax, replayMax: replayMax, budget: b}
}

// budget is the output buffered for attached streams, all executions
// together, and its bound (negative: none). Lock order: an outputLog's mu
// before budget.mu, never the other way.
type budget struct {
	used atomic.Int64
	max  int64

	mu      sync.Mutex
	holders map[*outputLog]struct{} // logs charging something
}

// rechargeLocked brings what l holds of its budget up to date: the unread
// bytes while a stream is attached, nothing otherwise (then replayMax
// bounds the log). Called after every change of l.unread or l.attached.
func (l *outputLog) rechargeLocked() {
	var want int64
	if l.attached != 0 {
		want = int64(l.unread)
	}
	had := l.charged.Swap(want)
	if want == had {
		return
	}
	l.budget.used.Add(want - had)
	if (want == 0) != (had == 0) {
		l.budget.mu.Lock()
		if want == 0 {
			delete(l.budget.holders, l)
		} else {
			if l.budget.holders == nil {
				l.budget.holders = map[*outputLog]struct{}{}
			}
			l.budget.holders[l] = struct{}{}
		}
		l.budget.mu.Unlock()
	}
}

// enforce cuts the streams furthest behind (the logs holding the most
// unread output) until the budget holds. Called with no log's mu held.
func (b *budget) enforce() {
	for b.max >= 0 && b.used.Load() > b.max {
		b.mu.Lock()
		var victim *outputLog
		var most int64
		for l := range b.holders {
			if c := l.charged.Load(); c > most {
				victim, most = l, c
			}
		}
		b.mu.Unlock()
		if victim == nil {
			return
		}
		victim.cutSlow()
	}
}

// cutSlow detaches the attached stream for reading too slowly: its Next
// returns ErrSlowReader, and the log keeps replayMax bytes, as for any
// execution without a stream, for the client to re-attach.
func (l *outputLog) cutSlow() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.attached == 0 {
		return
	}
	l.cut = l.attached
	l.attached = 0
	l.trimLocked(l.replayMax, true)
	l.rechargeLocked()
	l.wakeLocked()
}

// entryOverhead is what one kept output costs besides its text: the
// logEntry itself (about 150 bytes) and the timestamp string. Counting it
// keeps the byte bounds close to the memory really used, also for the many
// small outputs of a chatty loop.
const entryOverhead = 192

func outputSize(o Output) int {
	n := entryOverhead + len(o.Text) + len(o.Traceback) + len(o.ErrValue)
	for k, v := range o.Bundle {
		n += len(k) + len(v)
	}
	return n
}

// push appends o, or drops it when the attached stream is too far behind;
// then, past the engine-wide budget, the streams furthest behind are cut.
func (l *outputLog) push(o Output) {
	l.add(o)
	l.budget.enforce()
}

func (l *outputLog) add(o Output) {
	size := outputSize(o)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	defer l.rechargeLocked()
	essential := o.Type == OutError || o.Type == OutEndOfExecution
	if l.attached != 0 && !essential && l.unread+size > l.unreadMax {
		l.dropped++
		l.droppedB += size
		return
	}

	if l.dropped > 0 {
		l.appendLocked(Output{
			Type:      OutStderr,
			Text:      fmt.Sprintf("[kernelhost] %d outputs (%d bytes) were dropped: the client read slower than the kernel wrote and the per-execution buffer was full\n", l.dropped, l.droppedB),
			Timestamp: now(),
		})
		l.dropped, l.droppedB = 0, 0
	}
	l.appendLocked(o)
	if l.attached == 0 {
		l.trimLocked(l.replayMax, true)
	}
	l.wakeLocked()
}

func (l *outputLog) appendLocked(o Output) {
	o.Seq = l.nextSeq
	l.nextSeq++
	size := outputSize(o)
	l.entries = append(l.entries, logEntry{out: o, size: size})
	l.unread += size
}

// trimLocked forgets the oldest outputs until at most max bytes are kept,
// never the newest one. With all false only outputs already read go (the
// attached stream still gets every output after its cursor); with all true
// (no stream attached) unread ones go too.
func (l *outputLog) trimLocked(max int, all bool) {
	for l.head < len(l.entries)-1 {
		e := &l.entries[l.head]
		isRead := e.out.Seq < l.cursor
		over := l.readBytes > max
		if all {
			over = l.readBytes+l.unread > max
		}
		if !over || (!isRead && !all) {
			break
		}
		if isRead {
			l.readBytes -= e.size
		} else {
			l.unread -= e.size
			l.cursor = e.out.Seq + 1
		}
		*e = logEntry{} // let the GC have its text
		l.head++
	}
	live := len(l.entries) - l.head
	switch {
	case cap(l.entries) > 1024 && cap(l.entries) > 4*live:
		// Much smaller than its array (a burst that was read, or trimmed
		// when the stream left): give the array back, for the time the
		// execution is kept after its end too.
		l.entries = append(make([]logEntry, 0, 2*live), l.entries[l.head:]...)
		l.head = 0
	case l.head > 64 && l.head > len(l.entries)/2:
		// Compact once the forgotten prefix is the larger part.
		n := copy(l.entries, l.entries[l.head:])
		clear(l.entries[n:])
		l.entries = l.entries[:n]
		l.head = 0
	}
}

// changedLocked returns a channel that is closed at the next change.
func (l *outputLog) changedLocked() <-chan struct{} {
	if l.changed == nil {
		l.changed = make(chan struct{})
	}
	return l.changed
}

func (l *outputLog) wakeLocked() {
	if l.changed != nil {
		close(l.changed)
		l.changed = nil
	}
}

// close marks the end: readers get io.EOF once they have read everything.
func (l *outputLog) close() {
	l.mu.Lock()
	l.closed = true
	l.wakeLocked()
	l.mu.Unlock()
}

// firstSeq is the Seq of the oldest output kept (nextSeq when none is).
func (l *outputLog) firstSeqLocked() uint64 {
	if l.head < len(l.entries) {
		return l.entries[l.head].out.Seq
	}
	return l.nextSeq
}

// attach makes a new stream the attached one, reading from the output after
// Seq after; the stream attached before it gets ErrDetached.
func (l *outputLog) attach(after uint64) (uint64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	last := l.nextSeq - 1
	if after > last {
		return 0, newError(core.KindInvalid, fmt.Sprintf("after=%d is past the last output, %d", after, last), nil)
	}
	if first := l.firstSeqLocked(); after+1 < first {
		return 0, newError(core.KindGone, fmt.Sprintf("outputs %d to %d are no longer buffered (the replay buffer keeps the newest %d bytes); the oldest kept is %d", after+1, first-1, l.replayMax, first), errReplayGone)
	}
	l.moveCursorLocked(after + 1)
	l.trimLocked(l.replayMax, false)
	l.gens++
	l.attached = l.gens
	l.rechargeLocked()
	l.wakeLocked()
	return l.attached, nil
}

// moveCursorLocked sets the cursor to seq, which is kept (or next).
func (l *outputLog) moveCursorLocked(seq uint64) {
	l.cursor = seq
	l.readBytes, l.unread = 0, 0
	for _, e := range l.entries[l.head:] {
		if e.out.Seq < seq {
			l.readBytes += e.size
		} else {
			l.unread += e.size
		}
	}
}

// detach ends stream gen if it is the attached one: from now on the log
// keeps only replayMax bytes.
func (l *outputLog) detach(gen uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.attached != gen {
		return
	}
	l.attached = 0
	l.trimLocked(l.replayMax, true)
	l.rechargeLocked()
	l.wakeLocked()
}

// next appends the outputs stream gen has not read to dst, waiting for at
// least one. io.EOF: all read and no more will come.
func (l *outputLog) next(ctx context.Context, gen uint64, dst []Output) ([]Output, error) {
	for {
		l.mu.Lock()
		if l.attached != gen {
			cut := l.cut == gen
			l.mu.Unlock()
			if cut {
				return dst, ErrSlowReader
			}
			return dst, ErrDetached
		}
		if l.cursor < l.nextSeq {
			start := l.head + int(l.cursor-l.firstSeqLocked())
			for _, e := range l.entries[start:] {
				dst = append(dst, e.out)
			}
			l.readBytes += l.unread
			l.unread = 0
			l.cursor = l.nextSeq
			l.trimLocked(l.replayMax, false)
			l.rechargeLocked()
			l.mu.Unlock()
			return dst, nil
		}
		if l.closed {
			l.mu.Unlock()
			return dst, io.EOF
		}
		changed := l.changedLocked()
		l.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return dst, ctx.Err()
		}
	}
}

// state is a snapshot for Execution.State.
func (l *outputLog) state() (first, last uint64, attached bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.firstSeqLocked(), l.nextSeq - 1, l.attached != 0
}
