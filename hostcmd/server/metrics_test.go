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

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/kernelhost/kernelhost/hostcmd/settings"
	"github.com/kernelhost/kernelhost/internal/testkit"
)

// scrape is one parsed GET /metrics.
type scrape map[string]*dto.MetricFamily

// scrapeMetrics fetches /metrics over HTTP (with headers) and parses the
// Prometheus text format.
func (h *testHost) scrapeMetrics(t *testing.T, headers map[string]string) scrape {
	t.Helper()
	status, _, body := h.doWith("GET", "/metrics", "", headers)
	if status != http.StatusOK {
		t.Fatalf("GET /metrics: status %d", status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("GET /metrics: parse: %v", err)
	}
	return fams
}

// metric finds the series of name whose labels are label=value pairs; nil
// when there is none.
func (s scrape) metric(name string, labels ...string) *dto.Metric {
	f := s[name]
	if f == nil {
		return nil
	}
next:
	for _, m := range f.GetMetric() {
		for i := 0; i+1 < len(labels); i += 2 {
			found := false
			for _, lp := range m.GetLabel() {
				found = found || lp.GetName() == labels[i] && lp.GetValue() == labels[i+1]
			}
			if !found {
				continue next
			}
		}
		return m
	}
	return nil
}

// value is a counter's or gauge's value, failing when the series is missing.
func (s scrape) value(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	m := s.metric(name, labels...)
	switch {
	case m == nil:
		t.Fatalf("no series %s%v in the scrape", name, labels)
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	}
	t.Fatalf("%s%v is neither a counter nor a gauge", name, labels)
	return 0
}

// histogram is a histogram's sample count and sum over all its series
// (0 when it has none yet: a per-context histogram before its first sample).
func (s scrape) histogram(t *testing.T, name string) (count uint64, sum float64) {
	t.Helper()
	for _, m := range s[name].GetMetric() {
		if m.Histogram == nil {
			t.Fatalf("%s is not a histogram", name)
		}
		count += m.Histogram.GetSampleCount()
		sum += m.Histogram.GetSampleSum()
	}
	return count, sum
}

// awaitExecutions scrapes until kernelhost_executions_total moved by want
// for every outcome: the engine reports an execution's end after its
// stream's last line (once its env vars are reset), so a scrape right after
// a stream may come first. Bounded by a deadline.
func (h *testHost) awaitExecutions(t *testing.T, before scrape, want map[string]float64) scrape {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		now := h.scrapeMetrics(t, nil)
		var wrong []string
		for _, o := range []string{"ok", "error", "timeout", "client_gone", "aborted", "rejected", "queue_full", "invalid", "unavailable"} {
			got := now.value(t, "kernelhost_executions_total", "outcome", o) - before.value(t, "kernelhost_executions_total", "outcome", o)
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
func (h *testHost) executeBytes(t *testing.T, body string) (int, int) {
	t.Helper()
	status, text := h.do("POST", "/execute", body)
	return status, len(text)
}

// readAll reads a stream to its end and returns all the bytes it carried.
func readAll(s *stream) int {
	s.rest()
	return s.size
}

// Executions that succeed, raise, are refused by a policy, are malformed,
// and fill a queue move the counters, histograms and gauges by exactly what
// happened; the streamed-bytes counter equals what the client received.
func TestMetricsMove(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	mod := copyModule(t, denylist, dir, "denylist.wasm")
	// TZ is injected when a request does not set it (a rewrite); a request
	// that sets it is allowed unchanged.
	testkit.WriteFile(t, filepath.Join(dir, "denylist.config"), `{"defaults":{"TZ":"UTC"}}`)
	h := startHost(t, func(c *settings.Config) { c.Policies = mod; c.QueueDepth = 1 })

	before := h.scrapeMetrics(t, nil)
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
	s, n := h.executeBytes(t, `{"code":"1+1","env_vars":{"TZ":"Europe/Paris"}}`) // allow, ok
	count(s, n, 200)
	s, n = h.executeBytes(t, `{"code":"raise ValueError('boom')"}`) // rewrite, error
	count(s, n, 200)
	s, n = h.executeBytes(t, `{"code":"1","env_vars":{"LD_PRELOAD":"/x.so"}}`) // reject
	count(s, n, http.StatusForbidden)
	s, n = h.executeBytes(t, `{"code":`) // invalid, no policy call
	count(s, n, http.StatusUnprocessableEntity)

	// A queue of one on a new context: A runs until released, B waits, C is
	// refused (each of them a rewrite).
	c := h.createContext(`{}`)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	a, release := startHeld(t, h, ctx, c.ID)
	aRunning := time.Now()
	b := h.start(ctx, map[string]any{"context_id": c.ID, "code": "print('b')"})
	bQueued := time.Now()
	during := h.scrapeMetrics(t, nil)
	if got := during.value(t, "kernelhost_queue_depth", "context_id", c.ID); got != 1 {
		t.Fatalf("queue depth of %s with B waiting: %v, want 1", c.ID, got)
	}
	if got, was := during.value(t, "kernelhost_contexts"), before.value(t, "kernelhost_contexts"); got != was+1 {
		t.Fatalf("kernelhost_contexts %v after creating one, was %v", got, was)
	}
	s, n = h.executeBytes(t, fmt.Sprintf(`{"code":"1","context_id":%q}`, c.ID))
	count(s, n, http.StatusTooManyRequests)
	released := time.Now()
	release()
	streamed += readAll(a) + readAll(b)

	after := h.awaitExecutions(t, before, map[string]float64{"ok": 3, "error": 1, "rejected": 1, "invalid": 1, "queue_full": 1})
	if got := after.metric("kernelhost_queue_depth", "context_id", c.ID); got != nil {
		t.Errorf("queue depth series of %s with its queue empty: %v", c.ID, got)
	}
	moved := func(name string, labels ...string) float64 {
		return after.value(t, name, labels...) - before.value(t, name, labels...)
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
		c0, s0 := before.histogram(t, name)
		c1, s1 := after.histogram(t, name)
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

	if status, body := h.do("DELETE", "/contexts/"+c.ID, ""); status != 200 {
		t.Fatalf("DELETE %s: %d %s", c.ID, status, body)
	}
	gone := h.scrapeMetrics(t, nil)
	if got, was := gone.value(t, "kernelhost_contexts"), before.value(t, "kernelhost_contexts"); got != was {
		t.Errorf("kernelhost_contexts %v after deleting the context, was %v before it", got, was)
	}
	if m := gone.metric("kernelhost_queue_wait_seconds", "context_id", c.ID); m != nil {
		t.Errorf("queue wait series of the deleted context %s: %v", c.ID, m)
	}
	if m := gone.metric("kernelhost_queue_depth", "context_id", c.ID); m != nil {
		t.Errorf("queue depth series of the deleted context %s: %v", c.ID, m)
	}
}

// startHeld starts python code on context id that holds it until release is
// called, and returns once the code runs (it has printed).
func startHeld(t *testing.T, h *testHost, ctx context.Context, id string) (s *stream, release func()) {
	t.Helper()
	flag := filepath.Join(t.TempDir(), "release")
	s = h.start(ctx, map[string]any{"context_id": id, "code": fmt.Sprintf(
		"import os, time\nprint('go', flush=True)\nwhile not os.path.exists(%q):\n    time.sleep(0.005)", flag)})
	s.until("stdout")
	return s, func() { testkit.WriteFile(t, flag, "") }
}

// A queued execution deleted with its context leaves no queue-depth series
// behind, though the engine reports the drained queue after the removal.
func TestMetricsQueueSeriesGoneWithContext(t *testing.T) {
	t.Parallel()
	h := startHost(t)
	c := h.createContext(`{}`)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	a, _ := startHeld(t, h, ctx, c.ID)
	b := h.start(ctx, map[string]any{"context_id": c.ID, "code": "1"})
	if got := h.scrapeMetrics(t, nil).value(t, "kernelhost_queue_depth", "context_id", c.ID); got != 1 {
		t.Fatalf("queue depth %v, want 1", got)
	}
	if status, body := h.do("DELETE", "/contexts/"+c.ID, ""); status != 200 {
		t.Fatalf("DELETE %s: %d %s", c.ID, status, body)
	}
	readAll(a)
	readAll(b)
	if m := h.scrapeMetrics(t, nil).metric("kernelhost_queue_depth", "context_id", c.ID); m != nil {
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
			h := startHost(t, func(c *settings.Config) { c.AccessToken = token; c.AccessTokenScope = tc.scope })
			if status, _ := tokenRequest(t, h, "GET", "/metrics", "", nil); status != tc.withoutStatus {
				t.Fatalf("GET /metrics without the token: %d, want %d", status, tc.withoutStatus)
			}
			if h.scrapeMetrics(t, map[string]string{"Authorization": "Bearer " + token})["kernelhost_executions_total"] == nil {
				t.Fatal("GET /metrics with the token: no kernelhost_executions_total")
			}
		})
	}
}

// Without metrics the route is not there.
func TestMetricsDisabled(t *testing.T) {
	t.Parallel()
	h := startHost(t, func(c *settings.Config) { c.DisableMetrics = true })
	if status, _ := h.do("GET", "/metrics", ""); status != http.StatusNotFound {
		t.Fatalf("GET /metrics with metrics off: %d, want 404", status)
	}
	if got := mainResult(t, h.run(map[string]any{"code": "1+1"})); got != "2" {
		t.Fatalf("execution with metrics off: %q", got)
	}
}

// kill -9 of the transport plugin counts one restart, once it is back.
func TestMetricsPluginRestart(t *testing.T) {
	faultTest(t)
	h := startHost(t, viaPlugin)
	if got := h.scrapeMetrics(t, nil).value(t, "kernelhost_plugin_restarts_total"); got != 0 {
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
		got := h.scrapeMetrics(t, nil).value(t, "kernelhost_plugin_restarts_total")
		if got == 1 {
			break
		}
		if got > 1 || time.Now().After(deadline) {
			t.Fatalf("restarts after one kill -9: %v, want 1", got)
		}
		time.Sleep(10 * time.Millisecond) // nothing to wait on over HTTP but the next scrape
	}
	h.recovered(t)
	if got := h.scrapeMetrics(t, nil).value(t, "kernelhost_plugin_restarts_total"); got != 1 {
		t.Fatalf("restarts after recovering from one kill -9: %v, want 1", got)
	}
	testkit.AwaitGone(t, "the killed plugin", 5*time.Second, pid)
}
