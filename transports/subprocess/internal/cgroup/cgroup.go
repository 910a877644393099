// Package cgroup puts a process, with everything it starts, in cgroups of
// its own (Set): a cgroup v2 per process where this process's cgroup v2 is
// writable, which cgroup.kill ends whole, even a daemon whose parent exited
// long ago; and the limits of a context (Limits: memory, pids, CPU weight),
// in that cgroup or, for a controller v2 does not offer here, in cgroup v1
// hierarchies. The subprocess transport gives one to each interpreter and
// to each command it runs for envd (docs/operating.md, "Limits per
// context").
package cgroup

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

// Base is the directory of this process's cgroup v2, where it makes a
// cgroup per process, "" when it cannot (read-only, or no cgroup.kill:
// Linux before 5.14). Found once.
func Base() string { return base() }

// base is the cgroup v2 directory this process belongs to, if it can
// make cgroups there; "" otherwise. Found once.
var base = sync.OnceValue(findBase)

// findBase returns the directory of this process's cgroup in the
// cgroup v2 hierarchy when a child cgroup can be made and removed there.
func findBase() string {
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

// seq numbers the cgroups this process makes.
var seq atomic.Uint64

// v2Group is one process's own cgroup v2.
type v2Group struct {
	dir string
	fd  int // open until the interpreter started
}

// newV2Group makes a cgroup for one process, or returns nil when this
// machine offers none.
func newV2Group() (*v2Group, error) {
	base := base()
	if base == "" {
		return nil, nil
	}
	dir := filepath.Join(base, fmt.Sprintf("kernelhost-%d-%d", os.Getpid(), seq.Add(1)))
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
	return &v2Group{dir: dir, fd: fd}, nil
}

// started closes the descriptor once the process was cloned into the cgroup.
func (c *v2Group) started() {
	if c.fd >= 0 {
		unix.Close(c.fd)
		c.fd = -1
	}
}

// kill ends every process in the cgroup, waits (bounded) until it is empty
// and removes it.
func (c *v2Group) kill(wait time.Duration) error {
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

// RemoveOrphans ends and removes the cgroups that a process which is gone
// left in the base, waiting at most wait for each to empty: a plugin killed
// with SIGKILL could neither end its interpreters (nor what they started in
// sessions of their own) nor remove their cgroups, and the plugin the host
// starts in its place runs this. A cgroup's name holds the pid of the
// process that made it (newV2Group); one whose maker is alive, this process
// or another host's, is left alone. A pid reused since is taken as alive:
// its cgroups stay, which is safe.
func RemoveOrphans(wait time.Duration) {
	base := base()
	entries, err := os.ReadDir(base)
	if base == "" || err != nil {
		return
	}
	for _, e := range entries {
		pid, ok := cgroupMaker(e.Name())
		if !ok || pid == os.Getpid() || processExists(pid) {
			continue
		}
		_ = (&v2Group{dir: filepath.Join(base, e.Name()), fd: -1}).kill(wait)
	}
}

// cgroupMaker returns the pid in a cgroup name newV2Group made
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
