package subprocess

import (
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// A context forked ahead of need warms up before it says ready
// (procSpec.warmUp), a few hundred milliseconds of CPU, right after the
// hand-out that made the pool refill, while the context handed out runs
// its first cells; with 2 cores the warm-up took their CPU and a new
// context's session ran 1.7x a warm one's instead of ~1x
// (docs/benchmarks.md). So it warms up in the background: at the lowest
// CPU priority until the pool hands it out.
//
// The priority is a nice value on each of the interpreter's threads and,
// when the interpreter leads a session of its own (a sandboxed context:
// forkserver.py's C), on its session's scheduler autogroup, where the
// kernel weighs a session against the others (a task's nice counts only
// within its autogroup). Raising it back needs CAP_SYS_NICE (and, for the
// autogroup without a rate limit, CAP_SYS_ADMIN): without them the
// priority is left alone, as a context handed out at nice 19 would run
// its cells at nice 19.
const backgroundNice = 19

// canReprioritize says whether this process may give a lowered priority
// back: CAP_SYS_NICE and CAP_SYS_ADMIN in its effective set.
var canReprioritize = func() bool {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(status), "\n") {
		if hex, ok := strings.CutPrefix(line, "CapEff:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(hex), 16, 64)
			const need = 1<<unix.CAP_SYS_NICE | 1<<unix.CAP_SYS_ADMIN
			return err == nil && caps&need == need
		}
	}
	return false
}()

// toBackground gives the process pid the lowest CPU priority.
func toBackground(pid int) { setNice(pid, backgroundNice) }

// toForeground gives it the default priority back.
func toForeground(pid int) { setNice(pid, 0) }

// setNice sets pid's threads' nice value, and its autogroup's where it
// leads its session. Errors are ignored: the process may be gone (its
// pool slot sees that), and a kernel without autogroups has no file.
func setNice(pid, nice int) {
	if !canReprioritize || pid <= 0 {
		return
	}
	if sid, err := unix.Getsid(pid); err == nil && sid == pid {
		_ = os.WriteFile("/proc/"+strconv.Itoa(pid)+"/autogroup", []byte(strconv.Itoa(nice)), 0)
	}
	tasks, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	if err != nil {
		return
	}
	for _, task := range tasks {
		if tid, err := strconv.Atoi(task.Name()); err == nil {
			_ = unix.Setpriority(unix.PRIO_PROCESS, tid, nice)
		}
	}
}
