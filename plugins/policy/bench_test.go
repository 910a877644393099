package policy

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/tetratelabs/wazero"

	"github.com/kernelhost/kernelhost/internal/testkit"
)

// BenchmarkEvaluate measures one Chain.Evaluate of one module with pooled
// (warm) instances, with one caller and under 8 concurrent callers, and
// reports the p50 and p99 latency of a single evaluation next to the usual
// ns/op (which, under RunParallel, is wall time divided by all callers'
// operations). "allow" (testdata/allow.wat answers {} without reading its
// input) is the floor: what the host and wazero cost around any module.
func BenchmarkEvaluate(b *testing.B) {
	for _, name := range []string{"denylist", "reserved", "allow"} {
		b.Run(name+"/serial", func(b *testing.B) {
			c := load(b, Options{}, name)
			in := input(map[string]string{"APP_MODE": "fast", "TZ": "UTC", "REQUEST_TOKEN": "t-123"})
			evaluate(b, c, in.EnvVars)
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				t0 := time.Now()
				if _, err := c.Evaluate(context.Background(), in); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(t0))
			}
			b.StopTimer()
			b.ReportMetric(float64(testkit.Quantile(lat, 0.5)), "p50-ns")
			b.ReportMetric(float64(testkit.Quantile(lat, 0.99)), "p99-ns")
		})
		b.Run(name+"/8-callers", func(b *testing.B) {
			// A long deadline: this measures latency, and on a saturated
			// machine a waiting caller's wall time can pass the default.
			c := load(b, Options{MaxInstances: 8, Timeout: time.Minute}, name)
			env := map[string]string{"APP_MODE": "fast", "TZ": "UTC", "REQUEST_TOKEN": "t-123"}
			in := input(env)
			for i := 0; i < 100; i++ { // start the 8 instances and warm them
				evaluate(b, c, env)
			}
			var (
				mu  sync.Mutex
				all []time.Duration
			)
			b.SetParallelism((8 + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				ctx := context.Background()
				lat := make([]time.Duration, 0, 1024)
				for pb.Next() {
					t0 := time.Now()
					d, err := c.Evaluate(ctx, in)
					lat = append(lat, time.Since(t0))
					if err != nil || len(d.Rejections) > 0 {
						b.Errorf("Evaluate: %+v, %v", d, err)
						return
					}
				}
				mu.Lock()
				all = append(all, lat...)
				mu.Unlock()
			})
			b.StopTimer()
			b.ReportMetric(float64(c.cur.mods[0].started.Load()), "instances")
			if len(all) > 0 {
				b.ReportMetric(float64(testkit.Quantile(all, 0.5)), "p50-ns")
				b.ReportMetric(float64(testkit.Quantile(all, 0.99)), "p99-ns")
			}
		})
	}
}

// BenchmarkWazeroCall is the floor under the floor: one call of an empty
// exported function, (i32) -> i32, through CallWithStack on a warm instance,
// with the runtime built WithCloseOnContextDone (as the policy host needs, so
// that closing an instance stops a looping module) and without. With it,
// wazero starts a watcher goroutine per call even for a context that cannot
// be cancelled.
func BenchmarkWazeroCall(b *testing.B) {
	bin, err := os.ReadFile(wasmPath("allow"))
	if err != nil {
		b.Skip("allow.wasm not built:", watErr)
	}
	ctx := context.Background()
	for _, closeOnDone := range []bool{true, false} {
		b.Run(fmt.Sprintf("close-on-context-done=%v", closeOnDone), func(b *testing.B) {
			rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfig().WithCloseOnContextDone(closeOnDone))
			defer rt.Close(ctx)
			if err := instantiateHostModule(ctx, rt); err != nil {
				b.Fatal(err)
			}
			mod, err := rt.Instantiate(ctx, bin)
			if err != nil {
				b.Fatal(err)
			}
			fn := mod.ExportedFunction(evaluateExport)
			stack := make([]uint64, 1)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				stack[0] = 0
				if err := fn.CallWithStack(ctx, stack); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkCompile measures compiling the Go example module (3 MB): with no
// cache, with an in-memory cache that already holds it (what Reload sees),
// and with a warm cache directory in a fresh process-like setting (what a
// restart with Options.CacheDir sees).
func BenchmarkCompile(b *testing.B) {
	bin, err := os.ReadFile(wasmPath("denylist"))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	config := func(c wazero.CompilationCache) wazero.RuntimeConfig {
		rc := wazero.NewRuntimeConfig().WithCloseOnContextDone(true)
		if c != nil {
			rc = rc.WithCompilationCache(c)
		}
		return rc
	}
	compile := func(b *testing.B, c wazero.CompilationCache) {
		rt := wazero.NewRuntimeWithConfig(ctx, config(c))
		if _, err := rt.CompileModule(ctx, bin); err != nil {
			b.Fatal(err)
		}
		rt.Close(ctx)
	}
	b.Run("no-cache", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			compile(b, nil)
		}
	})
	b.Run("memory-cache", func(b *testing.B) {
		cache := wazero.NewCompilationCache()
		defer cache.Close(ctx)
		// A live runtime keeps the compiled code referenced, as the current
		// module set does while Reload compiles the next one.
		holder := wazero.NewRuntimeWithConfig(ctx, config(cache))
		defer holder.Close(ctx)
		if _, err := holder.CompileModule(ctx, bin); err != nil {
			b.Fatal(err)
		}
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			compile(b, cache)
		}
	})
	b.Run("dir-cache", func(b *testing.B) {
		dir := b.TempDir()
		warm, err := wazero.NewCompilationCacheWithDir(dir)
		if err != nil {
			b.Fatal(err)
		}
		compile(b, warm)
		warm.Close(ctx)
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			cache, err := wazero.NewCompilationCacheWithDir(dir)
			if err != nil {
				b.Fatal(err)
			}
			compile(b, cache)
			cache.Close(ctx)
		}
	})
}
