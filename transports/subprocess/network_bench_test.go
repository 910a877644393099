package subprocess

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/kernelhost/kernelhost/core"
	"github.com/kernelhost/kernelhost/internal/testkit"
)

// BenchmarkContextNetwork measures what -context-network=isolated (a
// network namespace of its own, pasta attached) costs next to host (the
// host's network), each in a sandbox, the two alternated (testkit.Compare):
// a cold start (bwrap, no pool), a fork from the template (preloading
// json only), `1+1` in a forked context, and a 100 MB download over HTTP
// from a server in a network namespace the benchmark makes (testkit.Internet).
// ns/op is one pair.
//
//	go test -run '^$' -bench BenchmarkContextNetwork -benchtime 10x ./transports/subprocess/
func BenchmarkContextNetwork(b *testing.B) {
	needSandbox(b)
	pair := func(b *testing.B, preload []string) (isolated, host *Transport, dir string) {
		dir = b.TempDir()
		newTr := func(network string) *Transport {
			tr := New(Options{Interpreters: map[string]string{"python": testkit.DebianPython}, Preload: preload, PoolCwd: dir,
				Sandbox: SandboxOptions{Mode: SandboxOn, Writable: []string{dir}, Network: network}})
			b.Cleanup(func() { _ = tr.Close() })
			if preload != nil {
				readyTemplate(b, tr)
			}
			return tr
		}
		return newTr(NetworkIsolated), newTr(NetworkHost), dir
	}
	startTimed := func(b *testing.B, tr *Transport, dir string) func() time.Duration {
		return func() time.Duration {
			t0 := time.Now()
			k, err := tr.StartKernel(context.Background(), core.KernelSpec{Language: "python", Cwd: dir})
			took := time.Since(t0)
			if err != nil {
				b.Fatal(err)
			}
			k.Shutdown(context.Background())
			return took
		}
	}
	b.Run("cold-start", func(b *testing.B) {
		iso, host, dir := pair(b, nil)
		aD, cD := testkit.Compare(b, 1, startTimed(b, iso, dir), startTimed(b, host, dir))
		testkit.ReportAdded(b, time.Millisecond, "isolated", aD, "host", cD)
	})
	b.Run("fork", func(b *testing.B) {
		iso, host, dir := pair(b, []string{"json"})
		aD, cD := testkit.Compare(b, 1, startTimed(b, iso, dir), startTimed(b, host, dir))
		testkit.ReportAdded(b, time.Millisecond, "isolated", aD, "host", cD)
	})
	forked := func(b *testing.B) (iso, host *Kernel) {
		isoT, hostT, dir := pair(b, []string{"json"})
		start := func(tr *Transport) *Kernel {
			k, err := tr.StartKernel(context.Background(), core.KernelSpec{Language: "python", Cwd: dir})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { k.Shutdown(context.Background()) })
			return k.(*Kernel)
		}
		return start(isoT), start(hostT)
	}
	b.Run("1+1", func(b *testing.B) {
		iso, host := forked(b)
		n := 0
		rt := func(k *Kernel) func() {
			return func() { n++; kernelRoundTrip(b, k, "rt"+strconv.Itoa(n), "1+1") }
		}
		aD, cD := testkit.Compare(b, 20, testkit.Timed(rt(iso)), testkit.Timed(rt(host)))
		testkit.ReportAdded(b, time.Microsecond, "isolated", aD, "host", cD)
	})
	b.Run("download-100MB", func(b *testing.B) {
		url := testkit.Internet(b) + "/bytes/" + strconv.Itoa(100<<20)
		iso, host := forked(b)
		code := fmt.Sprintf(`import urllib.request
n = 0
with urllib.request.urlopen(%q, timeout=60) as r:
    while chunk := r.read(1 << 20):
        n += len(chunk)
assert n == 100 << 20, n`, url)
		n := 0
		get := func(k *Kernel) func() {
			return func() { n++; kernelRoundTrip(b, k, "dl"+strconv.Itoa(n), code) }
		}
		aD, cD := testkit.Compare(b, 1, testkit.Timed(get(iso)), testkit.Timed(get(host)))
		testkit.ReportAdded(b, time.Millisecond, "isolated", aD, "host", cD)
	})
}
