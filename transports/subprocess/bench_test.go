package subprocess

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/kernelhost/kernelhost/core"
	"github.com/kernelhost/kernelhost/internal/testkit"
	"github.com/kernelhost/kernelhost/transports/subprocess/internal/sandbox"
)

// rawDriver is driver.py run over its pipes without the Kernel (requests on
// fd 3, messages framed in fd 1): the floor the transport is measured against.
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
	holdR, holdW, err := os.Pipe() // fd 4: held open by the driver, never written
	if err != nil {
		b.Fatal(err)
	}
	cmd.ExtraFiles = []*os.File{reqR, holdW}
	cmd.Stdout = msgW
	cmd.Env = append(os.Environ(), "PYTHONUNBUFFERED=1")
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	reqR.Close()
	msgW.Close()
	holdW.Close()
	b.Cleanup(func() {
		reqW.Close()
		cmd.Process.Kill()
		cmd.Wait()
		msgR.Close()
		holdR.Close()
	})
	d := &rawDriver{reqW: reqW, rd: bufio.NewReader(msgR)}
	if _, err := d.rd.ReadBytes('\n'); err != nil { // kh_ready
		b.Fatal(err)
	}
	return d
}

// roundTrip sends one request and reads fd 1 up to its status idle (each
// frame holds whole JSON lines).
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
		if m.Type == core.MsgError && m.ParentID == id {
			b.Fatalf("%s failed: %s: %s", code, m.EName, m.EValue)
		}
		if m.Type == core.MsgStatus && m.State == core.StateIdle && m.ParentID == id {
			return
		}
	}
	b.Fatal("Messages closed")
}

