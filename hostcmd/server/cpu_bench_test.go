//go:build linux

package server_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kernelhost/kernelhost/hostcmd/internal/hosttest"
	"github.com/kernelhost/kernelhost/internal/testkit"
)

// BenchmarkRoundTripCPU measures what one `1+1` over HTTP costs in CPU time:
// the test process's (host, engine, HTTP client) and its interpreters'
// (every descendant process), per execution, with the context switches of
// the interpreters' threads. Unlike a latency, CPU time hardly moves with
// the machine's load, so two builds compare in it where their p50s, taken
// minutes apart on shared cores, drown in noise (docs/benchmarks.md).
func BenchmarkRoundTripCPU(b *testing.B) {
	h := hosttest.Start(b)
	body := []byte(`{"code":"1+1"}`)
	once := func() { postExpect(b, h, body, `"text":"2"`) }
	for range 50 { // warm: connection, imports, caches
		once()
	}
	before := processTreeCPU(os.Getpid())
	d := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		once()
		d = append(d, time.Since(t0))
	}
	b.StopTimer()
	after := processTreeCPU(os.Getpid())
	n := float64(b.N)
	testkit.ReportQuantile(b, time.Microsecond, "host", d, 0.5)
	b.ReportMetric(float64(after.self-before.self)/float64(time.Microsecond)/n, "host-cpu-µs/op")
	b.ReportMetric(float64(after.descendants-before.descendants)/float64(time.Microsecond)/n, "interpreters-cpu-µs/op")
	b.ReportMetric(float64(after.mainSwitches-before.mainSwitches)/n, "interpreter-main-switches/op")
	b.ReportMetric(float64(after.otherSwitches-before.otherSwitches)/n, "interpreter-thread-switches/op")
}

// treeCPU is the CPU time run so far by the threads of a process and of its
// descendants (schedstat), and the context switches of the descendants'
// main threads and of their other threads. A thread or process that ended
// is not counted: the benchmark's interpreters live throughout.
type treeCPU struct {
	self, descendants           time.Duration
	mainSwitches, otherSwitches int
}

func processTreeCPU(root int) treeCPU {
	parent := map[int]int{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		s := string(stat)
		if f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:]); len(f) > 1 {
			parent[pid], _ = strconv.Atoi(f[1])
		}
	}
	descends := func(pid int) bool {
		for pid > 1 {
			if pid = parent[pid]; pid == root {
				return true
			}
		}
		return false
	}
	var t treeCPU
	t.self, _, _ = threadsCPU(root)
	for pid := range parent {
		if descends(pid) {
			cpu, mainSw, otherSw := threadsCPU(pid)
			t.descendants += cpu
			t.mainSwitches += mainSw
			t.otherSwitches += otherSw
		}
	}
	return t
}

// threadsCPU sums the run time of pid's threads, and gives the context
// switches of its main thread and of its other threads.
func threadsCPU(pid int) (cpu time.Duration, mainSwitches, otherSwitches int) {
	dir := "/proc/" + strconv.Itoa(pid) + "/task"
	tasks, _ := os.ReadDir(dir)
	for _, task := range tasks {
		if sched, err := os.ReadFile(filepath.Join(dir, task.Name(), "schedstat")); err == nil {
			if f := strings.Fields(string(sched)); len(f) > 0 {
				ns, _ := strconv.ParseInt(f[0], 10, 64)
				cpu += time.Duration(ns)
			}
		}
		status, err := os.ReadFile(filepath.Join(dir, task.Name(), "status"))
		if err != nil {
			continue
		}
		switches := 0
		for _, line := range strings.Split(string(status), "\n") {
			if name, value, ok := strings.Cut(line, ":"); ok && strings.HasSuffix(name, "ctxt_switches") {
				n, _ := strconv.Atoi(strings.TrimSpace(value))
				switches += n
			}
		}
		if task.Name() == strconv.Itoa(pid) {
			mainSwitches += switches
		} else {
			otherSwitches += switches
		}
	}
	return cpu, mainSwitches, otherSwitches
}
