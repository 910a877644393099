package transportplugin

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/kernelhost/kernelhost/core"
	"github.com/kernelhost/kernelhost/plugins/examples/bashtransport"
	"github.com/kernelhost/kernelhost/transports/subprocess"
)

// benchCase is one transport in one language, linked in or behind the plugin
// boundary; each benchmark runs the same code on every case.
type benchCase struct {
	name       string
	transport  func(b *testing.B) core.Transport
	lang       string
	roundTrip  string // a tiny request
	stream200k string // prints 200,000 lines
}

func launchBench(bin string) func(b *testing.B) core.Transport {
	return func(b *testing.B) core.Transport {
		s, err := Launch(context.Background(), Config{Path: bin, Logger: discardLogger()})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Close() })
		return s
	}
}

func benchCases() []benchCase {
	sub := func(*testing.B) core.Transport { return subprocess.New(subprocess.Options{}) }
	ex := func(*testing.B) core.Transport { return bashtransport.New() }
	const py, pyStream = "1+1", "for i in range(200000): print(i)"
	const sh, shStream = "echo $((1+1))", "seq 200000"
	return []benchCase{
		{"subprocess-python/inprocess", sub, "python", py, pyStream},
		{"subprocess-python/plugin", launchBench(subprocessBin), "python", py, pyStream},
		{"example-bash/inprocess", ex, "bash", sh, shStream},
		{"example-bash/plugin", launchBench(exampleBin), "bash", sh, shStream},
	}
}

func benchKernel(b *testing.B, c benchCase) core.Kernel {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	k, err := c.transport(b).StartKernel(ctx, core.KernelSpec{Language: c.lang, Cwd: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { k.Shutdown(context.Background()) })
	return k
}

// execute runs code to its status idle and returns the bytes it streamed.
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

// BenchmarkRoundTrip is one tiny execution, Execute to status idle. It
// reports the median besides Go's mean.
func BenchmarkRoundTrip(b *testing.B) {
	for _, c := range benchCases() {
		b.Run(c.name, func(b *testing.B) {
			k := benchKernel(b, c)
			execute(b, k, "warm", c.roundTrip)
			d := make([]time.Duration, 0, 1024)
			for b.Loop() {
				start := time.Now()
				execute(b, k, "rt", c.roundTrip)
				d = append(d, time.Since(start))
			}
			slices.Sort(d)
			b.ReportMetric(float64(d[len(d)/2].Nanoseconds())/1e3, "median-µs")
		})
	}
}

// BenchmarkStream200kLines streams 200,000 lines of stdout in one execution.
func BenchmarkStream200kLines(b *testing.B) {
	for _, c := range benchCases() {
		b.Run(c.name, func(b *testing.B) {
			k := benchKernel(b, c)
			want := execute(b, k, "warm", c.stream200k)
			for b.Loop() {
				if got := execute(b, k, "s", c.stream200k); got != want {
					b.Fatalf("streamed %d bytes, want %d", got, want)
				}
			}
			b.SetBytes(int64(want))
		})
	}
}
