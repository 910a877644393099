package subprocess

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/kernelhost/kernelhost/core"
	"github.com/kernelhost/kernelhost/internal/testkit"
	tt "github.com/kernelhost/kernelhost/transports/transporttest"
)

// BenchmarkForkKernel measures ForkKernel of a python context that holds a
// 1 GB numpy array and 100,000 Python objects: from the call to a new
// context ready for requests (fork-p50-ms), and the fork's unique memory
// (USS) right after, while the source's array stays shared. Each fork is
// shut down after it is timed. Sandboxed (sandbox=auto, where bwrap works),
// the source is forked from the fork template and each copy joins its
// family (family.go); unsandboxed, it is the host's child.
//
//	go test -run '^$' -bench BenchmarkForkKernel -benchtime 20x ./transports/subprocess/
func BenchmarkForkKernel(b *testing.B) {
	forEachBenchForkMode(b, func(b *testing.B, mode string) {
		tr, src := bigForkSource(b, mode)
		ctx := context.Background()
		var times []time.Duration
		var uss int64
		for b.Loop() {
			t0 := time.Now()
			fk, err := tr.ForkKernel(ctx, src)
			if err != nil {
				b.Fatal(err)
			}
			times = append(times, time.Since(t0))
			f := fk.(*Kernel)
			uss += ProcessMemory(f.Pid()).USS
			if i := len(times); i == 1 {
				// Usable, and its array its own: a write in the fork is not seen in the source.
				kernelRoundTrip(b, f, "write", "arr[0] = 7\nassert arr[0] == 7 and len(objs) == 100000")
				kernelRoundTrip(b, src, "check", "assert arr[0] == 1")
			}
			b.StopTimer()
			f.Shutdown(context.Background())
			b.StartTimer()
		}
		testkit.ReportQuantile(b, time.Millisecond, "fork", times, 0.5)
		b.ReportMetric(float64(uss)/float64(len(times))/(1<<20), "fork-USS-MiB")
	})
}

// BenchmarkForkedCopyRoundTrip compares `1+1` in a copy of the context of
// BenchmarkForkKernel with `1+1` in its source, alternated.
func BenchmarkForkedCopyRoundTrip(b *testing.B) {
	forEachBenchForkMode(b, func(b *testing.B, mode string) {
		tr, src := bigForkSource(b, mode)
		fk, err := tr.ForkKernel(context.Background(), src)
		if err != nil {
			b.Fatal(err)
		}
		cp := fk.(*Kernel)
		b.Cleanup(func() { cp.Shutdown(context.Background()) })
		n := 0
		rt := func(k *Kernel) func() {
			return func() {
				n++
				kernelRoundTrip(b, k, "rt"+strconv.Itoa(n), "1+1")
			}
		}
		aD, cD := testkit.Compare(b, 50, testkit.Timed(rt(cp)), testkit.Timed(rt(src)))
		testkit.ReportAdded(b, time.Microsecond, "copy", aD, "source", cD)
	})
}

// forEachBenchForkMode runs bench as a sub-benchmark per sandbox mode:
// off, and auto where bwrap works.
func forEachBenchForkMode(b *testing.B, bench func(b *testing.B, mode string)) {
	testkit.NeedPythonModules(b, testkit.DebianPython, "numpy")
	for _, mode := range []string{SandboxOff, SandboxAuto} {
		b.Run("sandbox="+mode, func(b *testing.B) {
			if mode != SandboxOff {
				needSandbox(b)
			}
			bench(b, mode)
		})
	}
}

