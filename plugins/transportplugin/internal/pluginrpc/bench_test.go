package pluginrpc

import (
	"bytes"
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kernelhost/kernelhost/core"
	"github.com/kernelhost/kernelhost/internal/testkit"
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

// launchBench launches bin as a plugin; env is added to its environment.
func launchBench(bin string, env ...string) func(b *testing.B) core.Transport {
	return launchBenchConfig(Config{Path: bin, Env: env})
}

// launchBenchConfig launches the plugin cfg describes.
func launchBenchConfig(cfg Config) func(b *testing.B) core.Transport {
	return func(b *testing.B) core.Transport {
		cfg.Logger = discardLogger()
		s, err := Launch(context.Background(), cfg)
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
	self, err := os.Executable()
	if err != nil {
		panic(err)
	}
	echo := func(*testing.B) core.Transport { return echoTransport{} }
	return []benchCase{
		{"echo/inprocess", echo, "python", py, pyStream},
		{"echo/plugin", launchBench(self, helperEnv+"=echo"), "python", py, pyStream},
		// The same boundary with kernels on gRPC streams, not the kernel
		// socket: what the socket saves.
		{"echo-grpc/inprocess", echo, "python", py, pyStream},
		{"echo-grpc/plugin", launchBenchConfig(Config{Path: self, Env: []string{helperEnv + "=echo"}, GRPCKernelStreams: true}), "python", py, pyStream},
		// GOMAXPROCS=2 in the plugin: how plugins ran before Serve set 1
		// (see pluginMaxProcs).
		{"echo-maxprocs2/inprocess", echo, "python", py, pyStream},
		{"echo-maxprocs2/plugin", launchBench(self, helperEnv+"=echo", "GOMAXPROCS=2"), "python", py, pyStream},
		{"subprocess-python/inprocess", sub, "python", py, pyStream},
		{"subprocess-python/plugin", launchBench(subprocessBin), "python", py, pyStream},
		{"subprocess-python-maxprocs2/inprocess", sub, "python", py, pyStream},
		{"subprocess-python-maxprocs2/plugin", launchBench(subprocessBin, "GOMAXPROCS=2"), "python", py, pyStream},
		{"example-bash/inprocess", ex, "bash", sh, shStream},
		{"example-bash/plugin", launchBench(exampleBin), "bash", sh, shStream},
	}
}

func benchKernel(b *testing.B, c benchCase) core.Kernel {
	k, _ := benchKernelPID(b, c)
	return k
}

// benchKernelPID starts a kernel of c and returns it with the pid of the
// plugin process it lives in (0 in process).
func benchKernelPID(b *testing.B, c benchCase) (core.Kernel, int) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	t := c.transport(b)
	k, err := t.StartKernel(ctx, core.KernelSpec{Language: c.lang, Cwd: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { k.Shutdown(context.Background()) })
	pid := 0
	if s, ok := t.(*Supervised); ok {
		pid = s.PID()
	}
	return k, pid
}

// cpuTime is the user+system CPU time pid has used so far (clock-tick
// resolution, 10 ms: enough over thousands of round trips).
func cpuTime(b *testing.B, pid int) time.Duration {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		b.Fatal(err)
	}
	// Fields after the ")" that ends the command name: state is field 3,
	// utime 14 and stime 15.
	f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	ut, _ := strconv.Atoi(f[11])
	st, _ := strconv.Atoi(f[12])
	return time.Duration(ut+st) * 10 * time.Millisecond
}

// contextSwitches is the number of times the threads of pid (0: this
// process) have been switched out so far, voluntarily or not: on a busy
// machine each costs a wait for a core, so a round trip's count is most of
// its latency.
func contextSwitches(pid int) int {
	dir := "/proc/self/task"
	if pid != 0 {
		dir = "/proc/" + strconv.Itoa(pid) + "/task"
	}
	tasks, _ := os.ReadDir(dir)
	n := 0
	for _, t := range tasks {
		st, err := os.ReadFile(dir + "/" + t.Name() + "/status")
		if err != nil {
			continue // the thread exited
		}
		// voluntary_ctxt_switches and nonvoluntary_ctxt_switches
		for _, l := range strings.Split(string(st), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.HasSuffix(k, "ctxt_switches") {
				c, _ := strconv.Atoi(strings.TrimSpace(v))
				n += c
			}
		}
	}
	return n
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

// BenchmarkRoundTrip is one tiny execution, Execute to status idle, on the
// same transport linked in and behind the plugin boundary, alternating the
// two in one loop so both see the same machine state. It reports both
// medians and their difference (what the boundary adds) and both 90th
// percentiles; ns/op is one pair. It also reports the plugin's CPU per trip
// and each process's context switches per trip.
func BenchmarkRoundTrip(b *testing.B) {
	cases := benchCases()
	for i := 0; i < len(cases); i += 2 {
		in, pl := cases[i], cases[i+1]
		b.Run(strings.TrimSuffix(in.name, "/inprocess"), func(b *testing.B) {
			kin := benchKernel(b, in)
			kpl, pid := benchKernelPID(b, pl)
			for range 20 { // warm up both
				execute(b, kin, "warm", in.roundTrip)
				execute(b, kpl, "warm", pl.roundTrip)
			}
			cpu0 := cpuTime(b, pid)
			// Over both halves: host-ctxsw/op includes the in-process
			// trip (next to no switch with echo, some with a subprocess).
			h0, p0 := contextSwitches(0), contextSwitches(pid)
			din, dpl := testkit.Compare(b, 0,
				testkit.Timed(func() { execute(b, kin, "rt", in.roundTrip) }),
				testkit.Timed(func() { execute(b, kpl, "rt", pl.roundTrip) }))
			testkit.ReportAdded(b, time.Microsecond, "plugin", dpl, "inprocess", din)
			testkit.ReportQuantile(b, time.Microsecond, "inprocess", din, 0.9)
			testkit.ReportQuantile(b, time.Microsecond, "plugin", dpl, 0.9)
			b.ReportMetric(float64((cpuTime(b, pid)-cpu0).Microseconds())/float64(len(dpl)), "plugin-cpu-µs/op")
			b.ReportMetric(float64(contextSwitches(0)-h0)/float64(len(dpl)), "host-ctxsw/op")
			b.ReportMetric(float64(contextSwitches(pid)-p0)/float64(len(dpl)), "plugin-ctxsw/op")
		})
	}
}

// BenchmarkStream200kLines streams 200,000 lines of stdout in one
// execution, in process and through the plugin alternately, and reports
// both medians and plugin/inprocess, their ratio. ns/op is one pair.
func BenchmarkStream200kLines(b *testing.B) {
	cases := benchCases()
	for i := 0; i < len(cases); i += 2 {
		in, pl := cases[i], cases[i+1]
		if strings.HasPrefix(in.name, "echo") {
			continue // it streams nothing
		}
		b.Run(strings.TrimSuffix(in.name, "/inprocess"), func(b *testing.B) {
			kin, kpl := benchKernel(b, in), benchKernel(b, pl)
			want := execute(b, kin, "warm", in.stream200k)
			if got := execute(b, kpl, "warm", pl.stream200k); got != want {
				b.Fatalf("plugin streamed %d bytes, in process %d", got, want)
			}
			stream := func(k core.Kernel, c benchCase) func() time.Duration {
				return testkit.Timed(func() {
					if got := execute(b, k, "s", c.stream200k); got != want {
						b.Fatalf("streamed %d bytes, want %d", got, want)
					}
				})
			}
			din, dpl := testkit.Compare(b, 0, stream(kin, in), stream(kpl, pl))
			testkit.ReportRatio(b, time.Millisecond, "plugin", dpl, "inprocess", din, "plugin/inprocess")
		})
	}
}
