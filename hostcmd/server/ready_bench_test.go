package server_test

import (
	"bytes"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/kernelhost/kernelhost/hostcmd/internal/hosttest"
	"github.com/kernelhost/kernelhost/hostcmd/settings"
	"github.com/kernelhost/kernelhost/internal/testkit"
	"github.com/kernelhost/kernelhost/transports/subprocess"
)

// BenchmarkReadyContexts measures python contexts as the host makes them by
// default (issue 41): sandboxed (sandbox=auto, its own network namespace
// with pasta), forked from the template that preloaded the data stack
// (-python-preload=auto), pool python=1 ("sandboxed"), against the
// unsandboxed warm pool of bare interpreters ("bare": sandbox=off, no
// preload, pool python=1), the two hosts alternated in one run, Debian's
// python on both.
//
//   - Create: POST /contexts {"language":"python"} until its response,
//     each start waiting, untimed, until its host's pool refilled; the
//     context is deleted after, untimed.
//   - Create20: 20 POST /contexts at once, until the last response (all
//     ready), pools refilled before.
//   - RoundTrip: `1+1` in a context of each.
//   - Concurrent8x50: 8 contexts × 50 sequential `1+1` at once: exec/s and
//     the p50 and p99 of one execution, per host.
func BenchmarkReadyContexts(b *testing.B) {
	testkit.NeedPythonModules(b, testkit.DebianPython, "numpy", "pandas", "matplotlib", "IPython")
	hosttest.NeedSandbox(b)
	hosts := func(b *testing.B) (sandboxed, bare *hosttest.Host) {
		sandboxed = hosttest.Start(b, readyBenchTransport(subprocess.SandboxAuto, subprocess.DefaultPreload()))
		bare = hosttest.Start(b, readyBenchTransport(subprocess.SandboxOff, nil))
		for _, h := range []*hosttest.Host{sandboxed, bare} {
			tr := h.Engine.Transport().(*subprocess.Transport)
			b.Cleanup(func() { _ = tr.Close() })
		}
		awaitForkTemplate(b, sandboxed)
		return sandboxed, bare
	}
	b.Run("Create", func(b *testing.B) {
		sandboxed, bare := hosts(b)
		aD, cD := testkit.Compare(b, 3, createOne(b, sandboxed), createOne(b, bare))
		testkit.ReportAdded(b, time.Microsecond, "sandboxed", aD, "bare", cD)
		testkit.ReportQuantile(b, time.Microsecond, "sandboxed", aD, 0.9)
	})
	b.Run("Create20", func(b *testing.B) {
		sandboxed, bare := hosts(b)
		aD, cD := testkit.Compare(b, 1, createMany(b, sandboxed, 20), createMany(b, bare, 20))
		testkit.ReportAdded(b, time.Millisecond, "sandboxed", aD, "bare", cD)
	})
	b.Run("RoundTrip", func(b *testing.B) {
		sandboxed, bare := hosts(b)
		a, c := executeIn(sandboxed.CreateContext(`{"language":"python"}`).ID, "1+1"), executeIn(bare.CreateContext(`{"language":"python"}`).ID, "1+1")
		compareRuns(b, "sandboxed", func() { postExpect(b, sandboxed, a, `"text":"2"`) }, "bare", func() { postExpect(b, bare, c, `"text":"2"`) })
	})
	b.Run("Concurrent8x50", func(b *testing.B) {
		sandboxed, bare := hosts(b)
		var aLat, cLat []time.Duration
		var aT, cT time.Duration
		a, c := timedConcurrentRuns(b, sandboxed, 8, 50), timedConcurrentRuns(b, bare, 8, 50)
		testkit.Compare(b, 1, func() time.Duration {
			d, lat := a()
			aT, aLat = aT+d, append(aLat, lat...)
			return d
		}, func() time.Duration {
			d, lat := c()
			cT, cLat = cT+d, append(cLat, lat...)
			return d
		})
		for _, side := range []struct {
			name string
			t    time.Duration
			lat  []time.Duration
		}{{"sandboxed", aT, aLat}, {"bare", cT, cLat}} {
			b.ReportMetric(float64(len(side.lat))/side.t.Seconds(), side.name+"-exec/s")
			testkit.ReportQuantile(b, time.Microsecond, side.name, side.lat, 0.5)
			testkit.ReportQuantile(b, time.Microsecond, side.name, side.lat, 0.99)
		}
	})
}

func readyBenchTransport(mode string, preload []string) func(*settings.Config) {
	return func(c *settings.Config) {
		c.Transport = subprocess.New(subprocess.Options{
			Interpreters: map[string]string{"python": testkit.DebianPython},
			PoolSizes:    map[string]int{"python": 1},
			PoolCwd:      c.DefaultCwd,
			Preload:      preload,
			Sandbox:      subprocess.SandboxOptions{Mode: mode, Writable: []string{c.DefaultCwd}},
		})
	}
}

// createOne times one POST /contexts on h once its pool is full.
func createOne(b *testing.B, h *hosttest.Host) func() time.Duration {
	tr := h.Engine.Transport().(*subprocess.Transport)
	return func() time.Duration {
		awaitPoolReady(b, tr)
		t0 := time.Now()
		id := h.CreateContext(`{"language":"python"}`).ID
		d := time.Since(t0)
		h.Do("DELETE", "/contexts/"+id, "")
		return d
	}
}

// createMany times n POST /contexts at once on h, once its pool is full,
// until the last answered.
func createMany(b *testing.B, h *hosttest.Host, n int) func() time.Duration {
	tr := h.Engine.Transport().(*subprocess.Transport)
	return func() time.Duration {
		awaitPoolReady(b, tr)
		ids := make([]string, n)
		t0 := time.Now()
		if err := testkit.Concurrently(n, func(i int) error {
			ids[i] = h.CreateContext(`{"language":"python"}`).ID
			return nil
		}); err != nil {
			b.Fatal(err)
		}
		d := time.Since(t0)
		for _, id := range ids {
			h.Do("DELETE", "/contexts/"+id, "")
		}
		return d
	}
}

// timedConcurrentRuns creates n contexts on h and returns a run of m
// sequential `1+1` on each of them at once, which returns how long the run
// took and each execution's time.
func timedConcurrentRuns(b *testing.B, h *hosttest.Host, n, m int) func() (time.Duration, []time.Duration) {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = h.CreateContext(`{"language":"python"}`).ID
	}
	return func() (time.Duration, []time.Duration) {
		var mu sync.Mutex
		var lat []time.Duration
		t0 := time.Now()
		if err := testkit.Concurrently(n, func(i int) error {
			body := []byte(`{"code":"1+1","context_id":"` + ids[i] + `"}`)
			mine := make([]time.Duration, 0, m)
			for range m {
				s := time.Now()
				resp, err := h.Client().Post(h.URL()+"/execute", "application/json", bytes.NewReader(body))
				if err != nil {
					return err
				}
				out, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil || !bytes.Contains(out, []byte(`"text":"2"`)) {
					b.Errorf("context %s: %v %q", ids[i], err, out)
					return err
				}
				mine = append(mine, time.Since(s))
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
			return nil
		}); err != nil {
			b.Fatal(err)
		}
		d := time.Since(t0)
		if b.Failed() {
			b.FailNow()
		}
		return d, lat
	}
}
