package cgroup

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Limits per context: each interpreter, with everything it starts, gets a
// memory limit, a number of processes and a CPU weight in cgroups of its
// own. Where this process's cgroup v2 offers a controller (delegated, with
// the controller enabled for its children), the limit goes into the
// interpreter's v2 cgroup (cgroup.go's). Where it does not, the cgroup v1
// hierarchy of that controller is used, under this process's own cgroup
// there: v1 has no clone-into-cgroup, so the thread that forks the
// interpreter moves itself into the interpreter's v1 cgroups for the fork
// and back after it (the child inherits the forking thread's cgroups; the
// Go runtime makes no thread from a locked one, so no runtime thread lands
// there).

// Limits bound one interpreter and everything it starts. Zero: no limit.
type Limits struct {
	// MemoryBytes bounds its memory (swap included, where the machine
	// accounts swap); at the limit the kernel kills it (OOM), and the
	// context's execution ends with MemoryLimitExceeded.
	MemoryBytes int64
	// Pids bounds its processes and threads: past it fork fails (EAGAIN).
	Pids int
	// CPUWeight is its share of the CPU against other busy processes,
	// 1-10000 as cgroup v2's cpu.weight (every cgroup's default is 100).
	CPUWeight int
}

// The controllers limits use, by limit.
const (
	ctlMemory = "memory"
	ctlPids   = "pids"
	ctlCPU    = "cpu"
)

// Limiter is where each set limit is applied, found once per transport.
type Limiter struct {
	lim Limits
	v2  []string          // controllers applied in the interpreter's v2 cgroup
	v1  map[string]v1Base // the others: controller -> its v1 hierarchy
}

// v1Base is this process's cgroup in one v1 hierarchy.
type v1Base struct {
	ctls string // the hierarchy's controllers, as /proc/self/cgroup names them
	dir  string
}

// settingOf names the host setting of each controller's limit, for errors.
var settingOf = map[string]string{ctlMemory: "context-memory", ctlPids: "context-pids", ctlCPU: "context-cpu-weight"}

// NewLimiter finds a controller for every limit set in lim, in the v2
// cgroup of each process when cgroups (a cgroup per process) is on; an
// error names each limit this machine cannot apply (an operator who set a
// limit gets it or no interpreter, never an unbounded one). nil when no
// limit is set.
func NewLimiter(lim Limits, cgroups bool) (*Limiter, error) {
	if lim.MemoryBytes < 0 || lim.Pids < 0 || lim.CPUWeight < 0 || lim.CPUWeight > 10000 {
		return nil, fmt.Errorf("subprocess limits %+v: memory and pids must be 0 (none) or more, the CPU weight 0 (none) or 1-10000", lim)
	}
	var want []string
	if lim.MemoryBytes > 0 {
		want = append(want, ctlMemory)
	}
	if lim.Pids > 0 {
		want = append(want, ctlPids)
	}
	if lim.CPUWeight > 0 {
		want = append(want, ctlCPU)
	}
	if len(want) == 0 {
		return nil, nil
	}
	l := &Limiter{lim: lim, v1: map[string]v1Base{}}
	v1 := v1Bases()
	var missing []string
	for _, ctl := range want {
		if base := base(); cgroups && base != "" && enableV2(base, ctl) {
			l.v2 = append(l.v2, ctl)
		} else if b, ok := v1[ctl]; ok {
			l.v1[ctl] = b
		} else {
			missing = append(missing, settingOf[ctl])
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("subprocess: %s set, but this process has no cgroup controller to apply it with: it needs cgroup v2 delegated to it (systemd's Delegate=yes) with the controller enabled in its cgroup's cgroup.subtree_control, or a writable cgroup v1 hierarchy of that controller (docs/operating.md, Limits per context)", strings.Join(missing, ", "))
	}
	return l, nil
}

// Limits are the limits l applies; zero when l is nil (none).
func (l *Limiter) Limits() Limits {
	if l == nil {
		return Limits{}
	}
	return l.lim
}

// InV2 says whether controller ctl ("memory", "pids", "cpu") applies its
// limit in each process's v2 cgroup; V1 names the v1 hierarchy it applies
// in otherwise (its controllers, as /proc/PID/cgroup names them, and this
// process's cgroup there). For tests.
func (l *Limiter) InV2(ctl string) bool { return slices.Contains(l.v2, ctl) }

// V1 is the v1 hierarchy controller ctl applies its limit in (InV2).
func (l *Limiter) V1(ctl string) (ctls, dir string, ok bool) {
	b, ok := l.v1[ctl]
	return b.ctls, b.dir, ok
}

// enableV2 reports whether children of base get controller ctl, enabling
// it when base may (a delegated cgroup holding no process of its own).
func enableV2(base, ctl string) bool {
	has := func() bool {
		b, _ := os.ReadFile(filepath.Join(base, "cgroup.subtree_control"))
		return slices.Contains(strings.Fields(string(b)), ctl)
	}
	if has() {
		return true
	}
	_ = os.WriteFile(filepath.Join(base, "cgroup.subtree_control"), []byte("+"+ctl), 0)
	return has()
}

// v1Bases finds this process's cgroup in each v1 hierarchy where it can
// make a child cgroup, by controller.
func v1Bases() map[string]v1Base {
	out := map[string]v1Base{}
	self, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return out
	}
	paths := map[string]string{} // "cpu,cpuacct" -> /path
	for _, line := range strings.Split(string(self), "\n") {
		if f := strings.SplitN(line, ":", 3); len(f) == 3 && f[1] != "" {
			paths[f[1]] = f[2]
		}
	}
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return out
	}
	sc := bufio.NewScanner(bytes.NewReader(mounts))
	for sc.Scan() {
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		fields, postFields := strings.Fields(pre), strings.Fields(post)
		if !ok || len(fields) < 5 || len(postFields) < 3 || postFields[0] != "cgroup" {
			continue
		}
		opts := strings.Split(postFields[2], ",")
		for ctls, rel := range paths {
			names := strings.Split(ctls, ",")
			if !slices.ContainsFunc(names, func(n string) bool { return !slices.Contains(opts, n) }) {
				dir := filepath.Join(fields[4], rel)
				probe := filepath.Join(dir, fmt.Sprintf("kernelhost-probe-%d", os.Getpid()))
				if os.Mkdir(probe, 0o755) != nil {
					continue
				}
				os.Remove(probe)
				for _, n := range names {
					if n == ctlMemory || n == ctlPids || n == ctlCPU {
						out[n] = v1Base{ctls: ctls, dir: dir}
					}
				}
			}
		}
	}
	return out
}

