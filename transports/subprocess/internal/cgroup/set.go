package cgroup

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// Set is one process's cgroups: its own cgroup v2, where the machine
// offers one and cgroups are on, which ends every process it started, and
// its limits' groups. A process is started in it (Start) or moved into it
// (Enter); it is ended (Kill) and removed (Remove) with the process. Its
// methods are safe for concurrent use; all but Start and Enter do nothing
// on a nil Set.
type Set struct {
	mu  sync.Mutex
	cg  *v2Group     // its cgroup v2 until removed; nil: none
	in  bool         // the process was started in cg, or entered it
	lim *limitGroups // its limits, nil: none
}

// NewSet makes the cgroups of one process: a cgroup v2 when cgroups is on
// and the machine offers one (Base), and the groups of l's limits (l nil:
// none). Nothing is in them yet.
func NewSet(l *Limiter, cgroups bool) (*Set, error) {
	s := &Set{}
	var err error
	if cgroups {
		if s.cg, err = newV2Group(); err != nil {
			return nil, err
		}
	}
	if l != nil {
		if s.lim, err = l.newGroups(s.cg); err != nil {
			if s.cg != nil {
				_ = s.cg.kill(0) // nothing in it
			}
			return nil, err
		}
	}
	return s, nil
}

// Start starts cmd in s: cloned into its cgroup v2, forked by a thread in
// its v1 groups. On error the caller removes s (Remove).
func (s *Set) Start(cmd *exec.Cmd) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cg != nil {
		if cmd.SysProcAttr == nil {
			cmd.SysProcAttr = &syscall.SysProcAttr{}
		}
		cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, s.cg.fd
	}
	err := s.lim.start(cmd)
	if s.cg != nil {
		s.in = err == nil
		s.cg.started()
	}
	return err
}

// Enter moves the running process pid into s (a forked one: it was not
// started there). The memory it shares with the process it was forked
// from stays charged there; what it allocates or copies from now on is
// charged to s. On error the caller ends pid and removes s.
func (s *Set) Enter(pid int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	procs := []byte(strconv.Itoa(pid))
	if s.cg != nil {
		s.cg.started()
		if err := os.WriteFile(filepath.Join(s.cg.dir, "cgroup.procs"), procs, 0); err != nil {
			return fmt.Errorf("enter cgroup %s: %w", s.cg.dir, err)
		}
		s.in = true
	}
	if s.lim != nil {
		for _, g := range s.lim.v1 {
			if err := os.WriteFile(filepath.Join(g.dir, "cgroup.procs"), procs, 0); err != nil {
				return fmt.Errorf("subprocess limits: enter %s: %w", g.dir, err)
			}
		}
	}
	return nil
}

// In says whether the process is in a cgroup v2 of its own: Kill then ends
// it and everything it started, wherever they moved.
func (s *Set) In() bool {
	if s == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.in
}

// Kill ends every process in s's cgroup v2 and removes it, waiting at most
// wait for it to empty (it is removed by a later Kill or Remove if not).
func (s *Set) Kill(wait time.Duration) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cg != nil && s.cg.kill(wait) == nil {
		s.cg = nil // empty, and removed
	}
}

// Remove ends what is left in s (Kill) and removes its cgroups, waiting at
// most wait for each to empty.
func (s *Set) Remove(wait time.Duration) {
	if s == nil {
		return
	}
	s.Kill(wait)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lim.remove(wait)
}

// MemoryExceeded says, when the kernel killed a process of s's for its
// memory limit, what to tell the user; "" otherwise. It must be read
// before s is removed.
func (s *Set) MemoryExceeded() string {
	if s == nil {
		return ""
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lim.memoryExceeded()
}

// MoveOut moves process pid out of s's v1 groups into their parents, this
// process's cgroups there: best effort (what ends a member of a family is
// its cgroup v2; pid left in a v1 group only counts its pages there, and
// keeps the group from being removed: Remove gives up on it).
func (s *Set) MoveOut(pid int) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lim == nil {
		return
	}
	for _, g := range s.lim.v1 {
		_ = os.WriteFile(filepath.Join(g.base, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0)
	}
}
