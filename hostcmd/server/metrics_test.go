package server_test

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kernelhost/kernelhost/hostcmd/internal/hosttest"
	"github.com/kernelhost/kernelhost/hostcmd/settings"
	"github.com/kernelhost/kernelhost/internal/testkit"
)

// awaitExecutions scrapes until kernelhost_executions_total moved by want
// for every outcome: the engine reports an execution's end after its
// stream's last line (once its env vars are reset), so a scrape right after
// a stream may come first. Bounded by a deadline.
func awaitExecutions(h *hosttest.Host, t *testing.T, before hosttest.Scrape, want map[string]float64) hosttest.Scrape {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		now := hosttest.Metrics(t, h, nil)
		var wrong []string
		for _, o := range []string{"ok", "error", "timeout", "client_gone", "aborted", "rejected", "queue_full", "invalid", "unavailable"} {
			got := now.Value(t, "kernelhost_executions_total", "outcome", o) - before.Value(t, "kernelhost_executions_total", "outcome", o)
			if got != want[o] {
				wrong = append(wrong, fmt.Sprintf("%s moved by %v, want %v", o, got, want[o]))
			}
		}
		if len(wrong) == 0 {
			return now
		}
		if time.Now().After(deadline) {
			t.Fatalf("kernelhost_executions_total after 20 s: %s", strings.Join(wrong, "; "))
		}
		time.Sleep(10 * time.Millisecond) // nothing to wait on over HTTP but the next scrape
	}
}

// executeBytes runs one /execute to its end and returns the status and the
// bytes of the body as the client received them.
func executeBytes(h *hosttest.Host, t *testing.T, body string) (int, int) {
	t.Helper()
	status, text := h.Do("POST", "/execute", body)
	return status, len(text)
}

// readAll reads a stream to its end and returns all the bytes it carried.
func readAll(s *hosttest.Stream) int {
	s.Rest()
	return s.Size()
}

