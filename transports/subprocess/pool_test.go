package subprocess

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kernelhost/kernelhost/core"
	"github.com/kernelhost/kernelhost/core/engine"
	"github.com/kernelhost/kernelhost/internal/testkit"
	"github.com/kernelhost/kernelhost/transports/subprocess/internal/cgroup"
	tt "github.com/kernelhost/kernelhost/transports/transporttest"
)

// pooledTransport is a Transport whose pools (size 1 for each of langs)
// serve kernels in the directory it returns; closed with the test.
func pooledTransport(t *testing.T, langs ...string) (*Transport, string) {
	t.Helper()
	dir := t.TempDir()
	sizes := map[string]int{}
	for _, l := range langs {
		sizes[l] = 1
	}
	// The test's temporary directories (dir's parent holds them all) are its
	// workspace: a pooled interpreter may be moved into any of them.
	tr := New(Options{PoolSizes: sizes, PoolCwd: dir, Sandbox: SandboxOptions{Writable: []string{filepath.Dir(dir)}}})
	t.Cleanup(func() { _ = tr.Close() })
	return tr, dir
}

// readyPid waits (bounded) until lang's pool holds a ready interpreter whose
// pid is not one of not, and returns its pid.
func readyPid(t testing.TB, tr *Transport, lang string, not ...int) int {
	t.Helper()
	pl := tr.pools[lang]
	if pl == nil {
		t.Fatalf("no %s pool", lang)
	}
	deadline := time.Now().Add(tt.StartTimeout)
	for {
		pl.mu.Lock()
		pid := 0
		for _, s := range pl.slots {
			if !isClosed(s.done) || s.p == nil || s.p.isGone() {
				continue
			}
			if p, _, _ := s.p.ids(); !slices.Contains(not, p) {
				pid = p
				break
			}
		}
		pl.mu.Unlock()
		if pid != 0 {
			return pid
		}
		if time.Now().After(deadline) {
			t.Fatalf("the %s pool has no ready interpreter after %v", lang, tt.StartTimeout)
		}
		time.Sleep(20 * time.Millisecond) // the pool's start is not awaitable from here
	}
}

func startIn(t *testing.T, tr *Transport, lang, cwd string) *Kernel {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), tt.StartTimeout)
	defer cancel()
	k, err := tr.StartKernel(ctx, core.KernelSpec{Language: lang, Cwd: cwd})
	if err != nil {
		t.Fatalf("StartKernel(%s): %v", lang, err)
	}
	t.Cleanup(func() { k.Shutdown(context.Background()) })
	return k.(*Kernel)
}

// poolCase is, per language, code that leaves state behind (a global, an
// env var, a cwd) and code that prints what of it is visible.
var poolCases = map[string]struct{ dirty, probe string }{
	"python": {
		dirty: "import os\nkh_pool_global = 1\nos.environ['KH_POOL_ENV'] = 'a'\nos.chdir(%q)",
		probe: "import os\nprint('kh_pool_global' in globals(), os.environ.get('KH_POOL_ENV'), os.getcwd())",
	},
	"javascript": {
		dirty: "globalThis.khPoolGlobal = 1; process.env.KH_POOL_ENV = 'a'; process.chdir(%q);",
		probe: "console.log(typeof globalThis.khPoolGlobal !== 'undefined', process.env.KH_POOL_ENV === undefined ? 'None' : process.env.KH_POOL_ENV, process.cwd())",
	},
}

