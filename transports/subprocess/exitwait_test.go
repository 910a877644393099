package subprocess

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Waiting for an interpreter's exit holds no thread: parkUntilExit parks
// on the netpoller, where exec.Cmd.Wait alone blocks a thread in waitid for
// the process's whole life. The same twenty waits made the plain way are
// the control: they show the thread count moves here.
func TestExitWaitsHoldNoThread(t *testing.T) {
	const n = 20
	grew := func(t *testing.T, wait func(*exec.Cmd)) int {
		t.Helper()
		before := threads(t)
		var cmds []*exec.Cmd
		var waiting, done sync.WaitGroup
		for range n {
			cmd := exec.Command("sleep", "60")
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			cmds = append(cmds, cmd)
			waiting.Add(1)
			done.Go(func() { waiting.Done(); wait(cmd) })
		}
		waiting.Wait()
		// The waiters are parked or blocked within moments; the most
		// threads seen over 300 ms is the figure.
		most := 0
		for end := time.Now().Add(300 * time.Millisecond); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
			most = max(most, threads(t)-before)
		}
		for _, cmd := range cmds {
			_ = cmd.Process.Kill()
		}
		finished := make(chan struct{})
		go func() { done.Wait(); close(finished) }()
		select {
		case <-finished:
		case <-time.After(10 * time.Second):
			t.Fatal("the waits did not return within 10 s of the kills")
		}
		return most
	}
	blocking := grew(t, func(cmd *exec.Cmd) { _ = cmd.Wait() })
	parked := grew(t, func(cmd *exec.Cmd) { parkUntilExit(cmd.Process.Pid); _ = cmd.Wait() })
	t.Logf("threads added by %d waits: %d blocking in waitid, %d parked", n, blocking, parked)
	if blocking < n/2 {
		t.Fatalf("the control's %d blocking waits added only %d threads: the count shows nothing", n, blocking)
	}
	if parked > n/4 {
		t.Errorf("%d parked waits added %d threads, want at most %d (blocking ones added %d)", n, parked, n/4, blocking)
	}
}

// threads is the number of this process's threads.
func threads(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(l, "Threads:"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(rest))
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("/proc/self/status has no Threads")
	return 0
}
