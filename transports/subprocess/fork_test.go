package subprocess

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kernelhost/kernelhost/core"
	"github.com/kernelhost/kernelhost/core/engine"
	"github.com/kernelhost/kernelhost/internal/testkit"
	"github.com/kernelhost/kernelhost/transports/subprocess/internal/sandbox"
	tt "github.com/kernelhost/kernelhost/transports/transporttest"
)

// forkModes are the sandbox modes the fork server's tests run in: off,
// and auto where bwrap works (the default: a failure, not a skip, under CI
// where it does not).
var forkModes = []string{SandboxOff, SandboxAuto}

// forkMode is how a fork server test's transport runs: sandboxed as
// sandbox says, and, when ready, with a python pool of readySize whose
// contexts are forked ahead of need (pool.go), which the test's contexts
// are taken from (startForked).
type forkMode struct {
	sandbox string
	ready   bool
}

const readySize = 2

func (m forkMode) String() string {
	if m.ready {
		return "sandbox=" + m.sandbox + ",ready"
	}
	return "sandbox=" + m.sandbox
}

// forEachForkMode runs test as a subtest for each of forkModes, each
// context forked when it is asked for.
func forEachForkMode(t *testing.T, test func(t *testing.T, mode forkMode)) {
	forEachMode(t, []bool{false}, test)
}

// forEachReadyMode runs test as forEachForkMode does, and again with each
// context taken ready from the pool: the guarantees of a fork made when
// asked for hold for one made ahead of need.
func forEachReadyMode(t *testing.T, test func(t *testing.T, mode forkMode)) {
	forEachMode(t, []bool{false, true}, test)
}

func forEachMode(t *testing.T, ready []bool, test func(t *testing.T, mode forkMode)) {
	for _, sandbox := range forkModes {
		for _, r := range ready {
			mode := forkMode{sandbox: sandbox, ready: r}
			t.Run(mode.String(), func(t *testing.T) {
				if sandbox != SandboxOff {
					needSandbox(t)
				}
				test(t, mode)
			})
		}
	}
}

// forkTransport is a Transport with Debian's python, interpreters
// sandboxed as mode says, whose fork server preloads preload and serves
// kernels in the directory it returns (writable in a sandbox, as are
// writable); closed with the test.
func forkTransport(t *testing.T, mode forkMode, preload []string, env []string, writable ...string) (*Transport, string) {
	t.Helper()
	testkit.NeedPythonModules(t, testkit.DebianPython, "numpy", "pandas", "matplotlib", "IPython")
	dir := t.TempDir()
	tr := New(Options{Interpreters: map[string]string{"python": testkit.DebianPython}, Preload: preload, PoolCwd: dir, PoolSizes: mode.poolSizes(), Env: env, Sandbox: SandboxOptions{Mode: mode.sandbox, Writable: append([]string{dir}, writable...)}})
	t.Cleanup(func() { _ = tr.Close() })
	if on, why, _ := tr.Sandboxed(); on != (mode.sandbox != SandboxOff) {
		t.Fatalf("%s: sandboxed %v (%s)", mode, on, why)
	}
	return tr, dir
}

func (m forkMode) poolSizes() map[string]int {
	if !m.ready {
		return nil
	}
	return map[string]int{"python": readySize}
}

// startForked starts a python kernel in cwd: in a ready mode, once the
// pool is full of the current template's forks, and it must be one of
// them.
func startForked(t *testing.T, tr *Transport, mode forkMode, cwd string) *Kernel {
	t.Helper()
	if !mode.ready {
		return startIn(t, tr, "python", cwd)
	}
	pids := awaitReadyForks(t, tr)
	k := startIn(t, tr, "python", cwd)
	if !slices.Contains(pids, k.Pid()) {
		t.Fatalf("the kernel (pid %d) is not one of the pool's ready forks %v", k.Pid(), pids)
	}
	return k
}

