package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kernelhost/kernelhost/core/engine"
	"github.com/kernelhost/kernelhost/hostcmd/internal/hosttest"
	"github.com/kernelhost/kernelhost/hostcmd/settings"
)

func seq(l hosttest.Line) uint64 { f, _ := l["seq"].(float64); return uint64(f) }

// gate is a FIFO the test's Python code blocks on until the test opens it.
func gate(t *testing.T) (path string, open func()) {
	path = filepath.Join(t.TempDir(), "gate")
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	return path, func() {
		done := make(chan error, 1)
		go func() {
			f, err := os.OpenFile(path, os.O_WRONLY, 0) // blocks until the code opens it
			if err == nil {
				err = f.Close()
			}
			done <- err
		}()
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("the code never opened the gate")
		}
	}
}

// A client whose connection is cut mid-execution re-attaches after the last
// line it received and gets exactly the lines it missed and the rest, live:
// none lost, none repeated (checked by sequence number and by content).
func TestResumeAfterACutConnection(t *testing.T) {
	t.Parallel()
	hosttest.EachTransport(t, func(t *testing.T, start func(...func(*settings.Config)) *hosttest.Host) {
		h := start(func(c *settings.Config) { c.DisconnectPolicy = engine.DisconnectContinue })
		fifo, openGate := gate(t)
		code := fmt.Sprintf("for i in range(50): print(i, flush=True)\nopen(%q).read()\nfor i in range(50, 100): print(i, flush=True)", fifo)
		body, _ := json.Marshal(map[string]any{"code": code})

		cutCtx, cut := context.WithCancel(context.Background())
		defer cut()
		first, id := h.Open(cutCtx, "POST", "/execute?seq=true", string(body))
		if id == "" {
			t.Fatal("no X-Execution-Id on the /execute response")
		}
		// Read the first half (the driver may batch prints into fewer
		// lines), then forget the last line read, as if it was lost in transit.
		var got []hosttest.Line
		var firstHalf strings.Builder
		for !strings.HasSuffix(firstHalf.String(), "49\n") {
			l := first.Next()
			if l == nil {
				t.Fatal("stream ended early")
			}
			if l.Type() != "keepalive" {
				got = append(got, l)
				firstHalf.WriteString(l.Str("text"))
			}
		}
		got = got[:len(got)-1]
		cut() // whatever the host wrote after that is lost with the connection

		resumed, rid := h.Open(context.Background(), "GET", fmt.Sprintf("/executions/%s/stream?after=%d", id, seq(got[len(got)-1])), "")
		if rid != id {
			t.Fatalf("X-Execution-Id of the resumed stream = %q, want %q", rid, id)
		}
		openGate() // the second half is written while the resumed stream reads
		for l := resumed.Next(); l != nil; l = resumed.Next() {
			if l.Type() != "keepalive" {
				got = append(got, l)
			}
		}
		var out strings.Builder
		for i, l := range got {
			if seq(l) != uint64(i+1) {
				t.Fatalf("line %d has seq %d: lost or repeated around it (%v)", i+1, seq(l), l)
			}
			if l.Type() == "stdout" {
				out.WriteString(l.Str("text"))
			}
		}
		var want strings.Builder
		for i := range 100 {
			fmt.Fprintf(&want, "%d\n", i)
		}
		if out.String() != want.String() {
			t.Fatalf("stdout over both streams:\n%q\nwant\n%q", out.String(), want.String())
		}
		if last := got[len(got)-1]; last.Type() != "end_of_execution" {
			t.Fatalf("last line %v, want end_of_execution", last)
		}

		status, text := h.Do("GET", "/executions/"+id, "")
		var st engine.ExecutionState
		if err := json.Unmarshal([]byte(text), &st); status != http.StatusOK || err != nil {
			t.Fatalf("GET /executions/%s: %d %s (%v)", id, status, text, err)
		}
		if st.Status != engine.StatusFinished || st.Outcome != engine.OutcomeOK || st.LastSeq != uint64(len(got)) || st.ID != id {
			t.Fatalf("state %+v, want finished ok with last_seq %d", st, len(got))
		}
	})
}

// The SDKs' stream is unchanged: no seq field unless asked for.
func TestExecuteStreamHasNoSeqUnlessAsked(t *testing.T) {
	t.Parallel()
	h := hosttest.Start(t)
	for _, l := range h.Run(map[string]any{"code": "print(1)\n2"}) {
		if _, ok := l["seq"]; ok {
			t.Fatalf("line with a seq field on a plain /execute stream: %v", l)
		}
	}
}

func TestResumeErrors(t *testing.T) {
	t.Parallel()
	h := hosttest.Start(t, func(c *settings.Config) { c.ReplayBytes = 4096 })
	fifo, openGate := gate(t)
	// stdout and stderr in turn: separate outputs (a stream's consecutive
	// prints may arrive as one).
	code := fmt.Sprintf("import sys\nfor i in range(500): print(i, flush=True); print(i, file=sys.stderr, flush=True)\nopen(%q).read()", fifo)
	body, _ := json.Marshal(map[string]any{"code": code})
	first, id := h.Open(context.Background(), "POST", "/execute", string(body))
	for l := first.Until("stderr"); l.Str("text") != "499\n"; l = first.Until("stderr") {
	} // all written: the code waits at the gate

	for _, c := range []struct {
		path   string
		status int
		detail string
	}{
		{"/executions/no-such-id", 404, "not found"},
		{"/executions/no-such-id/stream", 404, "not found"},
		{"/executions/" + id + "/stream?after=-1", 422, "Invalid after"},
		{"/executions/" + id + "/stream?after=x", 422, "Invalid after"},
		{"/executions/" + id + "/stream?after=100000", 400, "past the last output"},
	} {
		if status, text := h.Do("GET", c.path, ""); status != c.status || !strings.Contains(text, c.detail) {
			t.Errorf("GET %s: %d %q, want %d with %q", c.path, status, text, c.status, c.detail)
		}
	}

	// A second stream takes over; the first ends with a StreamDetached error.
	// (The first stream's handler keeps reading, so only the newest 4 KiB of
	// what it read are still there: start from the oldest kept.)
	_, text := h.Do("GET", "/executions/"+id, "")
	var st engine.ExecutionState
	if err := json.Unmarshal([]byte(text), &st); err != nil || st.Status != engine.StatusRunning || !st.Attached || st.FirstSeq < 2 {
		t.Fatalf("state of a running execution read by its client: %s (%v)", text, err)
	}
	second, _ := h.Open(context.Background(), "GET", fmt.Sprintf("/executions/%s/stream?after=%d", id, st.FirstSeq-1), "")
	if l := second.Next(); seq(l) != st.FirstSeq {
		t.Fatalf("first line from after=%d: %v", st.FirstSeq-1, l)
	}
	if l := first.Until("error"); l.Str("name") != "StreamDetached" {
		t.Fatalf("taken-over stream: %v", l)
	}
	if l := first.Next(); l.Type() != "end_of_execution" {
		t.Fatalf("after StreamDetached: %v", l)
	}
	second.Close()
	openGate()

	// Once nobody is attached only the newest 4 KiB are kept: the start is gone.
	deadline := time.Now().Add(30 * time.Second)
	for {
		status, text := h.Do("GET", "/executions/"+id+"/stream?after=0", "")
		if status == http.StatusGone {
			if !strings.Contains(text, "no longer buffered") {
				t.Fatalf("410 body %q", text)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after=0 with a 4 KiB replay buffer: %d %q, want 410", status, text)
		}
	}
}
