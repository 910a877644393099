package subprocess

import (
	"strings"
	"testing"

	"github.com/kernelhost/kernelhost/core"
)

// feed passes data to l in reads of n bytes and ends the batch.
func feed(l *msgLines, data string, n int) []core.Message {
	r := &procReader{}
	var msgs []core.Message
	for len(data) > 0 {
		k := min(n, len(data))
		msgs = l.add(r, msgs, []byte(data[:k]))
		data = data[k:]
	}
	l.endBatch(msgs)
	return msgs
}

// A stream message over the cap keeps the text that fits (an escape cut
// in half is left out), a notice says how much was dropped, and the
// messages after it, even one glued to its end, go through.
func TestMsgLinesCutStream(t *testing.T) {
	text := strings.Repeat(`ab\n\\`, 3000) // 6 bytes each in JSON
	data := `{"type":"stream","name":"stdout","parent_id":"r1","text":"` + text + `"}` + "\n" +
		`{"type":"status","parent_id":"r1","state":"idle"}` + "\n"
	for _, n := range []int{7, 4096, len(data)} {
		msgs := feed(newMsgLines(4096), data, n)
		if len(msgs) != 3 || msgs[0].Name != "stdout" || msgs[1].Name != "stderr" || msgs[2].State != "idle" {
			t.Fatalf("reads of %d: %+v", n, msgs)
		}
		if got := msgs[0].Text; len(got) < 2600 || !strings.HasPrefix(strings.Repeat("ab\n\\", 1000), got[:len(got)-len(got)%4]) {
			t.Errorf("reads of %d: kept text %.40q... (%d bytes)", n, got, len(got))
		}
		if !strings.Contains(msgs[1].Text, "KiB of output dropped: over max-message-bytes, 4.0 KiB per message") || msgs[1].ParentID != "r1" {
			t.Errorf("reads of %d: notice %+v", n, msgs[1])
		}
	}
	// Bytes without a newline, then the driver's reply glued to them.
	glued := strings.Repeat("x", 100000) + `{"type":"execute_reply","parent_id":"r2","status":"ok"}` + "\n"
	msgs := feed(newMsgLines(4096), glued, 65536)
	if len(msgs) != 2 || msgs[0].Name != "stderr" || msgs[1].Type != core.MsgExecuteReply || msgs[1].ParentID != "r2" {
		t.Fatalf("glued reply: %+v", msgs)
	}
}

// A batch's output past the cap is dropped, its control messages kept,
// one notice where the first drop was.
func TestMsgLinesBatchCap(t *testing.T) {
	line := `{"type":"stream","name":"stdout","parent_id":"r","text":"` + strings.Repeat("o", 1000) + `"}` + "\n"
	data := strings.Repeat(line, 10) + `{"type":"execute_reply","parent_id":"r","status":"ok"}` + "\n"
	msgs := feed(newMsgLines(4096), data, 4096)
	var out, notices, replies int
	for _, m := range msgs {
		switch {
		case m.Name == "stdout":
			out++
		case m.Name == "stderr":
			notices++
		case m.Type == core.MsgExecuteReply:
			replies++
		}
	}
	if out != 3 || notices != 1 || replies != 1 || msgs[len(msgs)-1].Type != core.MsgExecuteReply {
		t.Errorf("stdout %d, notices %d, replies %d: %+v", out, notices, replies, msgs)
	}
}
