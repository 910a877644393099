package testkit

import (
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