// awaitReadyForks waits (bounded) until python's pool holds readySize
// contexts forked from the current template, and returns their pids.
func awaitReadyForks(t *testing.T, tr *Transport) []int {
	t.Helper()
	pl := tr.pools["python"]
	deadline := time.Now().Add(2 * tt.StartTimeout)
	for {
		tmpl := pl.forks.current()
		var pids []int
		pl.mu.Lock()
		for _, s := range pl.slots {
			if isClosed(s.done) && s.p != nil && !s.p.isGone() && tmpl != nil && s.tmpl == tmpl {
				pid, _, _ := s.p.ids()
				pids = append(pids, pid)
			}
		}
		pl.mu.Unlock()
		if len(pids) == readySize {
			return pids
		}
		if time.Now().After(deadline) {
			t.Fatalf("the pool holds %d ready forks of the current template after %v, want %d", len(pids), 2*tt.StartTimeout, readySize)
		}
		time.Sleep(10 * time.Millisecond) // the pool's fills are not awaitable from here
	}
}

// mustBeForkedFrom fails unless k's interpreter was forked from template
// tmpl: unsandboxed, a child of this process (the template's sibling);
// sandboxed, pid 2 of its own PID namespace, whose init is the
// template's child.
func mustBeForkedFrom(t *testing.T, k *Kernel, tmpl int) {
	t.Helper()
	pid := k.Pid()
	if pid == tmpl {
		t.Fatalf("the kernel runs the template itself (pid %d)", pid)
	}
	if k.sandbox == nil {
		if got := parentOf(pid); got != os.Getpid() {
			t.Fatalf("the forked interpreter's parent is %d, want this process (%d)", got, os.Getpid())
		}
		return
	}
	if init := parentOf(pid); sandbox.NsPid(pid) != 2 || parentOf(init) != tmpl || sandbox.NsPid(init) != 1 {
		t.Fatalf("kernel pid %d (%d in its namespace, its parent %d) is not a context forked from the template (pid %d)", pid, sandbox.NsPid(pid), init, tmpl)
	}
}

// readyTemplate waits (bounded) until the python fork server's template is
// ready and returns its pid.
func readyTemplate(t testing.TB, tr *Transport) int {
	t.Helper()
	fs := tr.forks["python"]
	if fs == nil {
		t.Fatal("no python fork server")
	}
	deadline := time.Now().Add(2 * tt.StartTimeout) // it imports pandas and matplotlib: seconds on a loaded machine
	for {
		if p := fs.template(); p != nil {
			pid, _, _ := p.ids()
			return pid
		}
		if time.Now().After(deadline) {
			t.Fatalf("no fork template ready after %v", 2*tt.StartTimeout)
		}
		time.Sleep(20 * time.Millisecond) // the template's start is not awaitable from here
	}
}

// A context from the fork server is a child of the template's, a child of
// this process (so reaped and killed as any interpreter), has the preloaded
// modules loaded, and works as a python context: prints, results, errors,
// interrupts, restart and shutdown.
func TestForkServerContextIsAChildWithModulesLoaded(t *testing.T) {
	t.Parallel()
	forEachForkMode(t, testForkServerContextIsAChildWithModulesLoaded)
}

func testForkServerContextIsAChildWithModulesLoaded(t *testing.T, mode forkMode) {
	tr, dir := forkTransport(t, mode, DefaultPreload(), nil)
	tmpl := readyTemplate(t, tr)
	k := startIn(t, tr, "python", dir)
	pid := k.Pid()
	mustBeForkedFrom(t, k, tmpl)
	if got := tt.Exec(t, k, "import sys, os\nprint('pandas' in sys.modules, os.getpid() == "+strconv.Itoa(nsPidOrPid(k))+", os.getcwd())", false).Stream("stdout"); got != "True True "+dir+"\n" {
		t.Fatalf("got %q", got)
	}
	if e := tt.Exec(t, k, "1/0", false); e.Reply().Status != "error" || e.Reply().EName != "ZeroDivisionError" {
		t.Fatalf("1/0:%s", e)
	}
	// An interrupt reaches the forked interpreter's group.
	interruptSleepingCell(t, k)
	// A restart forks a new one; the old one is gone.
	if err := k.Restart(context.Background()); err != nil {
		t.Fatal(err)
	}
	if k.Pid() == pid {
		t.Fatal("restart kept the interpreter")
	}
	if err := syscall0(pid); err == nil {
		t.Fatalf("pid %d still runs after the restart", pid)
	}
	if got := tt.Exec(t, k, "print(1+1)", false).Stream("stdout"); got != "2\n" {
		t.Fatalf("after restart: %q", got)
	}
	mustBeForkedFrom(t, k, tmpl)
}

// nsPidOrPid is k's interpreter's pid as it sees itself.
func nsPidOrPid(k *Kernel) int {
	if k.sandbox != nil {
		return sandbox.NsPid(k.Pid())
	}
	return k.Pid()
}