// limitGroups is one interpreter's limits: the files written in its v2
// cgroup, and its v1 cgroups.
type limitGroups struct {
	l     *Limiter
	v2dir string   // its v2 cgroup where l.v2 applies; "" none
	v1    []v1Pair // one per v1 hierarchy used
}

type v1Pair struct{ base, dir string }

// newGroups sets the limits up for one process whose v2 cgroup is cg
// (nil: none, then l.v2 is empty: NewLimiter asked for cgroups).
func (l *Limiter) newGroups(cg *v2Group) (g *limitGroups, err error) {
	g = &limitGroups{l: l}
	defer func() {
		if err != nil {
			g.remove(0)
		}
	}()
	write := func(dir, file, value string) error {
		if err := os.WriteFile(filepath.Join(dir, file), []byte(value), 0); err != nil {
			return fmt.Errorf("set %s: %w", filepath.Join(dir, file), err)
		}
		return nil
	}
	if len(l.v2) > 0 {
		if cg == nil {
			return nil, errors.New("subprocess limits: no cgroup v2 for the interpreter")
		}
		g.v2dir = cg.dir
		for _, ctl := range l.v2 {
			switch ctl {
			case ctlMemory:
				err = write(cg.dir, "memory.max", strconv.FormatInt(l.lim.MemoryBytes, 10))
				_ = write(cg.dir, "memory.swap.max", "0") // absent without swap accounting
			case ctlPids:
				err = write(cg.dir, "pids.max", strconv.Itoa(l.lim.Pids))
			case ctlCPU:
				err = write(cg.dir, "cpu.weight", strconv.Itoa(l.lim.CPUWeight))
			}
			if err != nil {
				return nil, err
			}
		}
	}
	name := fmt.Sprintf("kernelhost-%d-%d", os.Getpid(), seq.Add(1))
	for ctl, b := range l.v1 {
		i := slices.IndexFunc(g.v1, func(p v1Pair) bool { return p.base == b.dir })
		if i < 0 {
			dir := filepath.Join(b.dir, name)
			err := os.Mkdir(dir, 0o755)
			if errors.Is(err, os.ErrExist) && os.Remove(dir) == nil {
				err = os.Mkdir(dir, 0o755) // an empty one left by an earlier process with this pid (as in newV2Group)
			}
			if err != nil {
				return nil, fmt.Errorf("subprocess limits: %w", err)
			}
			g.v1 = append(g.v1, v1Pair{base: b.dir, dir: dir})
			i = len(g.v1) - 1
		}
		dir := g.v1[i].dir
		switch ctl {
		case ctlMemory:
			err = write(dir, "memory.limit_in_bytes", strconv.FormatInt(l.lim.MemoryBytes, 10))
			_ = write(dir, "memory.memsw.limit_in_bytes", strconv.FormatInt(l.lim.MemoryBytes, 10)) // absent without swap accounting
		case ctlPids:
			err = write(dir, "pids.max", strconv.Itoa(l.lim.Pids))
		case ctlCPU:
			err = write(dir, "cpu.shares", strconv.Itoa(max(2, l.lim.CPUWeight*1024/100)))
		}
		if err != nil {
			return nil, err
		}
	}
	return g, nil
}

