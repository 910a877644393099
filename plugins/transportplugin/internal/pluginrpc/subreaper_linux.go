package pluginrpc

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"
)

// A plugin is a child subreaper: a process that user code detached from its
// interpreter and whose parent then exited (a double-forked daemon, `(setsid
// cmd &)`) is re-parented to the plugin instead of to init. Transports end
// what is still below an interpreter when they kill it (subprocess: its
// cgroup, or its process tree); what was adopted is the plugin's: zombies
// among them are reaped, and all of them are killed when the plugin stops,
// so nothing user code started outlives the host.

// adoptedReapInterval is how often adopted zombies are reaped. A zombie is
// reaped only when it was one at the previous round too: the plugin's own
// children (interpreters) are reaped by their waiters at once, so a zombie
// that stays one is a process nobody waits for.
const adoptedReapInterval = 5 * time.Second

// becomeSubreaper makes the plugin a child subreaper and starts reaping
// adopted zombies until done closes.
func becomeSubreaper(log hclog.Logger, done <-chan struct{}) {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		log.Warn("cannot become a child subreaper; processes detached from interpreters are left to init", "error", err)
		return
	}
	go func() {
		t := time.NewTicker(adoptedReapInterval)
		defer t.Stop()
		seen := map[int]bool{}
		for {
			select {
			case <-done:
				return
			case <-t.C:
				seen = reapLingeringZombies(seen)
			}
		}
	}()
}

// reapLingeringZombies reaps the children that were zombies at the last
// round too, and returns this round's zombies.
func reapLingeringZombies(last map[int]bool) map[int]bool {
	now := map[int]bool{}
	for _, pid := range childPids() {
		if !isZombie(pid) {
			continue
		}
		if last[pid] {
			var ws unix.WaitStatus
			_, _ = unix.Wait4(pid, &ws, unix.WNOHANG, nil)
			continue
		}
		now[pid] = true
	}
	return now
}

// killAdopted SIGKILLs every child the plugin still has: by the time it is
// called, its kernels were shut down, so these are what it adopted.
func killAdopted() {
	for _, pid := range childPids() {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// childPids lists the plugin's children (/proc/self/task/*/children).
func childPids() []int {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return nil
	}
	var pids []int
	for _, task := range tasks {
		b, err := os.ReadFile("/proc/self/task/" + task.Name() + "/children")
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

func isZombie(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && len(s) > i+2 && s[i+2] == 'Z'
}