// A kernel that takes a pooled interpreter sees nothing another kernel did:
// no global, no env var, not its cwd. Its interpreter is the one the pool
// had ready.
func TestPooledKernelHasNoStateOfAnother(t *testing.T) {
	t.Parallel()
	for _, lang := range []string{"python", "javascript"} {
		t.Run(lang, func(t *testing.T) {
			if lang == "javascript" {
				testkit.NeedCommand(t, "node", "nodejs")
			}
			tr, dir := pooledTransport(t, lang)
			elsewhere := t.TempDir()
			first := readyPid(t, tr, lang)
			a := startIn(t, tr, lang, dir)
			if a.Pid() != first {
				t.Fatalf("kernel A runs pid %d, not the pooled %d", a.Pid(), first)
			}
			c := poolCases[lang]
			if e := tt.Exec(t, a, strings.Replace(c.dirty, "%q", strconv.Quote(elsewhere), 1), false); e.Reply().Status != "ok" {
				t.Fatalf("A:%s", e)
			}
			second := readyPid(t, tr, lang, first)
			b := startIn(t, tr, lang, dir)
			if b.Pid() != second {
				t.Fatalf("kernel B runs pid %d, not the pooled %d", b.Pid(), second)
			}
			want := "False None " + dir + "\n"
			if lang == "javascript" {
				want = "false None " + dir + "\n"
			}
			if got := tt.Exec(t, b, c.probe, false).Stream("stdout"); got != want {
				t.Errorf("B sees %q, want %q", got, want)
			}
		})
	}
}

// A restart takes the pooled interpreter, which has none of the old one's state.
func TestRestartTakesAPooledInterpreter(t *testing.T) {
	t.Parallel()
	tr, dir := pooledTransport(t, "python")
	first := readyPid(t, tr, "python")
	k := startIn(t, tr, "python", dir)
	tt.Exec(t, k, "x = 41", false)
	second := readyPid(t, tr, "python", first)
	ctx, cancel := context.WithTimeout(context.Background(), tt.StartTimeout)
	defer cancel()
	if err := k.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if k.Pid() != second {
		t.Fatalf("restarted kernel runs pid %d, not the pooled %d", k.Pid(), second)
	}
	if e := tt.Exec(t, k, "print('x' in globals())", false); e.Stream("stdout") != "False\n" {
		t.Errorf("after restart:%s", e)
	}
	testkit.AwaitGone(t, "the old interpreter after restart", 30*time.Second, first)
}

// A bash kernel in another cwd starts cold, in its cwd (bash's driver is
// not moved on hand-out: see pool.go); the pool keeps its own.
func TestOtherCwdStartsColdForBash(t *testing.T) {
	t.Parallel()
	tr, _ := pooledTransport(t, "bash")
	pooled := readyPid(t, tr, "bash")
	other := t.TempDir()
	k := startIn(t, tr, "bash", other)
	if k.Pid() == pooled {
		t.Fatal("a bash kernel in another cwd took the pooled interpreter")
	}
	if got := tt.Exec(t, k, "pwd", false).Stream("stdout"); got != other+"\n" {
		t.Errorf("cwd %q, want %q", got, other)
	}
	if readyPid(t, tr, "bash") != pooled {
		t.Error("the pooled interpreter changed")
	}
}

// Size 0 (and the zero Options) keeps no pool: kernels start cold as before.
func TestPoolSizeZero(t *testing.T) {
	t.Parallel()
	tr := New(Options{PoolSizes: map[string]int{"python": 0}})
	defer tr.Close()
	if len(tr.pools) != 0 || len(tr.PoolStats()) != 0 {
		t.Fatalf("pools %v", tr.PoolStats())
	}
	k := startIn(t, tr, "python", t.TempDir())
	if e := tt.Exec(t, k, "print(1+1)", false); e.Stream("stdout") != "2\n" {
		t.Errorf("%s", e)
	}
}

