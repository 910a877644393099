package envd_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/kernelhost/kernelhost/hostcmd/envd"
	pb "github.com/kernelhost/kernelhost/hostcmd/envd/gen/process"
	"github.com/kernelhost/kernelhost/internal/testkit"
)

// The sandbox API against a direct local baseline, side by side (docs/benchmarks.md):
//
//	go test -run '^$' -bench 'BenchmarkEnvd' -benchtime 5x ./hostcmd/envd/

// BenchmarkEnvdFiles100MB: a 100 MB upload and its download over loopback
// HTTP, against cp of the same file.
func BenchmarkEnvdFiles100MB(b *testing.B) {
	home := b.TempDir()
	srv := envd.New(envd.Config{Home: home, Writable: []string{home}}) // the default upload limit
	hs := httptest.NewServer(srv.Handler())
	b.Cleanup(hs.Close)
	data := bytes.Repeat([]byte("0123456789abcdef"), 100<<20/16)
	src := filepath.Join(b.TempDir(), "src.bin")
	if err := os.WriteFile(src, data, 0o644); err != nil {
		b.Fatal(err)
	}
	// Node's fetch, like Go's client, asks for gzip unless told otherwise.
	identity := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	var up, down, plain, cp []time.Duration
	for b.Loop() {
		start := time.Now()
		resp, err := http.Post(hs.URL+"/files?path=big.bin", "application/octet-stream", bytes.NewReader(data))
		if err != nil || resp.StatusCode != 200 {
			b.Fatalf("upload: %v %v", err, resp)
		}
		resp.Body.Close()
		up = append(up, time.Since(start))
		down = append(down, timedDownload(b, http.DefaultClient, hs.URL, len(data)))
		plain = append(plain, timedDownload(b, identity, hs.URL, len(data)))
		start = time.Now()
		if out, err := exec.Command("cp", src, filepath.Join(home, "copy.bin")).CombinedOutput(); err != nil {
			b.Fatalf("cp: %v %s", err, out)
		}
		cp = append(cp, time.Since(start))
	}
	testkit.ReportQuantile(b, time.Millisecond, "upload", up, 0.5)
	testkit.ReportQuantile(b, time.Millisecond, "download-gzip", down, 0.5)
	testkit.ReportQuantile(b, time.Millisecond, "download", plain, 0.5)
	testkit.ReportQuantile(b, time.Millisecond, "cp", cp, 0.5)
}

// timedDownload downloads big.bin with c and returns how long it took.
func timedDownload(b *testing.B, c *http.Client, url string, size int) time.Duration {
	start := time.Now()
	resp, err := c.Get(url + "/files?path=big.bin")
	if err != nil {
		b.Fatal(err)
	}
	n, _ := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if n != int64(size) {
		b.Fatalf("downloaded %d bytes", n)
	}
	return time.Since(start)
}

// BenchmarkEnvdCommandTrue: Start of /bin/true in the bubblewrap sandbox,
// through to its end event, against fork+exec of /bin/true: the sandbox
// API's own cost. (commands.run('true') runs `bash -l -c true`, whose login
// profile costs the same both ways.)
func BenchmarkEnvdCommandTrue(b *testing.B) {
	_, pc := sandboxed(b)
	ctx := context.Background()
	var viaAPI, direct []time.Duration
	for b.Loop() {
		start := time.Now()
		s, err := pc.Start(ctx, connect.NewRequest(&pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "/bin/true"}}))
		if err != nil {
			b.Fatal(err)
		}
		for s.Receive() {
		}
		s.Close()
		viaAPI = append(viaAPI, time.Since(start))
		start = time.Now()
		if err := exec.Command("/bin/true").Run(); err != nil {
			b.Fatal(err)
		}
		direct = append(direct, time.Since(start))
	}
	testkit.ReportQuantile(b, time.Millisecond, "sandbox-api", viaAPI, 0.5)
	testkit.ReportQuantile(b, time.Millisecond, "fork+exec", direct, 0.5)
}
