package subprocess

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/kernelhost/kernelhost/core"
)

// rawDriver is driver.py run over its fd-3/4 pipes without the Kernel: the
// floor the transport is measured against.
type rawDriver struct {
	reqW *os.File
	rd   *bufio.Reader
}

func startRawDriver(b *testing.B) *rawDriver {
	reqR, reqW, err := os.Pipe()
	if err != nil {
		b.Fatal(err)
	}
	msgR, msgW, err := os.Pipe()
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command("python3", "-c", driverPython)
	cmd.Dir = b.TempDir()
	cmd.ExtraFiles = []*os.File{reqR, msgW}
	cmd.Env = append(os.Environ(), "PYTHONUNBUFFERED=1")
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	reqR.Close()
	msgW.Close()
	b.Cleanup(func() { reqW.Close(); cmd.Process.Kill(); cmd.Wait(); msgR.Close() })
	d := &rawDriver{reqW: reqW, rd: bufio.NewReader(msgR)}
	if _, err := d.rd.ReadBytes('\n'); err != nil { // kh_ready
		b.Fatal(err)
	}
	return d
}

// roundTrip sends one request and reads fd 4 up to its status idle.
func (d *rawDriver) roundTrip(b *testing.B, id, code string) {
	if _, err := d.reqW.WriteString(`{"msg_id":"` + id + `","code":"` + code + `"}` + "\n"); err != nil {
		b.Fatal(err)
	}
	for {
		line, err := d.rd.ReadBytes('\n')
		if err != nil {
			b.Fatal(err)
		}
		if bytes.Contains(line, []byte(`"idle"`)) {
			return
		}
	}
}

// kernelRoundTrip sends one request through the Kernel and reads Messages up
// to its status idle.
func kernelRoundTrip(b *testing.B, k *Kernel, id, code string) {
	if err := k.Execute(context.Background(), core.ExecuteRequest{MsgID: id, Code: code}); err != nil {
		b.Fatal(err)
	}
	for m := range k.Messages() {
		if m.Type == core.MsgStatus && m.State == core.StateIdle && m.ParentID == id {
			return
		}
	}
	b.Fatal("Messages closed")
}

// quantile returns the q-quantile (0 < q < 1) of d.
func quantile(d []time.Duration, q float64) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[int(float64(len(s))*q)]
}

// BenchmarkRoundTrip runs `1+1` against driver.py directly over its pipes
// ("driver") and through the Kernel ("kernel"), alternating the two in one
// loop so both see the same machine state, and reports both medians and
// their difference, the transport's own overhead, and both 90th percentiles.
// ns/op is one pair.
func BenchmarkRoundTrip(b *testing.B) {
	d := startRawDriver(b)
	k := startKernel(b, "python", b.TempDir())
	for i := range 20 { // warm up: imports, caches, page faults
		d.roundTrip(b, "w", "1+1")
		kernelRoundTrip(b, k, "w"+strconv.Itoa(i), "1+1")
	}
	var driverD, kernelD []time.Duration
	i := 0
	for b.Loop() {
		i++
		t0 := time.Now()
		d.roundTrip(b, "b", "1+1")
		t1 := time.Now()
		kernelRoundTrip(b, k, "b"+strconv.Itoa(i), "1+1")
		t2 := time.Now()
		driverD = append(driverD, t1.Sub(t0))
		kernelD = append(kernelD, t2.Sub(t1))
	}
	pd, pk := quantile(driverD, 0.5), quantile(kernelD, 0.5)
	b.ReportMetric(float64(pd.Microseconds()), "driver-p50-µs")
	b.ReportMetric(float64(pk.Microseconds()), "kernel-p50-µs")
	b.ReportMetric(float64((pk - pd).Microseconds()), "added-p50-µs")
	b.ReportMetric(float64(quantile(driverD, 0.9).Microseconds()), "driver-p90-µs")
	b.ReportMetric(float64(quantile(kernelD, 0.9).Microseconds()), "kernel-p90-µs")
}

// BenchmarkStream200kLines prints 200,000 lines through the Kernel.
func BenchmarkStream200kLines(b *testing.B) {
	k := startKernel(b, "python", b.TempDir())
	const code = "for i in range(200000): print(i)"
	count := func(id string) int {
		if err := k.Execute(context.Background(), core.ExecuteRequest{MsgID: id, Code: code}); err != nil {
			b.Fatal(err)
		}
		n := 0
		for m := range k.Messages() {
			if m.Type == core.MsgStream {
				n += len(m.Text)
			}
			if m.Type == core.MsgStatus && m.State == core.StateIdle && m.ParentID == id {
				return n
			}
		}
		b.Fatal("Messages closed")
		return 0
	}
	want := count("warm")
	i := 0
	for b.Loop() {
		i++
		if got := count("s" + strconv.Itoa(i)); got != want {
			b.Fatalf("streamed %d bytes, want %d", got, want)
		}
	}
	b.SetBytes(int64(want))
}