// Executions that succeed, raise, are refused by a policy, are malformed,
// and fill a queue move the counters, histograms and gauges by exactly what
// happened; the streamed-bytes counter equals what the client received.
func TestMetricsMove(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	mod := copyModule(t, hosttest.Denylist(t), dir, "denylist.wasm")
	// TZ is injected when a request does not set it (a rewrite); a request
	// that sets it is allowed unchanged.
	testkit.WriteFile(t, filepath.Join(dir, "denylist.config"), `{"defaults":{"TZ":"UTC"}}`)
	h := hosttest.Start(t, func(c *settings.Config) { c.Policies = mod; c.QueueDepth = 1 })

	before := hosttest.Metrics(t, h, nil)
	for _, name := range []string{"go_goroutines", "process_resident_memory_bytes"} {
		if before[name] == nil {
			t.Errorf("%s missing: the Go and process collectors are not registered", name)
		}
	}
	streamed := 0
	count := func(status, n int, want int) {
		t.Helper()
		if status != want {
			t.Fatalf("status %d, want %d", status, want)
		}
		if status == http.StatusOK {
			streamed += n
		}
	}
	s, n := executeBytes(h, t, `{"code":"1+1","env_vars":{"TZ":"Europe/Paris"}}`) // allow, ok
	count(s, n, 200)
	s, n = executeBytes(h, t, `{"code":"raise ValueError('boom')"}`) // rewrite, error
	count(s, n, 200)
	s, n = executeBytes(h, t, `{"code":"1","env_vars":{"LD_PRELOAD":"/x.so"}}`) // reject
	count(s, n, http.StatusForbidden)
	s, n = executeBytes(h, t, `{"code":`) // invalid, no policy call
	count(s, n, http.StatusUnprocessableEntity)

	// A queue of one on a new context: A runs until released, B waits, C is
	// refused (each of them a rewrite).
	c := h.CreateContext(`{}`)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	a, release := startHeld(t, h, ctx, c.ID)
	aRunning := time.Now()
	b := h.Start(ctx, map[string]any{"context_id": c.ID, "code": "print('b')"})
	bQueued := time.Now()
	during := hosttest.Metrics(t, h, nil)
	if got := during.Value(t, "kernelhost_queue_depth", "context_id", c.ID); got != 1 {
		t.Fatalf("queue depth of %s with B waiting: %v, want 1", c.ID, got)
	}
	if got, was := during.Value(t, "kernelhost_contexts"), before.Value(t, "kernelhost_contexts"); got != was+1 {
		t.Fatalf("kernelhost_contexts %v after creating one, was %v", got, was)
	}
	s, n = executeBytes(h, t, fmt.Sprintf(`{"code":"1","context_id":%q}`, c.ID))
	count(s, n, http.StatusTooManyRequests)
	released := time.Now()
	release()
	streamed += readAll(a) + readAll(b)

	after := awaitExecutions(h, t, before, map[string]float64{"ok": 3, "error": 1, "rejected": 1, "invalid": 1, "queue_full": 1})
	if got := after.Metric("kernelhost_queue_depth", "context_id", c.ID); got != nil {
		t.Errorf("queue depth series of %s with its queue empty: %v", c.ID, got)
	}
	moved := func(name string, labels ...string) float64 {
		return after.Value(t, name, labels...) - before.Value(t, name, labels...)
	}
	for decision, want := range map[string]float64{"allow": 1, "rewrite": 4, "reject": 1, "error": 0} {
		if got := moved("kernelhost_policy_decisions_total", "decision", decision); got != want {
			t.Errorf("policy decisions %q moved by %v, want %v", decision, got, want)
		}
	}
	if got := moved("kernelhost_streamed_bytes_total"); got != float64(streamed) {
		t.Errorf("kernelhost_streamed_bytes_total moved by %v, the client received %d bytes of streams", got, streamed)
	}
	histo := func(name string, wantCount uint64, minSum time.Duration) {
		t.Helper()
		c0, s0 := before.Histogram(t, name)
		c1, s1 := after.Histogram(t, name)
		if c1-c0 != wantCount || s1-s0 < minSum.Seconds() {
			t.Errorf("%s: %d samples summing %.4fs, want %d summing at least %v", name, c1-c0, s1-s0, wantCount, minSum)
		}
	}
	// Four executions ran: 1+1, the raise, A and B. B waited at least from
	// when it was queued to A's release; A held its context at least from
	// its first output to its release.
	histo("kernelhost_queue_wait_seconds", 4, released.Sub(bQueued))
	histo("kernelhost_execution_duration_seconds", 4, released.Sub(aRunning))
	histo("kernelhost_policy_evaluation_seconds", 6, 0)

	if status, body := h.Do("DELETE", "/contexts/"+c.ID, ""); status != 200 {
		t.Fatalf("DELETE %s: %d %s", c.ID, status, body)
	}
	gone := hosttest.Metrics(t, h, nil)
	if got, was := gone.Value(t, "kernelhost_contexts"), before.Value(t, "kernelhost_contexts"); got != was {
		t.Errorf("kernelhost_contexts %v after deleting the context, was %v before it", got, was)
	}
	if m := gone.Metric("kernelhost_queue_wait_seconds", "context_id", c.ID); m != nil {
		t.Errorf("queue wait series of the deleted context %s: %v", c.ID, m)
	}
	if m := gone.Metric("kernelhost_queue_depth", "context_id", c.ID); m != nil {
		t.Errorf("queue depth series of the deleted context %s: %v", c.ID, m)
	}
}

// startHeld starts python code on context id that holds it until release is
// called, and returns once the code runs (it has printed).
func startHeld(t *testing.T, h *hosttest.Host, ctx context.Context, id string) (s *hosttest.Stream, release func()) {
	t.Helper()
	flag := filepath.Join(t.TempDir(), "release")
	s = h.Start(ctx, map[string]any{"context_id": id, "code": fmt.Sprintf(
		"import os, time\nprint('go', flush=True)\nwhile not os.path.exists(%q):\n    time.sleep(0.005)", flag)})
	s.Until("stdout")
	return s, func() { testkit.WriteFile(t, flag, "") }
}

