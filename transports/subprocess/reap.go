package subprocess

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// An interpreter's process group is not all it may leave behind: a child in
// a session of its own (python's start_new_session=True, `setsid cmd &`,
// node's detached: true) is in neither its group nor its session. Two ways
// to end every descendant when a kernel is killed:
//
//   - a cgroup per interpreter, where the process's own cgroup v2 is
//     writable (root, or systemd's Delegate=yes): the interpreter is cloned
//     into it, nothing it starts can leave it, and cgroup.kill ends them all,
//     even a daemon whose parent exited long ago;
//   - otherwise the process tree: every descendant of the interpreter is
//     stopped (so none can fork any more), then all are killed. A process
//     whose parent exited before the kill was re-parented away from the
//     tree; the plugin is a child subreaper (transportplugin), so such
//     processes are its children, and end with it.

// cgroupBase is the cgroup v2 directory this process belongs to, if it can
// make cgroups there; "" otherwise. Found once.
var cgroupBase = sync.OnceValue(findCgroupBase)

// findCgroupBase returns the directory of this process's cgroup in the
// cgroup v2 hierarchy when a child cgroup can be made and removed there.
func findCgroupBase() string {
	self, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return ""
	}
	var rel string
	for _, line := range strings.Split(string(self), "\n") {
		if r, ok := strings.CutPrefix(line, "0::"); ok {
			rel = r
		}
	}
	if rel == "" {
		return ""
	}
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return ""
	}
	sc := bufio.NewScanner(bytes.NewReader(mounts))
	for sc.Scan() {
		// ... mountpoint ... - fstype source options
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		fields, postFields := strings.Fields(pre), strings.Fields(post)
		if !ok || len(fields) < 5 || len(postFields) < 1 || postFields[0] != "cgroup2" {
			continue
		}
		base := filepath.Join(fields[4], rel)
		probe := filepath.Join(base, fmt.Sprintf("kernelhost-probe-%d", os.Getpid()))
		if err := os.Mkdir(probe, 0o755); err != nil {
			return ""
		}
		_, killErr := os.Stat(filepath.Join(probe, "cgroup.kill"))
		os.Remove(probe)
		if killErr != nil {
			return "" // cgroup.kill came with Linux 5.14
		}
		return base
	}
	return ""
}

var cgroupSeq atomic.Uint64

// cgroup is one interpreter's cgroup.
type cgroup struct {
	dir string
	fd  int // open until the interpreter started
}

// newCgroup makes a cgroup for one interpreter, or returns nil when this
// machine offers none.
func newCgroup() (*cgroup, error) {
	base := cgroupBase()
	if base == "" {
		return nil, nil
	}
	dir := filepath.Join(base, fmt.Sprintf("kernelhost-%d-%d", os.Getpid(), cgroupSeq.Add(1)))
	err := os.Mkdir(dir, 0o755)
	if errors.Is(err, fs.ErrExist) {
		// Left by an earlier process with this pid that was killed before it
		// removed its cgroups (pids wrap): rmdir takes it only if no process
		// is left in it, and then the name is free.
		if os.Remove(dir) == nil {
			err = os.Mkdir(dir, 0o755)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("make cgroup %s: %w", dir, err)
	}
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		os.Remove(dir)
		return nil, fmt.Errorf("open cgroup %s: %w", dir, err)
	}
	return &cgroup{dir: dir, fd: fd}, nil
}

// started closes the descriptor once the interpreter was cloned into the cgroup.
func (c *cgroup) started() {
	if c.fd >= 0 {
		unix.Close(c.fd)
		c.fd = -1
	}
}

// kill ends every process in the cgroup, waits (bounded) until it is empty
// and removes it.
func (c *cgroup) kill(wait time.Duration) error {
	c.started()
	if err := os.WriteFile(filepath.Join(c.dir, "cgroup.kill"), []byte("1"), 0); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("kill cgroup %s: %w", c.dir, err)
	}
	deadline := time.Now().Add(wait)
	for {
		// rmdir succeeds once no process is left (killed ones are gone from
		// the cgroup once they exited, zombies included).
		err := os.Remove(c.dir)
		if err == nil || errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("remove cgroup %s: %w", c.dir, err)
		}
		time.Sleep(5 * time.Millisecond) // cgroup.events could be polled; the wait is a few ms
	}
}

// removeOrphanCgroups ends and removes the interpreter cgroups that a
// process which is gone left in the base: a plugin killed with SIGKILL
// could neither end its interpreters (nor what they started in sessions of
// their own) nor remove their cgroups, and the plugin the host starts in
// its place runs this. A cgroup's name holds the pid of the process that
// made it (newCgroup); one whose maker is alive, this process or another
// host's, is left alone. A pid reused since is taken as alive: its
// cgroups stay, which is safe.
func removeOrphanCgroups() {
	base := cgroupBase()
	entries, err := os.ReadDir(base)
	if base == "" || err != nil {
		return
	}
	for _, e := range entries {
		pid, ok := cgroupMaker(e.Name())
		if !ok || pid == os.Getpid() || processExists(pid) {
			continue
		}
		_ = (&cgroup{dir: filepath.Join(base, e.Name()), fd: -1}).kill(killWait)
	}
}

// cgroupMaker returns the pid in a cgroup name newCgroup made
// (kernelhost-PID-N).
func cgroupMaker(name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, "kernelhost-")
	pidText, seq, ok2 := strings.Cut(rest, "-")
	pid, err := strconv.Atoi(pidText)
	if _, err2 := strconv.ParseUint(seq, 10, 64); !ok || !ok2 || err != nil || err2 != nil || pid <= 0 {
		return 0, false
	}
	return pid, true
}

// processExists reports whether pid names a process (a zombie included).
func processExists(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

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
func CgroupsAvailable() bool { return cgroupBase() != "" }
