package engine

import (
	"context"
	"testing"
)

// BenchmarkEngineRoundTrip is the engine's own cost of one execution, with
// no interpreter and no HTTP: Execute, the context's loop, the request on
// the fake kernel, routing, the stream read to its end. The Env case adds
// the set and reset helper requests around the code. In the Paced case the
// kernel emits each message only once the one before it was taken, as a
// real kernel's come apart, so each makes its own way through the engine
// (its goroutine hand-offs per message show in a -trace).
func BenchmarkEngineRoundTrip(b *testing.B) {
	for _, bc := range []struct {
		name  string
		env   map[string]string
		paced bool
	}{
		{"Plain", nil, false},
		{"Env", map[string]string{"A": "1", "B": "2"}, false},
		{"Paced", nil, true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			e, err := NewEngine(Config{Transport: &fakeTransport{paced: bc.paced}, DefaultCwd: "/home/user"})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = e.Close(context.Background()) })
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				x, err := e.Execute(ctx, ExecRequest{Code: "print 2", EnvVars: bc.env})
				if err != nil {
					b.Fatal(err)
				}
				for err == nil {
					_, err = x.Next(ctx, nil)
				}
			}
		})
	}
}