// A queued execution deleted with its context leaves no queue-depth series
// behind, though the engine reports the drained queue after the removal.
func TestMetricsQueueSeriesGoneWithContext(t *testing.T) {
	t.Parallel()
	h := hosttest.Start(t)
	c := h.CreateContext(`{}`)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	a, _ := startHeld(t, h, ctx, c.ID)
	b := h.Start(ctx, map[string]any{"context_id": c.ID, "code": "1"})
	if got := hosttest.Metrics(t, h, nil).Value(t, "kernelhost_queue_depth", "context_id", c.ID); got != 1 {
		t.Fatalf("queue depth %v, want 1", got)
	}
	if status, body := h.Do("DELETE", "/contexts/"+c.ID, ""); status != 200 {
		t.Fatalf("DELETE %s: %d %s", c.ID, status, body)
	}
	readAll(a)
	readAll(b)
	if m := hosttest.Metrics(t, h, nil).Metric("kernelhost_queue_depth", "context_id", c.ID); m != nil {
		t.Fatalf("queue depth series of the deleted context %s: %v", c.ID, m)
	}
}

// /metrics needs the access token with scope all, and never with scope
// execute (like /contexts).
func TestMetricsAccessToken(t *testing.T) {
	t.Parallel()
	const token = "metrics-tok-31c9"
	for _, tc := range []struct {
		scope         string
		withoutStatus int
	}{{settings.ScopeAll, http.StatusUnauthorized}, {settings.ScopeExecute, http.StatusOK}} {
		t.Run(tc.scope, func(t *testing.T) {
			h := hosttest.Start(t, func(c *settings.Config) { c.AccessToken = token; c.AccessTokenScope = tc.scope })
			if status, _ := tokenRequest(t, h, "GET", "/metrics", "", nil); status != tc.withoutStatus {
				t.Fatalf("GET /metrics without the token: %d, want %d", status, tc.withoutStatus)
			}
			if hosttest.Metrics(t, h, map[string]string{"Authorization": "Bearer " + token})["kernelhost_executions_total"] == nil {
				t.Fatal("GET /metrics with the token: no kernelhost_executions_total")
			}
		})
	}
}

// Without metrics the route is not there.
func TestMetricsDisabled(t *testing.T) {
	t.Parallel()
	h := hosttest.Start(t, func(c *settings.Config) { c.DisableMetrics = true })
	if status, _ := h.Do("GET", "/metrics", ""); status != http.StatusNotFound {
		t.Fatalf("GET /metrics with metrics off: %d, want 404", status)
	}
	if got := hosttest.MainResult(t, h.Run(map[string]any{"code": "1+1"})); got != "2" {
		t.Fatalf("execution with metrics off: %q", got)
	}
}

// kill -9 of the transport plugin counts one restart, once it is back.
func TestMetricsPluginRestart(t *testing.T) {
	hosttest.NoLeftovers(t)
	h := hosttest.Start(t, hosttest.ViaPlugin, hosttest.WithSmallForkTemplate) // the template goes too
	if got := hosttest.Metrics(t, h, nil).Value(t, "kernelhost_plugin_restarts_total"); got != 0 {
		t.Fatalf("restarts before any fault: %v", got)
	}
	pid := h.PluginPID()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill -9 %d: %v", pid, err)
	}
	// The counter moves once the new plugin runs (before calls reach it).
	// Executing before that could still pick the dying plugin, so the test
	// waits for the counter first, by scraping it: bounded by a deadline.
	deadline := time.Now().Add(20 * time.Second)
	for {
		got := hosttest.Metrics(t, h, nil).Value(t, "kernelhost_plugin_restarts_total")
		if got == 1 {
			break
		}
		if got > 1 || time.Now().After(deadline) {
			t.Fatalf("restarts after one kill -9: %v, want 1", got)
		}
		time.Sleep(10 * time.Millisecond) // nothing to wait on over HTTP but the next scrape
	}
	hosttest.Recovered(t, h)
	if got := hosttest.Metrics(t, h, nil).Value(t, "kernelhost_plugin_restarts_total"); got != 1 {
		t.Fatalf("restarts after recovering from one kill -9: %v, want 1", got)
	}
	testkit.AwaitGone(t, "the killed plugin", 30*time.Second, pid)
}