// syscall0 reports whether pid exists (signal 0), a zombie not counted.
func syscall0(pid int) error {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return err
	}
	if f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:])); f[0] == "Z" {
		return os.ErrProcessDone
	}
	return nil
}

// Contexts forked from one template see nothing of each other: no global,
// env var, cwd, thread, open descriptor, numpy random state or cgroup of
// another (the warm pool's guarantees, pool.go).
func TestForkedContextsHaveNoStateOfAnother(t *testing.T) {
	t.Parallel()
	forEachReadyMode(t, testForkedContextsHaveNoStateOfAnother)
}

// numpy is the one preloaded library whose state it checks (its random
// generator, reseeded in each fork); the whole default stack costs each of
// its four templates ~1.5 CPU-s more to import, and what the stack's own
// state does in a fork is TestReadyContextShowsNoTraceOfItsWarmUp's.
func testForkedContextsHaveNoStateOfAnother(t *testing.T, mode forkMode) {
	tr, dir := forkTransport(t, mode, []string{"numpy"}, nil)
	readyTemplate(t, tr)
	elsewhere := filepath.Join(dir, "elsewhere") // writable in a sandbox, as a context's cwd must be
	if err := os.Mkdir(elsewhere, 0o755); err != nil {
		t.Fatal(err)
	}
	a := startForked(t, tr, mode, dir)
	dirty := "import os, threading, time, numpy\nkh_global = 1\nos.environ['KH_FORK_ENV'] = 'a'\nos.chdir(" + strconv.Quote(elsewhere) + ")\n" +
		"threading.Thread(target=time.sleep, args=(600,), daemon=True).start()\nkh_fd = os.open('/dev/null', os.O_RDONLY)\nos.set_inheritable(kh_fd, True)\nprint(kh_fd, numpy.random.random())"
	e := tt.Exec(t, a, dirty, false)
	if e.Reply().Status != "ok" {
		t.Fatalf("A:%s", e)
	}
	aOut := strings.Fields(e.Stream("stdout"))
	b := startForked(t, tr, mode, dir)
	probe := "import os, threading, numpy\nprint('kh_global' in globals(), os.environ.get('KH_FORK_ENV'), os.getcwd(), threading.active_count(), len(os.listdir('/proc/self/task')))\n" +
		"print(os.path.exists('/proc/self/fd/" + aOut[0] + "'), numpy.random.random())"
	got := strings.Split(tt.Exec(t, b, probe, false).Stream("stdout"), "\n")
	// Two python threads: the cell's and the driver's output thread, as in
	// any context that ran a cell; A's sleeping thread is not among them.
	// The OS may show one task more while the driver's output flusher runs
	// (a fork copies only its caller's thread: none of A's can be there).
	if want := "False None " + dir + " 2 "; !strings.HasPrefix(got[0], want) || !slices.Contains([]string{"2", "3"}, strings.TrimPrefix(got[0], want)) {
		t.Errorf("B sees %q, want %q and 2 or 3 tasks", got[0], want)
	}
	if f := strings.Fields(got[1]); f[0] != "False" || f[1] == aOut[1] {
		t.Errorf("B sees A's descriptor %s or numpy draws A's number %s: %q", aOut[0], aOut[1], got[1])
	}
	if ca, cb := cgroupOf(a.Pid()), cgroupOf(b.Pid()); CgroupsAvailable() && (ca == "" || ca == cb) {
		t.Errorf("cgroups of A %q and B %q: want one of each's own", ca, cb)
	}
}

// numpy's matrix product (OpenBLAS, whose threads start at import) in a
// forked context gives what it gives in a fresh interpreter, and does not
// hang for want of the template's BLAS threads.
func TestForkedNumpyMatmulEqualsFresh(t *testing.T) {
	t.Parallel()
	forEachForkMode(t, testForkedNumpyMatmulEqualsFresh)
}