// A pooled interpreter killed while it waits is replaced, and a kernel
// gets the replacement.
func TestPooledInterpreterKilledWhileIdleIsReplaced(t *testing.T) {
	t.Parallel()
	tr, dir := pooledTransport(t, "python")
	first := readyPid(t, tr, "python")
	if err := syscall.Kill(first, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	second := readyPid(t, tr, "python", first)
	k := startIn(t, tr, "python", dir)
	if k.Pid() != second {
		t.Fatalf("kernel runs pid %d, want the replacement %d", k.Pid(), second)
	}
	if e := tt.Exec(t, k, "print(1+1)", false); e.Stream("stdout") != "2\n" {
		t.Errorf("%s", e)
	}
}

// A pooled interpreter that died before the pool noticed is not handed out:
// the kernel starts cold and works.
func TestDeadPooledInterpreterIsNotHandedOut(t *testing.T) {
	t.Parallel()
	tr, dir := pooledTransport(t, "python")
	pid := readyPid(t, tr, "python")
	pl := tr.pools["python"]
	pl.mu.Lock()
	p := pl.slots[0].p
	pl.mu.Unlock()
	// As if it died between the watcher's check and the claim.
	p.adoptMu.Lock()
	p.gone.Store(true)
	p.adoptMu.Unlock()
	k := startIn(t, tr, "python", dir)
	if k.Pid() == pid {
		t.Fatal("a dead pooled interpreter was handed out")
	}
	if e := tt.Exec(t, k, "print(1+1)", false); e.Stream("stdout") != "2\n" {
		t.Errorf("%s", e)
	}
	testkit.AwaitGone(t, "the dead pooled interpreter", 30*time.Second, pid)
}

// Many kernels at once drain the pool; those that find it empty start
// cold, none waits on another.
func TestPoolDrainedByConcurrentStarts(t *testing.T) {
	t.Parallel()
	tr, dir := pooledTransport(t, "python")
	readyPid(t, tr, "python")
	const n = 4
	pids := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), tt.StartTimeout)
			defer cancel()
			k, err := tr.StartKernel(ctx, core.KernelSpec{Language: "python", Cwd: dir})
			if err != nil {
				t.Error(err)
				return
			}
			pids[i] = k.(*Kernel).Pid()
			_ = k.Shutdown(context.Background())
		}()
	}
	wg.Wait()
	seen := map[int]bool{}
	for _, pid := range pids {
		if pid == 0 || seen[pid] {
			t.Fatalf("pids %v: want %d distinct interpreters", pids, n)
		}
		seen[pid] = true
	}
}

// Close kills the pooled interpreters and removes their cgroups.
func TestCloseKillsPooledInterpreters(t *testing.T) {
	t.Parallel()
	for _, mode := range []struct {
		name      string
		noCgroups bool
	}{{"cgroup", false}, {"tree", true}} {
		t.Run(mode.name, func(t *testing.T) {
			if !mode.noCgroups && cgroup.Base() == "" {
				t.Skip("no writable cgroup v2 with cgroup.kill on this machine: the tree path is what runs here")
			}
			dir := t.TempDir()
			tr := New(Options{PoolSizes: map[string]int{"python": 2}, PoolCwd: dir, NoCgroups: mode.noCgroups})
			a := readyPid(t, tr, "python")
			b := readyPid(t, tr, "python", a)
			var cgroups []string
			for _, pid := range []int{a, b} {
				if cg := cgroupOf(pid); cg != "" {
					cgroups = append(cgroups, cg)
				}
			}
			if !mode.noCgroups && len(cgroups) != 2 {
				t.Fatalf("pooled interpreters are not in cgroups of their own: %v", cgroups)
			}
			if err := tr.Close(); err != nil {
				t.Fatal(err)
			}
			testkit.AwaitGone(t, "the pooled interpreters after Close", 30*time.Second, a, b)
			for _, cg := range cgroups {
				if _, err := os.Stat(cg); !os.IsNotExist(err) {
					t.Errorf("cgroup %s is left after Close (%v)", cg, err)
				}
			}
		})
	}
}

// cgroupOf is the directory of pid's own kernelhost cgroup, "" if none.
func cgroupOf(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rel, ok := strings.CutPrefix(line, "0::"); ok && strings.Contains(filepath.Base(rel), "kernelhost-") {
			return filepath.Join(cgroup.Base(), filepath.Base(rel))
		}
	}
	return ""
}

// PoolStats reports the ready interpreters and their memory.
func TestPoolStats(t *testing.T) {
	t.Parallel()
	tr, _ := pooledTransport(t, "python")
	readyPid(t, tr, "python")
	st := tr.PoolStats()
	if len(st) != 1 || st[0].Language != "python" || st[0].Size != 1 || st[0].Ready != 1 || st[0].RSSBytes < 1<<20 {
		t.Fatalf("stats %+v", st)
	}
}

