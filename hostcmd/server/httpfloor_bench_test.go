package server_test

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/kernelhost/kernelhost/hostcmd/internal/hosttest"
	"github.com/kernelhost/kernelhost/internal/testkit"
)

// BenchmarkHTTPFloor measures the HTTP part of the floor under a `1+1`: the
// host's POST /execute (transport linked in) alternated with the same
// exchange against a bare net/http server on loopback that answers at once
// with the bytes the host answered, one flushed write per line as the host
// streams them, read by the same kind of client. What a `1+1` cannot go
// below is this bare exchange plus the interpreter's own round trip
// (BenchmarkRoundTrip's direct side); the rest is the host's.
func BenchmarkHTTPFloor(b *testing.B) {
	h := hosttest.Start(b)
	body := []byte(`{"code":"1+1"}`)
	const want = `"text":"2"`
	lines := bytes.SplitAfter(postRead(b, h.Client(), h.URL()+"/execute", body, want), []byte("\n"))

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	bare := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.Copy(io.Discard, r.Body); err != nil {
			return
		}
		w.Header().Set("Content-Type", "application/x-ndjson")
		for _, l := range lines {
			if len(l) > 0 {
				_, _ = w.Write(l)
				w.(http.Flusher).Flush()
			}
		}
	})}
	go func() { _ = bare.Serve(ln) }()
	b.Cleanup(func() { _ = bare.Close() })
	bareURL := "http://" + ln.Addr().String() + "/execute"
	client := &http.Client{Transport: &http.Transport{}}
	b.Cleanup(client.CloseIdleConnections)

	hostD, bareD := testkit.Compare(b, 20,
		testkit.Timed(func() { postExpect(b, h, body, want) }),
		testkit.Timed(func() { postRead(b, client, bareURL, body, want) }))
	testkit.ReportAdded(b, time.Nanosecond, "host", hostD, "bare-http", bareD)
}