func testForkedNumpyMatmulEqualsFresh(t *testing.T, mode forkMode) {
	tr, dir := forkTransport(t, mode, []string{"numpy"}, nil)
	readyTemplate(t, tr)
	code := "import numpy as np\na = np.random.default_rng(7).random((400, 400))\nprint(repr(float((a @ a @ a).sum())), repr(float(np.linalg.inv(a + 400 * np.eye(400)).sum())))"
	forked := startIn(t, tr, "python", dir)
	if got := tt.Exec(t, forked, "import sys\nprint('numpy' in sys.modules)", false).Stream("stdout"); got != "True\n" {
		t.Fatalf("the context is not a fork of the template that preloaded numpy: %q", got)
	}
	got := tt.Exec(t, forked, code, false)
	cold := New(Options{Interpreters: map[string]string{"python": testkit.DebianPython}, Sandbox: SandboxOptions{Mode: mode.sandbox}})
	t.Cleanup(func() { _ = cold.Close() })
	fresh := startIn(t, cold, "python", dir)
	want := tt.Exec(t, fresh, code, false)
	if got.Stream("stdout") == "" || got.Stream("stdout") != want.Stream("stdout") {
		t.Fatalf("forked: %s\nfresh: %s", got, want)
	}
}

// A preloaded package replaced on disk (pip install -U) is what the next
// context imports: the template sees its directory changed, refuses the
// fork and is replaced.
func TestUpgradedPackageIsSeenByTheNextContext(t *testing.T) {
	t.Parallel()
	forEachReadyMode(t, testUpgradedPackageIsSeenByTheNextContext)
}

func testUpgradedPackageIsSeenByTheNextContext(t *testing.T, mode forkMode) {
	lib := readOnlyLib(t, mode)
	write := func(version string) {
		pkg := filepath.Join(lib, "khpkg")
		if err := os.RemoveAll(pkg); err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(pkg, 0o755); err != nil {
			t.Fatal(err)
		}
		testkit.WriteFile(t, filepath.Join(pkg, "__init__.py"), "VERSION = "+version+"\n")
	}
	write("1")
	tr, dir := forkTransport(t, mode, []string{"khpkg"}, []string{"PYTHONPATH=" + lib})
	tmpl := readyTemplate(t, tr)
	probe := "import sys\nprint('khpkg' in sys.modules)\nimport khpkg\nprint(khpkg.VERSION)"
	if got := tt.Exec(t, startForked(t, tr, mode, dir), probe, false).Stream("stdout"); got != "True\n1\n" {
		t.Fatalf("first context: %q", got)
	}
	write("2")
	if got := tt.Exec(t, startIn(t, tr, "python", dir), probe, false).Stream("stdout"); got != "False\n2\n" {
		t.Fatalf("after the upgrade: %q, want a fresh import of version 2", got)
	}
	if next := readyTemplate(t, tr); next == tmpl {
		t.Fatalf("the stale template (pid %d) still serves", tmpl)
	}
	if got := tt.Exec(t, startForked(t, tr, mode, dir), probe, false).Stream("stdout"); got != "True\n2\n" {
		t.Fatalf("from the new template: %q", got)
	}
}

