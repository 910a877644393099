package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kernelhost/kernelhost/core/engine"
	"github.com/kernelhost/kernelhost/hostcmd/internal/hosttest"
	"github.com/kernelhost/kernelhost/hostcmd/settings"
)

// floodCode writes mb MiB of stdout in 1 KiB lines, then runs tail.
func floodCode(mb int, tail string) string {
	return fmt.Sprintf("import sys\nline = 'x' * 1023 + '\\n'\nfor i in range(%d * 1024):\n    sys.stdout.write(line)\nsys.stdout.flush()\n%s", mb, tail)
}

// stalledClient sends an /execute request on a raw connection, reads the
// response headers only (for the execution id) and then never reads again:
// a client that stopped reading, with its connection open.
func stalledClient(t *testing.T, h *hosttest.Host, code string) (id string, conn net.Conn) {
	t.Helper()
	conn, err := net.Dial("tcp", h.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	// A small receive buffer: the host's writes block sooner.
	_ = conn.(*net.TCPConn).SetReadBuffer(4096)
	body, _ := json.Marshal(map[string]any{"code": code})
	fmt.Fprintf(conn, "POST /execute HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	br := bufio.NewReaderSize(conn, 4096)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("read the response headers: %v", err)
	}
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	return resp.Header.Get("X-Execution-Id"), conn
}

// executionState is GET /executions/{id}.
func executionState(t *testing.T, h *hosttest.Host, id string) engine.ExecutionState {
	t.Helper()
	status, text := h.Do("GET", "/executions/"+id, "")
	var st engine.ExecutionState
	if err := json.Unmarshal([]byte(text), &st); status != 200 || err != nil {
		t.Fatalf("GET /executions/%s: %d %s", id, status, text)
	}
	return st
}

// waitFor polls cond every 20 ms until it holds, failing after within.
func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > within {
			t.Fatalf("%s: not within %s", what, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return time.Since(start)
}

// resumeToEnd re-attaches to the execution from its oldest kept output and
// reads to the end: the execution stayed resumable.
func resumeToEnd(t *testing.T, h *hosttest.Host, id string) {
	t.Helper()
	st := executionState(t, h, id)
	s, rid := h.Open(context.Background(), "GET", fmt.Sprintf("/executions/%s/stream?after=%d", id, st.FirstSeq-1), "")
	if rid != id {
		t.Fatalf("re-attached to %q, want %q", rid, id)
	}
	var last hosttest.Line
	for l := s.Next(); l != nil; l = s.Next() {
		last = l
	}
	if last.Type() != "end_of_execution" {
		t.Fatalf("the re-attached stream ended with %v", last)
	}
}

// A client that stops reading is cut (issue 11 item 5) rather than pin up
// to -max-output-bytes (64 MiB) of host heap each, with no bound on how
// many, or hold a shutdown for its whole 30 s.
func TestSlowClientsAreCutAndReleased(t *testing.T) {
	t.Parallel()
	t.Run("write timeout", func(t *testing.T) {
		t.Parallel()
		h := hosttest.Start(t, func(c *settings.Config) {
			c.WriteTimeout = 300 * time.Millisecond
			c.Keepalive = 100 * time.Millisecond
		})
		id, _ := stalledClient(t, h, floodCode(20, ""))
		took := waitFor(t, 20*time.Second, "the stalled stream detached", func() bool { return !executionState(t, h, id).Attached })
		waitFor(t, 30*time.Second, "the buffered output released", func() bool { return h.Engine.BufferedBytes() == 0 })
		t.Logf("stalled client cut %s after the start (write timeout 300 ms)", took.Round(time.Millisecond))
		waitFor(t, 60*time.Second, "the execution finished", func() bool { return executionState(t, h, id).Status == engine.StatusFinished })
		resumeToEnd(t, h, id)
		hosttest.NoError(t, h.Run(map[string]any{"code": "1"}))
	})

	t.Run("buffer bound", func(t *testing.T) {
		t.Parallel()
		const bound = 4 << 20
		h := hosttest.Start(t, func(c *settings.Config) { c.MaxBufferedBytes = bound; c.WriteTimeout = time.Minute })
		gate, open := gate(t)
		id, _ := stalledClient(t, h, floodCode(30, fmt.Sprintf("open(%q).read()", gate)))
		var peak int64
		took := waitFor(t, 30*time.Second, "the stream past the bound detached", func() bool {
			peak = max(peak, h.Engine.BufferedBytes())
			return !executionState(t, h, id).Attached
		})
		// The bound holds to within one output line.
		if peak > bound+4096 {
			t.Fatalf("%d bytes buffered at the peak, over the bound %d", peak, bound)
		}
		if b := h.Engine.BufferedBytes(); b != 0 {
			t.Fatalf("%d bytes still buffered after the cut", b)
		}
		t.Logf("cut %s after the start, the buffer peaked at %d bytes (bound %d)", took.Round(time.Millisecond), peak, bound)
		// The code went on (the cut is not the client leaving): it finishes
		// once the gate opens, and the execution can be re-attached.
		open()
		waitFor(t, 60*time.Second, "the execution finished", func() bool { return executionState(t, h, id).Status == engine.StatusFinished })
		if st := executionState(t, h, id); st.Outcome != engine.OutcomeOK {
			t.Fatalf("outcome %q, want ok (the code ran to its end)", st.Outcome)
		}
		resumeToEnd(t, h, id)
	})

	t.Run("shutdown", func(t *testing.T) {
		t.Parallel()
		h := hosttest.Start(t) // the default write timeout, 30 s
		stalledClient(t, h, floodCode(20, "import time\ntime.sleep(3600)"))
		waitFor(t, 30*time.Second, "the stalled stream's buffer grew", func() bool { return h.Engine.BufferedBytes() > 1<<20 })
		ctx, cancel := context.WithTimeout(context.Background(), 25*time.Second)
		defer cancel()
		start := time.Now()
		err := h.Shutdown(ctx)
		took := time.Since(start)
		// Well under the 30 s write timeout it must not wait for.
		if err != nil || took > 20*time.Second {
			t.Fatalf("shutdown with a stalled client took %s: %v", took, err)
		}
		t.Logf("shutdown with a stalled client took %s", took.Round(time.Millisecond))
		if strings.Contains(fmt.Sprint(err), "deadline") {
			t.Fatal(err)
		}
	})
}
