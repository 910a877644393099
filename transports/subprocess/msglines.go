package subprocess

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/kernelhost/kernelhost/core"
)

// DefaultMaxMessageBytes is the default of Options.MaxMessageBytes: far
// below the plugin protocol's 256 MiB message limit, far above any output
// a person reads.
const DefaultMaxMessageBytes = 16 << 20

// recoverWindow is how much of the end of a line over the cap is kept: a
// cell that writes to the message channel without a newline glues the
// driver's next message to its bytes, and that message (a reply, a
// status) is found again in this window.
const recoverWindow = 64 << 10

// msgLines parses a driver's JSON message lines as their bytes come in
// (fd 4's reads, or the payloads of python's frames), scanning each byte
// once. Its caps, each max bytes (Options.MaxMessageBytes): one line (a
// message, or an array of them), and the output messages (stream, display,
// result) of one batch (what is handed on together). Past a cap the output
// is dropped and a notice on stderr says how much; control messages
// (status, reply, error) always go through, so the execution ends as it
// would have and the interpreter keeps its state.
type msgLines struct {
	max  int
	line []byte // the current line's first bytes, up to max
	over int64  // bytes of the current line past max, not kept
	tail []byte // the current line's last bytes, once over max (recoverWindow)

	outBytes int            // bytes of the output messages of the current batch
	dropped  int64          // bytes of output dropped in the current batch
	notice   int            // index in the batch's messages of the notice; -1: none yet
	scratch  []core.Message // parse's buffer
}

func newMsgLines(max int) *msgLines {
	if max <= 0 {
		max = DefaultMaxMessageBytes
	}
	return &msgLines{max: max, notice: -1}
}

// add parses the complete lines of data (with what earlier calls left of
// a line) and appends their messages to msgs.
func (l *msgLines) add(r *procReader, msgs []core.Message, data []byte) []core.Message {
	for len(data) > 0 {
		nl := bytes.IndexByte(data, '\n')
		if nl < 0 {
			l.keep(data)
			return msgs
		}
		if len(l.line) == 0 && l.over == 0 && nl <= l.max {
			msgs = l.parseLine(r, msgs, data[:nl])
		} else {
			l.keep(data[:nl])
			if l.over == 0 {
				msgs = l.parseLine(r, msgs, l.line)
			} else {
				msgs = l.cutLine(r, msgs)
			}
			l.line, l.over, l.tail = l.line[:0], 0, l.tail[:0]
		}
		data = data[nl+1:]
	}
	return msgs
}

// keep stores b, part of the current line: its start up to max, then the
// count and the last recoverWindow bytes.
func (l *msgLines) keep(b []byte) {
	if room := l.max - len(l.line); room > 0 && l.over == 0 {
		n := min(room, len(b))
		l.line = append(l.line, b[:n]...)
		b = b[n:]
	}
	if len(b) == 0 {
		return
	}
	l.over += int64(len(b))
	if len(b) >= recoverWindow {
		l.tail = append(l.tail[:0], b[len(b)-recoverWindow:]...)
		return
	}
	if len(l.tail)+len(b) > 2*recoverWindow {
		l.tail = l.tail[:copy(l.tail, l.tail[len(l.tail)-recoverWindow:])]
	}
	l.tail = append(l.tail, b...)
}

// parseLine parses one complete line and applies the batch's output cap.
func (l *msgLines) parseLine(r *procReader, msgs []core.Message, line []byte) []core.Message {
	l.scratch = r.parse(l.scratch[:0], line)
	for _, m := range l.scratch {
		msgs = l.append(msgs, m, len(line))
	}
	return msgs
}

// append appends m, the message of a line of n bytes, unless it is output
// past the batch's cap.
func (l *msgLines) append(msgs []core.Message, m core.Message, n int) []core.Message {
	if !isOutput(m) {
		return append(msgs, m)
	}
	if l.outBytes+n > l.max && l.outBytes > 0 {
		return l.drop(msgs, m.ParentID, int64(n))
	}
	l.outBytes += n
	return append(msgs, m)
}

// drop counts n bytes of output of request parent as dropped, placing the
// batch's notice where the first drop was.
func (l *msgLines) drop(msgs []core.Message, parent string, n int64) []core.Message {
	l.dropped += n
	if l.notice >= 0 {
		return msgs
	}
	l.notice = len(msgs)
	return append(msgs, core.Message{Type: core.MsgStream, Name: "stderr", ParentID: parent})
}

// cutLine handles a line over the cap: a stream message keeps the text
// that fits, any other message is dropped; both are counted in the notice.
// A message glued to the end of the line is found again (recoverWindow).
func (l *msgLines) cutLine(r *procReader, msgs []core.Message) []core.Message {
	total := int64(len(l.line)) + l.over
	if m, ok := cutStream(l.line); ok {
		msgs = l.append(msgs, m, len(l.line))
		msgs = l.drop(msgs, m.ParentID, total-int64(len(l.line)))
	} else {
		msgs = l.drop(msgs, cutParent(l.line), total)
	}
	if i := bytes.LastIndex(l.tail, []byte(`{"type":`)); i > 0 && json.Valid(l.tail[i:]) {
		msgs = l.parseLine(r, msgs, l.tail[i:])
	}
	return msgs
}

// endBatch fills in the batch's notice and starts the next batch.
func (l *msgLines) endBatch(msgs []core.Message) {
	if l.notice >= 0 && l.notice < len(msgs) {
		msgs[l.notice].Text = fmt.Sprintf("\n[kernelhost: %s of output dropped: over max-message-bytes, %s per message]\n",
			sizeText(l.dropped), sizeText(int64(l.max)))
	}
	l.outBytes, l.dropped, l.notice = 0, 0, -1
}

// isOutput reports whether m is output the caps may drop.
func isOutput(m core.Message) bool {
	switch m.Type {
	case core.MsgStream, core.MsgDisplayData, core.MsgUpdateDisplayData, core.MsgExecuteResult:
		return true
	}
	return false
}

// cutStream reads the start of a stream message whose text was cut: the
// text up to the cut. The python and node drivers write a stream message's
// text last.
func cutStream(head []byte) (core.Message, bool) {
	var m core.Message
	i := bytes.Index(head, []byte(`,"text":"`))
	if i < 0 || json.Unmarshal(append(bytes.Clone(head[:i]), '}'), &m) != nil || m.Type != core.MsgStream {
		return core.Message{}, false
	}
	raw := head[i+len(`,"text":`):]
	// Cut before a trailing escape that may be incomplete: at the start of
	// the run of backslashes nearest the end.
	if j := bytes.LastIndexByte(raw[max(1, len(raw)-12):], '\\'); j >= 0 {
		j += max(1, len(raw)-12)
		for j > 1 && raw[j-1] == '\\' {
			j--
		}
		raw = raw[:j]
	}
	_ = json.Unmarshal(append(bytes.Clone(raw), '"'), &m.Text) // "" when what is left does not decode
	return m, true
}

// cutParent finds the parent_id near the start of a message cut by the cap.
func cutParent(head []byte) string {
	i := bytes.Index(head[:min(len(head), 4096)], []byte(`"parent_id":`))
	if i < 0 {
		return ""
	}
	var s string
	_ = json.NewDecoder(bytes.NewReader(head[i+len(`"parent_id":`):])).Decode(&s)
	return s
}

// sizeText writes n bytes for a person: 300.0 MiB, 12 KiB, 17 bytes.
func sizeText(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d bytes", n)
}
