package testkit

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// ProcState returns pid's state letter and parent from /proc, state "" when
// the process is gone.
func ProcState(pid int) (state string, ppid int) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return "", 0
	}
	s := string(b)
	// The state follows the command name, which is in parentheses and may
	// hold spaces and parentheses of its own.
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 2 {
		return "", 0
	}
	ppid, _ = strconv.Atoi(f[1])
	return f[0], ppid
}

// Alive reports whether pid is a running process: a zombie (or one being
// reaped) counts as gone.
func Alive(pid int) bool {
	st, _ := ProcState(pid)
	return st != "" && st != "Z" && st != "X"
}

// AwaitGone waits until none of pids is alive, and fails the test naming
// the ones left if some still run after timeout. It polls /proc: the death
// of a process that is not the test's child is not awaitable from here.
func AwaitGone(tb testing.TB, what string, timeout time.Duration, pids ...int) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for {
		var left []int
		for _, pid := range pids {
			if Alive(pid) {
				left = append(left, pid)
			}
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("%s: these processes still run %s later: %v", what, timeout, left)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// StatusBytes reads a memory field of /proc/PID/status ("VmRSS", "VmHWM",
// …), counted in kB there, in bytes; pid 0 is the test's own process.
func StatusBytes(pid int, field string) (int64, error) {
	path := "/proc/self/status"
	if pid != 0 {
		path = "/proc/" + strconv.Itoa(pid) + "/status"
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(l, field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("%s has no %s", path, field)
}
