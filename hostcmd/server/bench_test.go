package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/kernelhost/kernelhost/core"
	"github.com/kernelhost/kernelhost/hostcmd/internal/hosttest"
	"github.com/kernelhost/kernelhost/hostcmd/settings"
	"github.com/kernelhost/kernelhost/internal/testkit"
	"github.com/kernelhost/kernelhost/transports/subprocess"
)

// BenchmarkRoundTrip measures `1+1` through the host over HTTP and the same
// request straight to a kernel of the same transport (the interpreter driver,
// no engine, no HTTP), alternating the two in one loop so both see the same
// machine state. It reports the medians of both and their difference: what
// the host adds. ns/op is the time of one pair.
func BenchmarkRoundTrip(b *testing.B) {
	h := hosttest.Start(b)
	tr := subprocess.New(subprocess.Options{Interpreters: map[string]string{"python": "python3", "node": "node", "bash": "bash"}})
	ctx := context.Background()
	k, err := tr.StartKernel(ctx, core.KernelSpec{Language: "python", Cwd: h.Cwd()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = k.Shutdown(context.Background()) })

	body := []byte(`{"code":"1+1"}`)
	hostOnce := func() {
		resp, err := h.Client().Post(h.URL()+"/execute", "application/json", bytes.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		out, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || !bytes.Contains(out, []byte(`"text":"2"`)) || !bytes.HasSuffix(out, []byte("{\"type\":\"end_of_execution\"}\n")) {
			b.Fatalf("host: %v %q", err, out)
		}
	}
	directOnce := func() {
		id := uuid.NewString()
		if err := k.Execute(ctx, core.ExecuteRequest{MsgID: id, Code: "1+1"}); err != nil {
			b.Fatal(err)
		}
		var reply, idle, result bool
		timeout := time.After(30 * time.Second)
		for !reply || !idle {
			select {
			case m, ok := <-k.Messages():
				if !ok {
					b.Fatal("kernel messages closed")
				}
				if m.ParentID != id {
					continue
				}
				switch {
				case m.Type == core.MsgExecuteReply:
					reply = true
				case m.Type == core.MsgStatus && m.State == core.StateIdle:
					idle = true
				case m.Type == core.MsgExecuteResult:
					result = string(m.Data["text/plain"]) == `"2"`
				}
			case <-timeout:
				b.Fatal("direct: no reply within 30s")
			}
		}
		if !result {
			b.Fatal("direct: no result 2")
		}
	}
	// 20 pairs first warm up both paths (connection, imports, caches)
	hostD, directD := testkit.Compare(b, 20, testkit.Timed(hostOnce), testkit.Timed(directOnce))
	testkit.ReportAdded(b, time.Nanosecond, "host", hostD, "direct", directD)
}

// BenchmarkRoundTripMetrics measures what the metrics cost on the hot path:
// `1+1` over HTTP on a host with metrics (the default) and on one without
// (settings.Config.DisableMetrics). It reports both medians and their difference.
func BenchmarkRoundTripMetrics(b *testing.B) {
	compareRoundTrips(b,
		"metrics", hosttest.Start(b),
		"no-metrics", hosttest.Start(b, func(c *settings.Config) { c.DisableMetrics = true }))
}

// BenchmarkRoundTripPlugin measures what the plugin boundary adds to an
// execution as a client sees it: `1+1` over HTTP on a host whose subprocess
// transport runs in a plugin process (as `kernelhost serve` runs it) and on
// one with the same transport linked in. It reports both medians and their
// difference.
func BenchmarkRoundTripPlugin(b *testing.B) {
	compareRoundTrips(b, "plugin", hosttest.Start(b, hosttest.ViaPlugin), "in-process", hosttest.Start(b, hosttest.InProcess))
}

// compareRoundTrips runs `1+1` over HTTP on hosts a and c, alternating the
// two in one loop so both see the same machine state, and reports the
// median of each (NAME-p50-ns) and a's minus c's (added-p50-ns). ns/op is
// one pair.
func compareRoundTrips(b *testing.B, aName string, a *hosttest.Host, cName string, c *hosttest.Host) {
	body := []byte(`{"code":"1+1"}`)
	compareRuns(b, aName, func() { postExpect(b, a, body, `"text":"2"`) }, cName, func() { postExpect(b, c, body, `"text":"2"`) })
}

// postExpect runs body's /execute on h and fails unless the stream holds want.
func postExpect(b *testing.B, h *hosttest.Host, body []byte, want string) {
	postRead(b, h.Client(), h.URL()+"/execute", body, want)
}

// postRead posts body to url with c, reads the whole answer and fails unless
// it holds want; it returns the answer.
func postRead(b *testing.B, c *http.Client, url string, body []byte, want string) []byte {
	resp, err := c.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		b.Fatal(err)
	}
	out, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || !bytes.Contains(out, []byte(want)) {
		b.Fatalf("%s: %v %q, want %s", url, err, out, want)
	}
	return out
}

// compareRuns times a and c alternately (either first every other time)
// after a warm-up, and reports the median of each (NAME-p50-ns) and a's
// minus c's (added-p50-ns). ns/op is one pair.
func compareRuns(b *testing.B, aName string, a func(), cName string, c func()) {
	aD, cD := testkit.Compare(b, 20, testkit.Timed(a), testkit.Timed(c))
	testkit.ReportAdded(b, time.Nanosecond, aName, aD, cName, cD)
}