// start starts cmd inside g's v1 cgroups (its v2 cgroup is the caller's,
// by clone). The forking thread is moved there for the fork and back; a
// thread that cannot be moved back stays locked, so that it ends with this
// goroutine instead of running other goroutines inside a context's limits.
func (g *limitGroups) start(cmd *exec.Cmd) error {
	if g == nil || len(g.v1) == 0 {
		return cmd.Start()
	}
	runtime.LockOSThread()
	tid := []byte(strconv.Itoa(unix.Gettid()))
	var err error
	moved := 0
	for _, p := range g.v1 {
		if err = os.WriteFile(filepath.Join(p.dir, "tasks"), tid, 0); err != nil {
			err = fmt.Errorf("subprocess limits: enter %s: %w", p.dir, err)
			break
		}
		moved++
	}
	if err == nil {
		err = cmd.Start()
	}
	back := true
	for _, p := range g.v1[:moved] {
		back = back && os.WriteFile(filepath.Join(p.base, "tasks"), tid, 0) == nil
	}
	if back {
		runtime.UnlockOSThread()
	}
	return err
}

// memoryExceeded says, when the kernel killed a process of g's for its
// memory limit, what to tell the user; "" otherwise. It must be read
// before the cgroups are removed.
func (g *limitGroups) memoryExceeded() string {
	if g == nil || g.l.lim.MemoryBytes == 0 {
		return ""
	}
	var kills int
	if slices.Contains(g.l.v2, ctlMemory) {
		kills = counter(filepath.Join(g.v2dir, "memory.events"), "oom_kill")
	} else if b, ok := g.l.v1[ctlMemory]; ok {
		for _, p := range g.v1 {
			if p.base == b.dir {
				kills = counter(filepath.Join(p.dir, "memory.oom_control"), "oom_kill")
			}
		}
	}
	if kills == 0 {
		return ""
	}
	return fmt.Sprintf("The interpreter used all the memory a context may (%s, the host's -context-memory setting) and was killed; "+
		"the context restarts without its state at its next execution", formatBytes(g.l.lim.MemoryBytes))
}

// counter reads "name N" from a cgroup's flat keyed file; 0 if absent.
func counter(file, name string) int {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	return 0
}

// remove removes g's v1 cgroups once their processes are gone (killed
// already), waiting for that at most wait.
func (g *limitGroups) remove(wait time.Duration) {
	if g == nil {
		return
	}
	deadline := time.Now().Add(wait)
	for len(g.v1) > 0 {
		err := os.Remove(g.v1[0].dir)
		if err == nil || errors.Is(err, os.ErrNotExist) {
			g.v1 = g.v1[1:]
			continue
		}
		if time.Now().After(deadline) {
			return // left for a later remove; the name is never reused by this process
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// ParseBytes reads a size: a number of bytes, optionally with a unit (K, M,
// G, T for powers of 1000; KiB, MiB, GiB, TiB for powers of 1024; B).
// "" and "0" are 0.
func ParseBytes(s string) (int64, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, nil
	}
	i := strings.IndexFunc(s, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	num, unit := s, ""
	if i >= 0 {
		num, unit = s[:i], strings.TrimSpace(s[i:])
	}
	mult := map[string]float64{"": 1, "B": 1, "K": 1e3, "KB": 1e3, "M": 1e6, "MB": 1e6, "G": 1e9, "GB": 1e9, "T": 1e12, "TB": 1e12,
		"KIB": 1 << 10, "MIB": 1 << 20, "GIB": 1 << 30, "TIB": 1 << 40}[strings.ToUpper(unit)]
	n, err := strconv.ParseFloat(num, 64)
	if err != nil || mult == 0 || n < 0 || n*mult > 1<<62 {
		return 0, fmt.Errorf("size %q: want a number of bytes with an optional unit (512MiB, 2G)", s)
	}
	return int64(n * mult), nil
}

// formatBytes writes n as ParseBytes reads it, in the largest binary unit
// that divides it.
func formatBytes(n int64) string {
	for _, u := range []struct {
		name string
		size int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n >= u.size && n%u.size == 0 {
			return strconv.FormatInt(n/u.size, 10) + " " + u.name
		}
	}
	return strconv.FormatInt(n, 10) + " bytes"
}