func TestParsePoolSizes(t *testing.T) {
	got, err := ParsePoolSizes(" python=2, r=1,javascript=0 ")
	if err != nil || len(got) != 3 || got["python"] != 2 || got["r"] != 1 || got["javascript"] != 0 {
		t.Fatalf("%v %v", got, err)
	}
	if got, err := ParsePoolSizes(""); err != nil || len(got) != 0 {
		t.Fatalf("empty: %v %v", got, err)
	}
	for _, bad := range []string{"python", "python=-1", "python=x", "=1", "python=65"} {
		if _, err := ParsePoolSizes(bad); err == nil || !strings.Contains(err.Error(), "language=size") {
			t.Errorf("%q: err %v", bad, err)
		}
	}
}

// Through the engine: a context created from the pool while another
// context's execution runs with per-request env vars sees none of them, nor
// that context's globals, env or cwd; it has the cwd it was created with.
func TestPooledContextSeesNoRequestEnvOfAnother(t *testing.T) {
	t.Parallel()
	tr, dir := pooledTransport(t, "python")
	e, err := engine.NewEngine(engine.Config{Transport: tr, DefaultCwd: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close(context.Background()) })
	ctx, cancel := context.WithTimeout(context.Background(), 2*tt.StartTimeout)
	defer cancel()
	a, err := e.CreateContext(ctx, "python", "")
	if err != nil {
		t.Fatal(err)
	}
	elsewhere := t.TempDir()
	run(ctx, t, e, a.ID, "import os\nx = 1\nos.environ['KH_SET'] = 'a'\nos.chdir("+strconv.Quote(elsewhere)+")", nil)
	// A's execution holds its request's env var while B is created and probed.
	x, err := e.Execute(ctx, engine.ExecRequest{ContextID: a.ID, EnvVars: map[string]string{"KH_REQ": "secret"},
		Code: "import os, time\nprint(os.environ['KH_REQ'], flush=True)\ntime.sleep(3)"})
	if err != nil {
		t.Fatal(err)
	}
	// Once A printed, its request's env var is set in its interpreter.
	var outs []engine.Output
	for !slices.ContainsFunc(outs, func(o engine.Output) bool { return o.Type == engine.OutStdout }) {
		if outs, err = x.Next(ctx, outs); err != nil {
			t.Fatalf("A: %v after %+v", err, outs)
		}
	}
	if o := outs[len(outs)-1]; o.Text != "secret\n" {
		t.Fatalf("A printed %+v", o)
	}
	pooled := readyPid(t, tr, "python")
	b, err := e.CreateContext(ctx, "python", "")
	if err != nil {
		t.Fatal(err)
	}
	got := run(ctx, t, e, b.ID, "import os\nprint(os.readlink('/proc/self/ns/pid'), os.getpid(), os.environ.get('KH_REQ'), os.environ.get('KH_SET'), 'x' in globals(), os.getcwd())", nil)
	ns, rest, _ := strings.Cut(got, " ")
	pid, rest, _ := strings.Cut(rest, " ")
	if n, err := strconv.Atoi(pid); err != nil || testkit.HostPidIn(t, ns, n) != pooled {
		t.Errorf("B prints %q: not the pooled interpreter %d", got, pooled)
	}
	if want := "None None False " + dir + "\n"; rest != want {
		t.Errorf("B prints %q, want %q after the pid", got, want)
	}
	for rest := error(nil); rest == nil; {
		_, rest = x.Next(ctx, nil) // A's execution runs to its end
	}
}

// run executes code in context id and returns its stdout; an error output fails t.
func run(ctx context.Context, t *testing.T, e *engine.Engine, id, code string, env map[string]string) string {
	t.Helper()
	return tt.EngineStdout(t, tt.EngineRun(t, e, ctx, engine.ExecRequest{ContextID: id, Code: code, EnvVars: env}))
}
