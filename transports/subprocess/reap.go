package subprocess

import (
	"bytes"
	"os"
	"strconv"
	"strings"
	"syscall"

	"github.com/kernelhost/kernelhost/transports/subprocess/internal/cgroup"
)

// An interpreter's process group is not all it may leave behind: a child in
// a session of its own (python's start_new_session=True, `setsid cmd &`,
// node's detached: true) is in neither its group nor its session. Two ways
// to end every descendant when a kernel is killed:
//
//   - a cgroup per interpreter (internal/cgroup), where the process's own
//     cgroup v2 is writable (root, or systemd's Delegate=yes): the interpreter is cloned
//     into it, nothing it starts can leave it, and cgroup.kill ends them all,
//     even a daemon whose parent exited long ago;
//   - otherwise the process tree: every descendant of the interpreter is
//     stopped (so none can fork any more), then all are killed. A process
//     whose parent exited before the kill was re-parented away from the
//     tree; the plugin is a child subreaper (transportplugin), so such
//     processes are its children, and end with it.

// killTree ends root and every descendant of it, whatever session or group
// they moved to: it stops them all first, round after round until a round
// finds none it had not stopped (a stopped process cannot fork), then kills
// them. Processes re-parented away before the call are not found.
func killTree(root int) {
	stopped := map[int]bool{}
	for round := 0; round < 100; round++ {
		found := false
		for _, pid := range descendants(root) {
			if !stopped[pid] {
				stopped[pid] = true
				found = true
				_ = syscall.Kill(pid, syscall.SIGSTOP)
			}
		}
		if !found {
			break
		}
	}
	_ = syscall.Kill(-root, syscall.SIGKILL)
	_ = syscall.Kill(root, syscall.SIGKILL)
	for pid := range stopped {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// descendants lists the processes below root, from /proc.
func descendants(root int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	children := map[int][]int{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid := parentOf(pid); ppid > 0 {
			children[ppid] = append(children[ppid], pid)
		}
	}
	var out []int
	queue := []int{root}
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		for _, c := range children[pid] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}

// parentOf reads the parent pid from /proc/PID/stat, 0 if it cannot.
func parentOf(pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// pid (comm) state ppid ...; comm may hold spaces and parentheses.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}

// CgroupsAvailable reports whether interpreters started by this process get
// cgroups of their own (unless Options.NoCgroups).
func CgroupsAvailable() bool { return cgroup.Base() != "" }