// BenchmarkRoundTrip runs `1+1` against driver.py directly over its pipes
// ("driver") and through the Kernel ("kernel"), alternating the two in one
// loop so both see the same machine state, and reports both medians and
// their difference, the transport's own overhead, and both 90th percentiles.
// ns/op is one pair.
func BenchmarkRoundTrip(b *testing.B) {
	d := startRawDriver(b)
	k := startKernel(b, "python", b.TempDir())
	n := 0 // each kernel request gets an id of its own
	driver := testkit.Timed(func() { d.roundTrip(b, "b", "1+1") })
	kernel := testkit.Timed(func() { n++; kernelRoundTrip(b, k, "b"+strconv.Itoa(n), "1+1") })
	// 20 pairs first warm up imports, caches and page faults.
	driverD, kernelD := testkit.Compare(b, 20, driver, kernel)
	testkit.ReportAdded(b, time.Microsecond, "kernel", kernelD, "driver", driverD)
	testkit.ReportQuantile(b, time.Microsecond, "driver", driverD, 0.9)
	testkit.ReportQuantile(b, time.Microsecond, "kernel", kernelD, 0.9)
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

// typedCell is a typical typescript cell: an interface, a typed function, a
// generic, a call. typedCellJS is the same without types.
const (
	typedCell = "interface Point { x: number; y: number }\n" +
		"function norm(p: Point): number {\n  return Math.sqrt(p.x * p.x + p.y * p.y)\n}\n" +
		"function first<T>(xs: T[]): T | undefined {\n  return xs[0]\n}\n" +
		"var pts: Point[] = [{ x: 3, y: 4 }, { x: 1, y: 1 }]\n" +
		"norm(first(pts) as Point)"
	typedCellJS = "function norm(p) {\n  return Math.sqrt(p.x * p.x + p.y * p.y)\n}\n" +
		"function first(xs) {\n  return xs[0]\n}\n" +
		"var pts = [{ x: 3, y: 4 }, { x: 1, y: 1 }]\n" +
		"norm(first(pts))"
)

// BenchmarkNodeRoundTrip runs a cell through a javascript and a typescript
// Kernel, alternating the two in one loop so both see the same machine
// state, and reports both medians and what typescript adds (the transform,
// the source map sent along): `1+1` in both, and a typed cell against the
// same cell written in javascript. ns/op is one pair.
func BenchmarkNodeRoundTrip(b *testing.B) {
	if _, ok := New(Options{}).langs["javascript"]; !ok {
		b.Skip("node is not on PATH")
	}
	for _, c := range []struct{ name, js, ts string }{
		{"1+1", "1+1", "1+1"},
		{"typed-cell", typedCellJS, typedCell},
	} {
		b.Run(c.name, func(b *testing.B) {
			js := startKernel(b, "javascript", b.TempDir())
			ts := startKernel(b, "typescript", b.TempDir())
			n := 0 // each request gets an id of its own
			roundTrip := func(k *Kernel, code string) func() time.Duration {
				return testkit.Timed(func() { n++; kernelRoundTrip(b, k, "b"+strconv.Itoa(n), code) })
			}
			tsD, jsD := testkit.Compare(b, 20, roundTrip(ts, c.ts), roundTrip(js, c.js))
			testkit.ReportAdded(b, time.Microsecond, "typescript", tsD, "javascript", jsD)
		})
	}
}

// BenchmarkKernelStart starts a kernel of each installed language, runs
// its first cell (jshell compiles its first snippet slowly), and reports the
// median time to ready ("start-ms"), to the end of the first cell
// ("first-cell-ms") and the resident memory of the whole process group once
// idle ("idle-rss-MB"). ns/op is one start, cell and shutdown.
func BenchmarkKernelStart(b *testing.B) {
	firstCell := map[string]string{"python": "1+1", "bash": "true", "javascript": "1+1", "r": "1+1", "java": "1+1"}
	tr := New(Options{})
	for _, lang := range tr.Info().Languages {
		b.Run(lang, func(b *testing.B) {
			var starts, cells []time.Duration
			var rss []float64
			for i := 0; i < b.N; i++ {
				t0 := time.Now()
				k, err := tr.StartKernel(context.Background(), core.KernelSpec{Language: lang, Cwd: b.TempDir()})
				if err != nil {
					b.Fatal(err)
				}
				starts = append(starts, time.Since(t0))
				kernelRoundTrip(b, k.(*Kernel), "first", firstCell[lang])
				cells = append(cells, time.Since(t0))
				rss = append(rss, groupRSSMB(k.(*Kernel).Pid()))
				k.Shutdown(context.Background())
				for range k.Messages() {
				}
			}
			slices.Sort(rss)
			b.ReportMetric(float64(testkit.Quantile(starts, 0.5))/1e6, "start-ms")
			b.ReportMetric(float64(testkit.Quantile(cells, 0.5))/1e6, "first-cell-ms")
			b.ReportMetric(rss[len(rss)/2], "idle-rss-MB")
		})
	}
}

// groupRSSMB sums VmRSS over the processes of process group pgid.
func groupRSSMB(pgid int) float64 {
	entries, _ := os.ReadDir("/proc")
	var total int64
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if g, err := syscall.Getpgid(pid); err != nil || g != pgid {
			continue
		}
		if rss, err := testkit.StatusBytes(pid, "VmRSS"); err == nil {
			total += rss
		}
	}
	return float64(total) / (1 << 20)
}

