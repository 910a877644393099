package pluginrpc

import (
	"testing"
	"time"

	"github.com/kernelhost/kernelhost/core"
)

// The batcher merges consecutive stream output of one request and stream,
// keeps everything else apart and in order, and never holds back the end of
// a request.
func TestBatcherMergesStreamsAndKeepsOrder(t *testing.T) {
	t.Parallel()
	ch := make(chan core.Message, 16)
	in := []core.Message{
		{ParentID: "a", Type: core.MsgStream, Name: "stdout", Text: "1\n", Timestamp: "t1"},
		{ParentID: "a", Type: core.MsgStream, Name: "stdout", Text: "2\n", Timestamp: "t2"},
		{ParentID: "a", Type: core.MsgStream, Name: "stderr", Text: "e\n"},
		{ParentID: "a", Type: core.MsgStream, Name: "stdout", Text: "3\n"},
		{ParentID: "a", Type: core.MsgExecuteReply, Status: core.ReplyOK},
		{ParentID: "a", Type: core.MsgStatus, State: core.StateIdle},
	}
	for _, m := range in {
		ch <- m
	}
	var b batcher
	b.reset()
	b.add(<-ch)
	if b.fill(ch) {
		t.Fatal("fill reported a closed channel")
	}
	got := b.frame(nil).Messages
	want := []struct{ typ, name, text, ts string }{
		{"stream", "stdout", "1\n2\n", "t1"},
		{"stream", "stderr", "e\n", ""},
		{"stream", "stdout", "3\n", ""},
		{"execute_reply", "", "", ""},
		{"status", "", "", ""},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d messages, want %d: %v", len(got), len(want), got)
	}
	for i, w := range want {
		g := got[i]
		if g.Type != w.typ || g.Name != w.name || string(g.Text) != w.text || g.Timestamp != w.ts {
			t.Errorf("message %d = %s %s %q %q, want %s %s %q %q", i, g.Type, g.Name, g.Text, g.Timestamp, w.typ, w.name, w.text, w.ts)
		}
	}
}

// Lingering waits for more stream output only while the batch ends in
// stream output: an idle arriving ends the wait at once.
func TestBatcherLingerEndsOnIdle(t *testing.T) {
	t.Parallel()
	ch := make(chan core.Message, 4)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	var b batcher
	b.reset()
	b.add(core.Message{ParentID: "a", Type: core.MsgStream, Name: "stdout", Text: "x"})
	if !b.streaming() {
		t.Fatal("a batch ending in stream output should linger")
	}
	// The idle is queued before linger starts: a goroutine sending it could
	// be scheduled after the linger window under load, and the test is about
	// what linger does with an idle, not about the scheduler.
	ch <- core.Message{ParentID: "a", Type: core.MsgStatus, State: core.StateIdle}
	if b.linger(ch, timer) {
		t.Fatal("linger reported a closed channel")
	}
	if n := len(b.msgs); n != 2 || b.msgs[1].State != core.StateIdle {
		t.Fatalf("batch = %+v, want the stream and the idle", b.msgs)
	}
	// With nothing else coming, linger gives up after streamLinger.
	b.reset()
	b.add(core.Message{ParentID: "a", Type: core.MsgStream, Name: "stdout", Text: "y"})
	start := time.Now()
	b.linger(ch, timer)
	// Not waiting at all, or waiting for a message that never comes, is
	// what this tells apart; 30 s is room for a loaded machine.
	if d := time.Since(start); d < streamLinger || d > 30*time.Second {
		t.Errorf("linger with nothing coming took %v, want about %v", d, streamLinger)
	}
}
