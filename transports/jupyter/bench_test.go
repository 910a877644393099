package jupyter

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/gorilla/websocket"

	"github.com/kernelhost/kernelhost/core"
	"github.com/kernelhost/kernelhost/internal/testkit"
	"github.com/kernelhost/kernelhost/transports/jupyter/jupytertest"
)

// BenchmarkRoundTrip measures `1+1` from execute_request to execute_reply and
// status idle, through the transport and straight on the kernel's websocket
// (the floor), with and without re-arming TCP_QUICKACK, against one server.
// Each sub-benchmark reports its median as ms-p50.
//
//	go test ./transports/jupyter -run '^$' -bench RoundTrip -benchtime 200x
func BenchmarkRoundTrip(b *testing.B) {
	srv := jupytertest.Start(b)
	for _, bc := range []struct {
		name  string
		proto Protocol
		noAck bool
	}{
		{"transport/v1", ProtocolAuto, false},
		{"transport/json", ProtocolJSON, false},
		{"transport/json/no-quickack", ProtocolJSON, true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			tr := newTransport(b, srv, func(c *Config) { c.Protocol, c.DisableQuickAck = bc.proto, bc.noAck })
			k := startKernel(b, tr)
			run(b, k, "1+1") // warm up
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for b.Loop() {
				start := time.Now()
				run(b, k, "1+1")
				lat = append(lat, time.Since(start))
			}
			reportMedian(b, lat)
		})
	}
	for _, bc := range []struct {
		name  string
		noAck bool
	}{
		{"direct/json/quickack", false},
		{"direct/json/no-quickack", true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			tr := newTransport(b, srv, func(c *Config) { c.Protocol, c.DisableQuickAck = ProtocolJSON, bc.noAck })
			ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
			defer cancel()
			km, err := tr.c.createKernel(ctx, "python3", runTimeout)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = tr.c.deleteKernel(context.Background(), km.ID) })
			ws, err := tr.c.dialChannels(ctx, km.ID, uuid.NewString())
			if err != nil {
				b.Fatal(err)
			}
			defer ws.Close()
			directRoundTrip(b, ws) // warm up
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for b.Loop() {
				start := time.Now()
				directRoundTrip(b, ws)
				lat = append(lat, time.Since(start))
			}
			reportMedian(b, lat)
		})
	}
}

// directRoundTrip sends `1+1` on a bare JSON-frame websocket and reads until
// its reply and idle: what any client has to do at least.
func directRoundTrip(b *testing.B, ws *websocket.Conn) {
	id := uuid.NewString()
	frame, _, err := encodeExecute(false, "bench", core.ExecuteRequest{MsgID: id, Code: "1+1"})
	if err != nil {
		b.Fatal(err)
	}
	_ = ws.SetWriteDeadline(time.Now().Add(runTimeout))
	if err := ws.WriteMessage(websocket.TextMessage, frame); err != nil {
		b.Fatal(err)
	}
	_ = ws.SetReadDeadline(time.Now().Add(runTimeout))
	var reply, idle bool
	for !reply || !idle {
		typ, data, err := ws.ReadMessage()
		if err != nil {
			b.Fatal(err)
		}
		m, err := decodeFrame(false, typ == websocket.BinaryMessage, data)
		if err != nil || m.Parent.MsgID != id {
			continue
		}
		msg, ok, err := toMessage(m)
		if err != nil || !ok {
			continue
		}
		reply = reply || msg.Type == core.MsgExecuteReply
		idle = idle || (msg.Type == core.MsgStatus && msg.State == core.StateIdle)
	}
}

func reportMedian(b *testing.B, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	b.ReportMetric(float64(testkit.Quantile(lat, 0.5))/float64(time.Millisecond), "ms-p50")
}

// BenchmarkConcurrent runs 8 kernels × 50 sequential `1+1` executions at once,
// through the transport and straight on bare websockets; one op is the whole
// load, and exec/s is the throughput.
//
//	go test ./transports/jupyter -run '^$' -bench Concurrent -benchtime 3x
func BenchmarkConcurrent(b *testing.B) {
	const kernels, execs = 8, 50
	srv := jupytertest.Start(b)
	b.Run("transport", func(b *testing.B) {
		tr := newTransport(b, srv, nil)
		ks := make([]core.Kernel, kernels)
		for i := range ks {
			ks[i] = startKernel(b, tr)
		}
		took := make([][]time.Duration, kernels)
		for b.Loop() {
			if err := testkit.Concurrently(kernels, func(i int) error {
				for range execs {
					t0 := time.Now()
					if err := roundTrip(ks[i]); err != nil {
						return err
					}
					took[i] = append(took[i], time.Since(t0))
				}
				return nil
			}); err != nil {
				b.Error(err)
			}
		}
		b.ReportMetric(float64(kernels*execs*b.N)/b.Elapsed().Seconds(), "exec/s")
		reportTail(b, slices.Concat(took...))
	})
	b.Run("direct", func(b *testing.B) {
		tr := newTransport(b, srv, func(c *Config) { c.Protocol = ProtocolJSON })
		wss := make([]*websocket.Conn, kernels)
		for i := range wss {
			ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
			km, err := tr.c.createKernel(ctx, "python3", runTimeout)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = tr.c.deleteKernel(context.Background(), km.ID) })
			wss[i], err = tr.c.dialChannels(ctx, km.ID, uuid.NewString())
			cancel()
			if err != nil {
				b.Fatal(err)
			}
			defer wss[i].Close()
			directRoundTrip(b, wss[i])
		}
		took := make([][]time.Duration, kernels)
		for b.Loop() {
			if err := testkit.Concurrently(kernels, func(i int) error {
				for range execs {
					t0 := time.Now()
					directRoundTrip(b, wss[i])
					took[i] = append(took[i], time.Since(t0))
				}
				return nil
			}); err != nil {
				b.Error(err)
			}
		}
		b.ReportMetric(float64(kernels*execs*b.N)/b.Elapsed().Seconds(), "exec/s")
		reportTail(b, slices.Concat(took...))
	})
}

// reportTail reports the p50, p99 and max of round trips, in ms.
func reportTail(b *testing.B, took []time.Duration) {
	b.ReportMetric(float64(testkit.Quantile(took, 0.5).Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(testkit.Quantile(took, 0.99).Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(slices.Max(took).Microseconds())/1000, "max-ms")
}

// roundTrip runs `1+1` on k without testing.TB, for use off the test goroutine.
func roundTrip(k core.Kernel) error {
	id := uuid.NewString()
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	if err := k.Execute(ctx, core.ExecuteRequest{MsgID: id, Code: "1+1"}); err != nil {
		return err
	}
	var reply, idle bool
	for !reply || !idle {
		select {
		case m := <-k.Messages():
			if m.ParentID != id {
				return fmt.Errorf("unexpected message %+v", m)
			}
			reply = reply || m.Type == core.MsgExecuteReply
			idle = idle || (m.Type == core.MsgStatus && m.State == core.StateIdle)
		case <-ctx.Done():
			return fmt.Errorf("1+1 on a kernel: %w", ctx.Err())
		}
	}
	return nil
}