// BenchmarkSandboxCost compares python kernels with sandboxes on and off,
// alternated in one loop so both see the same machine state: a cold start
// (to ready), a start from a warm pool (a ready interpreter waits in each
// before each timed start), `1+1`, and the idle resident memory of one
// kernel with all its processes (bwrap and its init included). ns/op is one
// pair.
func BenchmarkSandboxCost(b *testing.B) {
	if _, err := sandbox.Works(); err != nil {
		b.Skip(err)
	}
	modes := map[string]SandboxOptions{"on": {Mode: SandboxOn}, "off": {Mode: SandboxOff}}
	cwd := b.TempDir()
	start := func(tr *Transport) *Kernel {
		k, err := tr.StartKernel(context.Background(), core.KernelSpec{Language: "python", Cwd: cwd})
		if err != nil {
			b.Fatal(err)
		}
		return k.(*Kernel)
	}
	stop := func(k *Kernel) {
		k.Shutdown(context.Background())
		for range k.Messages() {
		}
	}
	b.Run("cold", func(b *testing.B) {
		on, off := New(Options{Sandbox: modes["on"]}), New(Options{Sandbox: modes["off"]})
		timed := func(tr *Transport) func() time.Duration {
			return func() time.Duration {
				t0 := time.Now()
				k := start(tr)
				d := time.Since(t0)
				stop(k)
				return d
			}
		}
		onD, offD := testkit.Compare(b, 2, timed(on), timed(off))
		testkit.ReportAdded(b, time.Millisecond, "on", onD, "off", offD)
	})
	b.Run("pooled", func(b *testing.B) {
		trs := map[string]*Transport{}
		for name, sb := range modes {
			trs[name] = New(Options{Sandbox: sb, PoolSizes: map[string]int{"python": 1}, PoolCwd: cwd})
			defer trs[name].Close()
		}
		timed := func(tr *Transport) func() time.Duration {
			return func() time.Duration {
				readyPid(b, tr, "python")
				t0 := time.Now()
				k := start(tr)
				d := time.Since(t0)
				stop(k)
				return d
			}
		}
		onD, offD := testkit.Compare(b, 2, timed(trs["on"]), timed(trs["off"]))
		testkit.ReportAdded(b, time.Microsecond, "on", onD, "off", offD)
	})
	b.Run("1+1", func(b *testing.B) {
		kOn, kOff := start(New(Options{Sandbox: modes["on"]})), start(New(Options{Sandbox: modes["off"]}))
		defer stop(kOn)
		defer stop(kOff)
		n := 0
		rt := func(k *Kernel) func() time.Duration {
			return testkit.Timed(func() { n++; kernelRoundTrip(b, k, "s"+strconv.Itoa(n), "1+1") })
		}
		onD, offD := testkit.Compare(b, 20, rt(kOn), rt(kOff))
		testkit.ReportAdded(b, time.Microsecond, "on", onD, "off", offD)
		rss := func(k *Kernel) float64 {
			pids := []int{k.Pid()}
			if k.p.spec.sandbox != nil {
				pids = append(pids, k.p.cmd.Process.Pid, func() int { _, _, n := k.p.ids(); return n }())
			}
			var total int64
			for _, pid := range pids {
				if r, err := testkit.StatusBytes(pid, "VmRSS"); err == nil {
					total += r
				}
			}
			return float64(total) / (1 << 20)
		}
		b.ReportMetric(rss(kOn), "on-idle-rss-MB")
		b.ReportMetric(rss(kOff), "off-idle-rss-MB")
	})
}

// BenchmarkOutputThroughput is output through the Kernel, as fast as an
// interpreter writes it: 200,000 prints (python's go to fd 1, node's
// console.log are messages on fd 4) and 100 MB in one write (python's to
// fd 1, node's one message, under a cap raised to let it whole). Bytes/s
// is what the client gets.
func BenchmarkOutputThroughput(b *testing.B) {
	for _, c := range []struct{ name, lang, code string }{
		{"python-200k-prints", "python", "for i in range(200000): print(i)"},
		{"python-100MB-write", "python", "import sys\nsys.stdout.write('x' * 100_000_000)"},
		{"node-200k-prints", "javascript", "for (let i = 0; i < 200000; i++) console.log(i)"},
		{"node-100MB-write", "javascript", "process.stdout.write('y'.repeat(100_000_000))"},
	} {
		b.Run(c.name, func(b *testing.B) {
			tr := New(Options{MaxMessageBytes: 128 << 20})
			if _, ok := tr.langs[c.lang]; !ok {
				testkit.Missingf(b, "no %s interpreter", c.lang)
			}
			k, err := tr.StartKernel(context.Background(), core.KernelSpec{Language: c.lang, Cwd: b.TempDir()})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { k.Shutdown(context.Background()) })
			count := func(id string) int {
				if err := k.Execute(context.Background(), core.ExecuteRequest{MsgID: id, Code: c.code}); err != nil {
					b.Fatal(err)
				}
				n := 0
				for m := range k.Messages() {
					if m.Type == core.MsgStream && m.Name == "stdout" {
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
				if got := count("o" + strconv.Itoa(i)); got != want {
					b.Fatalf("streamed %d bytes, want %d", got, want)
				}
			}
			b.SetBytes(int64(want))
		})
	}
}
