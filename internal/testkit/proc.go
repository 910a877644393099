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
	f, err := statFields(pid)
	if err != nil || len(f) < 2 {
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

// HostPid returns the host's number of the process that is nsPid in the
// PID namespace of process neighbour (a sandboxed interpreter: a pid its
// code printed is its namespace's). Outside a namespace of its own it is
// nsPid. It fails the test when there is no such process.
func HostPid(tb testing.TB, neighbour, nsPid int) int {
	tb.Helper()
	ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", neighbour))
	if err != nil {
		tb.Fatalf("pid namespace of %d: %v", neighbour, err)
	}
	return HostPidIn(tb, ns, nsPid)
}

// PidNSProbe returns code for lang (python, bash, javascript, typescript or
// r; "" for any other) that prints its PID namespace as /proc/self/ns/pid
// names it ("pid:[4026531836]"), the same inside and outside, for HostPidIn.
func PidNSProbe(lang string) string {
	switch lang {
	case "python":
		return "import os; print(os.readlink('/proc/self/ns/pid'))"
	case "bash":
		return "readlink /proc/self/ns/pid"
	case "javascript", "typescript":
		return "console.log(require('fs').readlinkSync('/proc/self/ns/pid'))"
	case "r":
		return "cat(Sys.readlink('/proc/self/ns/pid'), '\\n')"
	}
	return ""
}

// HostPidIn returns the host's number of the process that is nsPid in PID
// namespace ns (as /proc/PID/ns/pid names it); nsPid itself when ns is this
// process's. It fails the test when there is no such process.
func HostPidIn(tb testing.TB, ns string, nsPid int) int {
	tb.Helper()
	ns = strings.TrimSpace(ns)
	if own, err := os.Readlink("/proc/self/ns/pid"); err == nil && own == ns {
		return nsPid
	}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if other, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid)); err != nil || other != ns {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if rest, ok := strings.CutPrefix(line, "NSpid:"); ok {
				if f := strings.Fields(rest); len(f) > 0 && f[len(f)-1] == strconv.Itoa(nsPid) {
					return pid
				}
			}
		}
	}
	tb.Fatalf("no process is pid %d in PID namespace %s", nsPid, ns)
	return 0
}

// SelfPidProbe returns code for lang (python or javascript; "" for any
// other) that prints its PID namespace and its pid in it, for
// HostPidOfProbe: a sandboxed interpreter's os.getpid() is its namespace's
// number, not the host's.
func SelfPidProbe(lang string) string {
	switch lang {
	case "python":
		return "import os; print(os.readlink('/proc/self/ns/pid'), os.getpid())"
	case "javascript":
		return "console.log(require('fs').readlinkSync('/proc/self/ns/pid'), process.pid)"
	}
	return ""
}

// HostPidOfProbe returns the host's pid of the interpreter whose
// SelfPidProbe's code printed out.
func HostPidOfProbe(tb testing.TB, out string) int {
	tb.Helper()
	ns, pid, _ := strings.Cut(strings.TrimSpace(out), " ")
	n, err := strconv.Atoi(pid)
	if err != nil {
		tb.Fatalf("the pid probe printed %q", out)
	}
	return HostPidIn(tb, ns, n)
}

// CPUTime returns the CPU time (user and system) all of pid's threads have
// used so far, from /proc/PID/stat. It is what a process costs whatever
// else shares the machine, where its wall time under load is not.
func CPUTime(pid int) (time.Duration, error) {
	f, err := statFields(pid)
	if err != nil {
		return 0, err
	}
	// utime and stime are the 12th and 13th fields after the name.
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields after the name", pid, len(f))
	}
	var ticks int64
	for _, v := range f[11:13] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		ticks += n
	}
	// /proc counts in USER_HZ, which Linux fixes at 100 a second.
	return time.Duration(ticks) * 10 * time.Millisecond, nil
}

// statFields returns the fields of /proc/PID/stat after the command name,
// the state first: the name is in parentheses and may hold spaces and
// parentheses of its own.
func statFields(pid int) ([]string, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil, err
	}
	s := string(b)
	return strings.Fields(s[strings.LastIndexByte(s, ')')+1:]), nil
}
