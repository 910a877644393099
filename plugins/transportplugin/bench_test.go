package transportplugin

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/kernelhost/kernelhost/core"
	"github.com/kernelhost/kernelhost/plugins/examples/bashtransport"
)

// benchTransports are the transports each benchmark compares: the same code
// linked in, and behind the plugin boundary.
func benchTransports(b *testing.B) map[string]func(b *testing.B) core.Transport {
	return map[string]func(b *testing.B) core.Transport{
		"example-bash/inprocess": func(*testing.B) core.Transport { return bashtransport.New() },
		"example-bash/plugin": func(b *testing.B) core.Transport {
			s, err := Launch(context.Background(), Config{Path: exampleBin, Logger: discardLogger()})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { s.Close() })
			return s
		},
	}
}

func benchKernel(b *testing.B, tr core.Transport, lang string) core.Kernel {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	k, err := tr.StartKernel(ctx, core.KernelSpec{Language: lang, Cwd: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { k.Shutdown(context.Background()) })
	return k
}

// execute runs code and returns the stdout bytes it streamed.
func execute(b *testing.B, k core.Kernel, id, code string) int {
	if err := k.Execute(context.Background(), core.ExecuteRequest{MsgID: id, Code: code}); err != nil {
		b.Fatal(err)
	}
	n := 0
	for m := range k.Messages() {
		if m.Type == core.MsgStream {
			n += len(m.Text)
		}
		if m.ParentID == id && m.Type == core.MsgStatus && m.State == core.StateIdle {
			return n
		}
	}
	b.Fatal("Messages closed")
	return 0
}

// BenchmarkRoundTrip is one small execution (`echo $((1+1))`), start to
// status idle. It reports the median besides Go's mean.
func BenchmarkRoundTrip(b *testing.B) {
	for _, name := range sortedKeys(benchTransports(b)) {
		b.Run(name, func(b *testing.B) {
			k := benchKernel(b, benchTransports(b)[name](b), "bash")
			execute(b, k, "warm", "echo $((1+1))")
			d := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				start := time.Now()
				execute(b, k, "rt", "echo $((1+1))")
				d = append(d, time.Since(start))
			}
			b.StopTimer()
			slices.Sort(d)
			b.ReportMetric(float64(d[len(d)/2].Microseconds()), "median-µs")
		})
	}
}

// BenchmarkStream200kLines streams 200,000 lines of stdout in one execution.
func BenchmarkStream200kLines(b *testing.B) {
	for _, name := range sortedKeys(benchTransports(b)) {
		b.Run(name, func(b *testing.B) {
			k := benchKernel(b, benchTransports(b)[name](b), "bash")
			want := execute(b, k, "warm", "seq 200000")
			for b.Loop() {
				if got := execute(b, k, "s", "seq 200000"); got != want {
					b.Fatalf("streamed %d bytes, want %d", got, want)
				}
			}
			b.SetBytes(int64(want))
		})
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
