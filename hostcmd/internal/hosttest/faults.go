package hosttest

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/kernelhost/kernelhost/internal/testkit"
)

// Descendants lists the live processes under pid (zombies excluded).
func Descendants(pid int) map[int]string {
	children := map[int][]int{}
	names := map[int]string{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 || i+4 > len(s) || s[i+2] == 'Z' {
			continue
		}
		fields := strings.Fields(s[i+2:])
		ppid, _ := strconv.Atoi(fields[1])
		children[ppid] = append(children[ppid], p)
		names[p] = s[strings.IndexByte(s, '(')+1 : i]
	}
	out := map[int]string{}
	var walk func(int)
	walk = func(p int) {
		for _, c := range children[p] {
			out[c] = names[c]
			walk(c)
		}
	}
	walk(pid)
	return out
}

// NoLeftovers registers the end-of-test checks of a fault test, to run after
// everything the test starts is stopped (cleanups run last-in first-out):
// goroutines back to the test's baseline, and no process left behind.
func NoLeftovers(t *testing.T) {
	t.Helper()
	baseline := goleak.IgnoreCurrent()
	procsBefore := Descendants(os.Getpid())
	t.Cleanup(func() {
		deadline := time.Now().Add(15 * time.Second)
		for {
			var left []string
			for pid, name := range Descendants(os.Getpid()) {
				if _, ok := procsBefore[pid]; !ok {
					left = append(left, fmt.Sprintf("%d (%s)", pid, name))
				}
			}
			if len(left) == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("processes left behind 15 s after the test: %v", left)
				break
			}
			time.Sleep(20 * time.Millisecond) // /proc offers nothing to wait on
		}
		goleak.VerifyNone(t, baseline)
	})
}

// Recovered checks what every fault test checks after its fault: /health,
// and an execution on every context (the python ones compute, the others echo).
func Recovered(t *testing.T, h *Host) {
	t.Helper()
	if status, body := h.Do("GET", "/health", ""); status != 200 {
		t.Fatalf("health after the fault: %d %s", status, body)
	}
	for _, c := range h.Contexts() {
		code, want := "6*7", "42"
		switch c.Language {
		case "javascript":
			code = "6*7"
		case "bash":
			code, want = "echo 42", ""
		}
		lines := h.Run(map[string]any{"code": code, "context_id": c.ID})
		NoError(t, lines)
		got := Stdout(lines)
		if want != "" {
			got = MainResult(t, lines)
		} else {
			want = "42\n"
		}
		if got != want {
			t.Fatalf("%s context %s after the fault: %q, want %q", c.Language, c.ID, got, want)
		}
	}
}

// Figure logs one measured figure for docs/reliability.md.
func Figure(t *testing.T, format string, args ...any) {
	t.Helper()
	t.Logf("FIGURE %s: "+format, append([]any{t.Name()}, args...)...)
}

// PidOf asks a python context for its interpreter's process id.
func PidOf(t *testing.T, h *Host, id string) int {
	t.Helper()
	return testkit.HostPidOfProbe(t, Stdout(h.Run(map[string]any{"code": testkit.SelfPidProbe("python"), "context_id": id})))
}