// bigForkSource is a python context holding a 1 GB numpy array and
// 100,000 Python objects, on a transport sandboxed as mode says (sandboxed,
// forked from the template, which preloads json only: numpy is the
// context's own import, as in the unsandboxed case).
func bigForkSource(b *testing.B, mode string) (*Transport, *Kernel) {
	dir := b.TempDir()
	opts := Options{Interpreters: map[string]string{"python": testkit.DebianPython}, PoolCwd: dir, Sandbox: SandboxOptions{Mode: mode, Writable: []string{dir}}}
	if mode != SandboxOff {
		opts.Preload = []string{"json"}
	}
	tr := New(opts)
	b.Cleanup(func() { _ = tr.Close() })
	if mode != SandboxOff {
		readyTemplate(b, tr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), tt.StartTimeout)
	defer cancel()
	k, err := tr.StartKernel(ctx, core.KernelSpec{Language: "python", Cwd: dir})
	if err != nil {
		b.Fatal(err)
	}
	src := k.(*Kernel)
	b.Cleanup(func() { src.Shutdown(context.Background()) })
	setup := "import numpy as np\narr = np.ones(1 << 27)\nobjs = [{'i': i, 's': str(i)} for i in range(100000)]\nprint(arr.nbytes)"
	kernelRoundTrip(b, src, "setup", setup)
	return tr, src
}

// BenchmarkForkKernelSmall is BenchmarkForkKernel of a context holding
// nothing: what a fork costs beyond copying the source's page tables.
func BenchmarkForkKernelSmall(b *testing.B) {
	tr := New(Options{Interpreters: map[string]string{"python": testkit.DebianPython}, Sandbox: SandboxOptions{Mode: SandboxOff}})
	b.Cleanup(func() { _ = tr.Close() })
	ctx := context.Background()
	k, err := tr.StartKernel(ctx, core.KernelSpec{Language: "python", Cwd: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	src := k.(*Kernel)
	b.Cleanup(func() { src.Shutdown(context.Background()) })
	kernelRoundTrip(b, src, "setup", "x = 1")
	var times []time.Duration
	for b.Loop() {
		t0 := time.Now()
		fk, err := tr.ForkKernel(ctx, src)
		if err != nil {
			b.Fatal(err)
		}
		times = append(times, time.Since(t0))
		b.StopTimer()
		fk.Shutdown(context.Background())
		b.StartTimer()
	}
	testkit.ReportQuantile(b, time.Millisecond, "fork", times, 0.5)
}

// BenchmarkForkedRoundTrip compares `1+1` in a context forked from the fork
// server's template with one in a context started cold, alternated: with
// the default preload, and with numpy and pandas only. (A context that
// imported pandas pays for it in every cell, forked or not.)
func BenchmarkForkedRoundTrip(b *testing.B) {
	testkit.NeedPythonModules(b, testkit.DebianPython, "numpy", "pandas", "matplotlib", "IPython")
	b.Run("default", func(b *testing.B) { forkedRoundTrip(b, DefaultPreload()) })
	b.Run("numpy,pandas", func(b *testing.B) { forkedRoundTrip(b, []string{"numpy", "pandas"}) })
}

func forkedRoundTrip(b *testing.B, preload []string) {
	dir := b.TempDir()
	tr := New(Options{Interpreters: map[string]string{"python": testkit.DebianPython}, Preload: preload, PoolCwd: dir, Sandbox: SandboxOptions{Mode: SandboxOff}})
	b.Cleanup(func() { _ = tr.Close() })
	readyTemplate(b, tr)
	start := func() *Kernel {
		k, err := tr.StartKernel(context.Background(), core.KernelSpec{Language: "python", Cwd: dir})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { k.Shutdown(context.Background()) })
		return k.(*Kernel)
	}
	forked := start()
	tr.forks["python"].close() // the next start is cold
	cold := start()
	if parentOf(forked.Pid()) != parentOf(cold.Pid()) || forked.Pid() == cold.Pid() {
		b.Fatal("not two interpreters")
	}
	n := 0
	rt := func(k *Kernel) func() {
		return func() {
			n++
			kernelRoundTrip(b, k, "rt"+strconv.Itoa(n), "1+1")
		}
	}
	aD, cD := testkit.Compare(b, 50, testkit.Timed(rt(forked)), testkit.Timed(rt(cold)))
	testkit.ReportAdded(b, time.Microsecond, "forked", aD, "cold", cD)
}