// readOnlyLib is a directory for a test's python package that an
// interpreter sandboxed as mode says sees, read-only (as the system's
// site-packages): the sandbox's own /tmp hides the host's.
func readOnlyLib(t *testing.T, mode forkMode) string {
	t.Helper()
	if mode.sandbox == SandboxOff {
		return t.TempDir()
	}
	lib, err := os.MkdirTemp("/var/tmp", "kh-fork-lib-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(lib) })
	return lib
}

// With the sandbox on, a context bwrap started (no fork template: cold or
// from the warm pool) cannot be copied: a copy shares its source's sandbox
// (family.go), and bwrap's init ends with its interpreter. ForkKernel
// says so, naming bwrap and the fork template; the context runs on.
func TestNoLiveForkWhenSandboxed(t *testing.T) {
	needSandbox(t)
	tr := New(Options{Interpreters: map[string]string{"python": testkit.DebianPython}, Sandbox: SandboxOptions{Mode: SandboxOn}})
	t.Cleanup(func() { _ = tr.Close() })
	k := startIn(t, tr, "python", t.TempDir())
	stdoutOf(t, k, "x = 41")
	_, err := tr.ForkKernel(context.Background(), k)
	var ce *core.Error
	if !errors.As(err, &ce) || ce.Kind != core.KindUnsupported || !strings.Contains(err.Error(), "bwrap started it") || !strings.Contains(err.Error(), "fork template") {
		t.Fatalf("ForkKernel of a context bwrap started: %v, want an unsupported error that names bwrap and the fork template", err)
	}
	if got := stdoutOf(t, k, "print(x + 1)"); got != "42\n" {
		t.Fatalf("the context after the refused fork: %q", got)
	}
}

// ForkKernel copies a live context: variables, imports, functions, cwd and
// IPython history, not the process environment its cells changed (the copy
// has a new context's);
// afterwards each goes its own way (a write in one is not seen in the
// other), and the source runs on. A busy source and a bash context are
// refused with errors that say why.
func TestForkKernelCopiesALiveContext(t *testing.T) {
	t.Parallel()
	tr, dir := forkTransport(t, forkMode{sandbox: SandboxOff}, nil, nil)
	sub := filepath.Join(dir, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	src := startIn(t, tr, "python", dir)
	setup := "import os, json, numpy as np\nx = 41\narr = np.zeros(1000)\ndef f(): return x + 1\nos.chdir('sub')\nprint('set')"
	if got := tt.Exec(t, src, setup, false).Stream("stdout"); got != "set\n" {
		t.Fatalf("setup: %q", got)
	}
	if got := stdoutOf(t, src, dirtyEnv); got != "dirty\n" {
		t.Fatalf("env change: %q", got)
	}
	// The IPython shell, once a cell made it, keeps the inputs (In).
	tt.Exec(t, src, "get_ipython()", false)
	tt.Exec(t, src, "'kh-history-mark'", false)
	fk := liveFork(t, tr, src)
	mustHaveStartEnv(t, tr, dir, src, fk, sub)
	ctx, cancel := context.WithTimeout(context.Background(), tt.StartTimeout)
	defer cancel()
	if parentOf(fk.Pid()) != os.Getpid() {
		t.Fatalf("the fork's parent is %d, want this process", parentOf(fk.Pid()))
	}
	if got := tt.Exec(t, fk, "print(f(), json.dumps([1]), os.getcwd())\narr[0] = 7\nx = 1", false).Stream("stdout"); got != "42 [1] "+sub+"\n" {
		t.Fatalf("fork: %q", got)
	}
	if got := tt.Exec(t, fk, "print(any('kh-history-mark' in i for i in In))", false).Stream("stdout"); got != "True\n" {
		t.Fatalf("the fork's IPython history lacks the source's input: %q", got)
	}
	if got := tt.Exec(t, src, "print(f(), arr[0])", false).Stream("stdout"); got != "42 0.0\n" {
		t.Fatalf("source after the fork's writes: %q", got)
	}
	if got := tt.Exec(t, fk, "print(f(), arr[0])", false).Stream("stdout"); got != "2 7.0\n" {
		t.Fatalf("fork after its writes: %q", got)
	}
	// The source's output thread still flushes on its own after the fork:
	// a print a sleeping cell did not flush arrives while it sleeps.
	late := tt.Send(t, src, "import time\nprint('late')\ntime.sleep(30)", false)
	tt.Collect(t, src, late, tt.ExecTimeout, func(r tt.Received) bool { return r.Type == core.MsgStream })
	if err := src.Interrupt(ctx); err != nil {
		t.Fatal(err)
	}
	tt.Collect(t, src, late, tt.ExecTimeout, nil)
	busy := tt.Send(t, src, "import time\nprint('busy', flush=True)\ntime.sleep(30)", false)
	tt.Collect(t, src, busy, tt.ExecTimeout, func(r tt.Received) bool { return r.Type == core.MsgStream })
	if _, err := tr.ForkKernel(ctx, src); err == nil || !strings.Contains(err.Error(), "idle") {
		t.Fatalf("fork of a busy context: %v, want an error saying to wait for idle", err)
	}
	if err := src.Interrupt(ctx); err != nil {
		t.Fatal(err)
	}
	tt.Collect(t, src, busy, tt.ExecTimeout, nil)
	sh := startIn(t, tr, "bash", dir)
	if _, err := tr.ForkKernel(ctx, sh); err == nil || !strings.Contains(err.Error(), "bash") {
		t.Fatalf("fork of a bash context: %v, want an error naming bash", err)
	}
}

// A forked kernel in a directory other than the template's behaves as one
// started there (the pool's test, TestPooledKernelInAnotherCwdIsAsIfStartedThere):
// everything testkit.CwdProbe prints is what a cold-started kernel of the
// same interpreter prints.
func TestForkedKernelInAnotherCwdIsAsIfStartedThere(t *testing.T) {
	t.Parallel()
	forEachReadyMode(t, testForkedKernelInAnotherCwdIsAsIfStartedThere)
}

func testForkedKernelInAnotherCwdIsAsIfStartedThere(t *testing.T, mode forkMode) {
	other := t.TempDir()
	tr, _ := forkTransport(t, mode, []string{"json"}, nil, other)
	tmpl := readyTemplate(t, tr)
	testkit.CwdFixture(t, other)
	k := startForked(t, tr, mode, other)
	mustBeForkedFrom(t, k, tmpl)
	cold := New(Options{Interpreters: map[string]string{"python": testkit.DebianPython}, Sandbox: SandboxOptions{Mode: mode.sandbox, Writable: []string{other}}})
	defer cold.Close()
	c := startIn(t, cold, "python", other)
	if err := os.WriteFile(filepath.Join(other, "khlate.py"), []byte("V = 'late'\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	probe := func(k *Kernel) string {
		t.Helper()
		e := tt.Exec(t, k, testkit.CwdProbe("python"), false)
		if e.Reply().Status != "ok" {
			t.Fatalf("probe:%s", e)
		}
		return e.Stream("stdout")
	}
	if want, got := probe(c), probe(k); got != want {
		t.Errorf("the forked kernel prints\n%s\na cold one\n%s", got, want)
	}
}

// A forked context is bound by the limits (limits.go) as a started one: past
// its memory limit it is killed with the error naming the limit, and its
// neighbour, forked from the same template, keeps its state.
func TestForkedContextHasItsLimits(t *testing.T) {
	t.Parallel()
	forEachReadyMode(t, testForkedContextHasItsLimits)
}

func testForkedContextHasItsLimits(t *testing.T, mode forkMode) {
	dir := t.TempDir()
	tr := New(Options{Interpreters: map[string]string{"python": testkit.DebianPython}, Preload: []string{"wave"}, PoolCwd: dir, PoolSizes: mode.poolSizes(), Limits: Limits{MemoryBytes: 256 << 20}, Sandbox: SandboxOptions{Mode: mode.sandbox, Writable: []string{dir}}})
	if err := tr.Limited(); err != nil {
		tr.Close()
		testkit.Missingf(t, "no cgroup controller for the limits here: %v", err)
	}
	t.Cleanup(func() { _ = tr.Close() })
	readyTemplate(t, tr)
	e, err := engine.NewEngine(engine.Config{Transport: tr, DefaultCwd: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close(context.Background()) })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if mode.ready {
		awaitReadyForks(t, tr) // both are taken from the pool: it is full
	}
	hog, err := e.CreateContext(ctx, "python", "")
	if err != nil {
		t.Fatal(err)
	}
	neighbour, err := e.CreateContext(ctx, "python", "")
	if err != nil {
		t.Fatal(err)
	}
	runStdout(t, ctx, e, neighbour.ID, "keep = 42")
	if got := runStdout(t, ctx, e, hog.ID, "import sys\nprint('wave' in sys.modules)"); got != "True\n" {
		t.Fatalf("the context is not a fork of the template: %q", got)
	}
	var errs []engine.Output
	for _, o := range runAll(t, ctx, e, hog.ID, "b = bytearray(600 << 20)\nprint('not reached')") {
		if o.Type == engine.OutError {
			errs = append(errs, o)
		}
		if o.Type == engine.OutStdout {
			t.Errorf("stdout %q: the allocation past the limit succeeded", o.Text)
		}
	}
	if len(errs) != 1 || errs[0].ErrName != "MemoryLimitExceeded" || !strings.Contains(errs[0].ErrValue, "256 MiB") {
		t.Fatalf("errors %+v, want one MemoryLimitExceeded naming 256 MiB", errs)
	}
	if got := runStdout(t, ctx, e, neighbour.ID, "print(keep)"); got != "42\n" {
		t.Errorf("the neighbour's variable: %q", got)
	}
}

// interruptSleepingCell runs a cell that prints and sleeps for a minute in
// k, interrupts it once it printed, and fails t unless the cell ends with
// KeyboardInterrupt.
func interruptSleepingCell(t *testing.T, k core.Kernel) {
	t.Helper()
	e := tt.Send(t, k, "import time\nprint('sleeping', flush=True)\ntime.sleep(60)", false)
	tt.Collect(t, k, e, tt.ExecTimeout, func(r tt.Received) bool { return r.Type == core.MsgStream })
	if err := k.Interrupt(context.Background()); err != nil {
		t.Fatal(err)
	}
	tt.Collect(t, k, e, tt.ExecTimeout, nil)
	if e.Reply().EName != "KeyboardInterrupt" {
		t.Fatalf("interrupted sleep:%s", e)
	}
}

// A cell of a forked context forks twice (multiprocessing does): each
// os.fork finishes, and the context's output still flows after them. The
// context itself came out of a fork, whose child hooks gave it new locks:
// the parent's hook must release those, not the template's.
func TestForkedContextForksTwice(t *testing.T) {
	for _, mode := range []string{SandboxOff, SandboxAuto} {
		t.Run("sandbox="+mode, func(t *testing.T) {
			if mode != SandboxOff {
				needSandbox(t)
			}
			tr, dir := forkTransport(t, forkMode{sandbox: mode}, []string{"json"}, nil)
			tmpl := readyTemplate(t, tr)
			k := startIn(t, tr, "python", dir)
			mustBeForkedFrom(t, k, tmpl)
			code := `import os
codes = []
for i in range(2):
    pid = os.fork()
    if pid == 0:
        os._exit(7 + i)
    codes.append(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
print(codes)`
			if got := stdoutOf(t, k, code); got != "[7, 8]\n" {
				t.Fatalf("two forks: %q", got)
			}
			if got := stdoutOf(t, k, "print(6 * 7)"); got != "42\n" {
				t.Fatalf("after the forks: %q", got)
			}
		})
	}
}

// liveFork copies the live context src (ForkKernel, bounded by
// tt.StartTimeout) and shuts the copy down when the test ends.
func liveFork(t *testing.T, tr *Transport, src *Kernel) *Kernel {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), tt.StartTimeout)
	defer cancel()
	ck, err := tr.ForkKernel(ctx, src)
	if err != nil {
		t.Fatal(err)
	}
	fk := ck.(*Kernel)
	t.Cleanup(func() { fk.Shutdown(context.Background()) })
	return fk
}

// dirtyEnv is a cell that changes its context's environment: a variable
// added, one of the start environment removed and one changed.
const dirtyEnv = "import os\nos.environ['MINE'] = 'x'\nos.environ.pop('HOME')\nos.environ['PATH'] = '/nowhere'\nprint('dirty')"

// envProbe prints the process environment (the C one, which child
// processes get), less PWD, and PWD apart.
const envProbe = "import os, json, ctypes\nenv = {}\nfor kv in ctypes.POINTER(ctypes.c_char_p).in_dll(ctypes.CDLL(None), 'environ'):\n" +
	"    if kv is None: break\n" +
	"    k, _, v = kv.decode().partition('=')\n" +
	"    env[k] = v\n" +
	"print(json.dumps(sorted((k, v) for k, v in env.items() if k != 'PWD'), separators=(',', ':')))\n" +
	"print(env.get('PWD'), os.environ == env)"

// mustHaveStartEnv fails unless cp's process environment is a new
// context's in dir (HOME and PATH included, none of src's dirtyEnv), with
// PWD naming cwd, while src keeps what dirtyEnv did.
func mustHaveStartEnv(t *testing.T, tr *Transport, dir string, src, cp *Kernel, cwd string) {
	t.Helper()
	nk := startIn(t, tr, "python", dir)
	fresh := stdoutOf(t, nk, envProbe)
	tt.ShutdownAndDrain(t, nk) // the caller counts its processes
	// A line of its own: values have spaces (make's MAKEFLAGS under CI).
	want, _, _ := strings.Cut(fresh, "\n")
	if !strings.Contains(want, `["HOME",`) || !strings.Contains(want, `["PATH",`) {
		t.Fatalf("a new context's environment lacks HOME or PATH: %s", fresh)
	}
	if got := stdoutOf(t, cp, envProbe); got != want+"\n"+cwd+" True\n" {
		t.Fatalf("the copy's environment:\n%s\nwant a new context's, PWD %s:\n%s", got, cwd, fresh)
	}
	if got := stdoutOf(t, src, "import os\nprint(os.environ.get('MINE'), 'HOME' in os.environ, os.environ['PATH'])"); got != "x False /nowhere\n" {
		t.Fatalf("the source's environment after the fork: %q, want what its cell made of it", got)
	}
}
