package subprocess

import (
	"context"
	"fmt"
	"os/exec"
	"testing"
	"time"

	"github.com/kernelhost/kernelhost/core/engine"
	"github.com/kernelhost/kernelhost/transports/transporttest"
)

// BenchmarkEnvVars is one execution with n env vars on a real interpreter:
// the set snippet, a trivial cell and the reset. ns/op divided by n should
// stay about flat from 1k to 10k keys (linear cost).
//
//	go test -run '^$' -bench BenchmarkEnvVars -benchtime 5x ./transports/subprocess/
func BenchmarkEnvVars(b *testing.B) {
	for _, lang := range []transporttest.LanguageSnippets{transporttest.Python(), transporttest.Bash(), transporttest.JavaScript()} {
		if _, err := exec.LookPath(map[string]string{"python": "python3", "bash": "bash", "javascript": "node"}[lang.Language]); err != nil {
			continue
		}
		for _, n := range []int{1000, 10000} {
			b.Run(fmt.Sprintf("%s/%dkeys", lang.Language, n), func(b *testing.B) {
				e, err := engine.NewEngine(engine.Config{Transport: New(Options{}), DefaultCwd: b.TempDir(), MaxEnvVars: n, MaxEnvBytes: 64 << 20})
				if err != nil {
					b.Fatal(err)
				}
				defer e.Close(context.Background())
				env := make(map[string]string, n)
				for i := 0; i < n; i++ {
					env[fmt.Sprintf("KH_BENCH_%d", i)] = fmt.Sprintf("value %d", i)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
				defer cancel()
				run := func() {
					x, err := e.Execute(ctx, engine.ExecRequest{Language: lang.Language, Code: lang.PrintEnv("KH_BENCH_7"), EnvVars: env})
					if err != nil {
						b.Fatal(err)
					}
					var outs []engine.Output
					for {
						if outs, err = x.Next(ctx, outs); err != nil {
							break
						}
					}
					for _, o := range outs {
						if o.Type == engine.OutError {
							b.Fatalf("%s: %s", o.ErrName, o.ErrValue)
						}
					}
				}
				run() // start the context
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					run()
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/key")
			})
		}
	}
}