// BenchmarkRoundTripTypeScript measures what a typescript cell costs over
// javascript as a client sees it, on one host: `1+1` in each language, and
// a typed cell against the same cell written in javascript. typescript's
// extra is the host's esbuild transform and the source map sent along.
func BenchmarkRoundTripTypeScript(b *testing.B) {
	h := hosttest.Start(b)
	for _, c := range []struct{ name, ts, js, want string }{
		{"1+1", "1+1", "1+1", `"text":"2"`},
		{"typed-cell",
			"interface P { x: number; y: number }\nfunction norm(p: P): number {\n  return Math.sqrt(p.x * p.x + p.y * p.y)\n}\nvar p: P = { x: 3, y: 4 }\nnorm(p)",
			"function norm(p) {\n  return Math.sqrt(p.x * p.x + p.y * p.y)\n}\nvar p = { x: 3, y: 4 }\nnorm(p)",
			`"text":"5"`},
	} {
		b.Run(c.name, func(b *testing.B) {
			ts, _ := json.Marshal(map[string]string{"code": c.ts, "language": "typescript"})
			js, _ := json.Marshal(map[string]string{"code": c.js, "language": "javascript"})
			compareRuns(b, "typescript", func() { postExpect(b, h, ts, c.want) }, "javascript", func() { postExpect(b, h, js, c.want) })
		})
	}
}

// BenchmarkStream200kLines streams a 200,000-line print through the host and
// decodes every NDJSON line at the client ("host"), and, for comparison, reads
// the same print straight from a kernel of the transport ("direct"). It
// reports lines/s at the client and the peak RSS of the process (host and
// client share it: they run in-process; the interpreter is not included).
func BenchmarkStream200kLines(b *testing.B) {
	const n = 200_000
	code := "for i in range(" + strconv.Itoa(n) + "):\n    print(i)"
	b.Run("host", func(b *testing.B) {
		h := hosttest.Start(b)
		body, _ := json.Marshal(map[string]string{"code": code})
		b.ResetTimer()
		start := time.Now()
		for range b.N {
			if lines := postCountLines(b, h, body); lines != n {
				b.Fatalf("got %d lines, want %d", lines, n)
			}
		}
		report(b, n, time.Since(start))
	})
	b.Run("direct", func(b *testing.B) {
		tr := subprocess.New(subprocess.Options{Interpreters: map[string]string{"python": "python3", "node": "node", "bash": "bash"}})
		k, err := tr.StartKernel(context.Background(), core.KernelSpec{Language: "python", Cwd: b.TempDir()})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = k.Shutdown(context.Background()) })
		b.ResetTimer()
		start := time.Now()
		for range b.N {
			id := uuid.NewString()
			if err := k.Execute(context.Background(), core.ExecuteRequest{MsgID: id, Code: code}); err != nil {
				b.Fatal(err)
			}
			lines := 0
			for idle := false; !idle; {
				m := <-k.Messages()
				if m.ParentID != id {
					continue
				}
				lines += strings.Count(m.Text, "\n")
				idle = m.Type == core.MsgStatus && m.State == core.StateIdle
			}
			if lines != n {
				b.Fatalf("got %d lines, want %d", lines, n)
			}
		}
		report(b, n, time.Since(start))
	})
}

func report(b *testing.B, n int, elapsed time.Duration) {
	b.StopTimer()
	b.ReportMetric(float64(n*b.N)/elapsed.Seconds(), "lines/s")
	if hwm, err := testkit.StatusBytes(0, "VmHWM"); err == nil && hwm > 0 {
		b.ReportMetric(float64(hwm)/(1<<20), "peak-RSS-MiB")
	}
}

// BenchmarkPoolCost checks that a warm pool of interpreters (default python=1,
// javascript=1) slows nothing down while it waits: `1+1` over HTTP, and 8
// contexts × 50 sequential `1+1` at once, on a host whose transport keeps
// pools and on one without, alternated (see compareRuns).
func BenchmarkPoolCost(b *testing.B) {
	pooled := func(c *settings.Config) {
		c.Transport = subprocess.New(subprocess.Options{PoolSizes: map[string]int{"python": 1, "javascript": 1}, PoolCwd: c.DefaultCwd})
	}
	closePool := func(h *hosttest.Host) {
		b.Cleanup(func() { _ = h.Engine.Transport().(*subprocess.Transport).Close() })
	}
	b.Run("RoundTrip", func(b *testing.B) {
		a, c := hosttest.Start(b, pooled), hosttest.Start(b, hosttest.InProcess)
		closePool(a)
		compareRoundTrips(b, "pool", a, "no-pool", c)
	})
	b.Run("Concurrent8x50", func(b *testing.B) {
		a, c := hosttest.Start(b, pooled), hosttest.Start(b, hosttest.InProcess)
		closePool(a)
		compareRuns(b, "pool", concurrentRuns(b, a, 8, 50), "no-pool", concurrentRuns(b, c, 8, 50))
	})
}

// concurrentRuns creates n contexts on h and returns a run of m sequential
// `1+1` on each of them at once.
func concurrentRuns(b *testing.B, h *hosttest.Host, n, m int) func() {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = h.CreateContext(`{"language":"python"}`).ID
	}
	return func() {
		var wg sync.WaitGroup
		for _, id := range ids {
			wg.Add(1)
			go func() {
				defer wg.Done()
				body := []byte(`{"code":"1+1","context_id":"` + id + `"}`)
				for range m {
					resp, err := h.Client().Post(h.URL()+"/execute", "application/json", bytes.NewReader(body))
					if err != nil {
						b.Error(err)
						return
					}
					out, err := io.ReadAll(resp.Body)
					resp.Body.Close()
					if err != nil || !bytes.Contains(out, []byte(`"text":"2"`)) {
						b.Errorf("context %s: %v %q", id, err, out)
						return
					}
				}
			}()
		}
		wg.Wait()
		if b.Failed() {
			b.FailNow()
		}
	}
}
