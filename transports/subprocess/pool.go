package subprocess

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kernelhost/kernelhost/core"
	"github.com/kernelhost/kernelhost/transports/subprocess/internal/sandbox"
)

// A warm pool keeps interpreters of a language started ahead of need, so a
// new context (or a restart) takes one that is ready instead of waiting for
// an interpreter's start-up (about half of a context's
// creation). What a pooled interpreter is and is not:
//
//   - It starts exactly as a fresh one would (procSpec: the host's
//     environment and the language's, a cgroup of its own) in the pool's cwd,
//     and is sent nothing before it is handed out but, on hand-out, the cwd
//     of the kernel that took it: it carries no state, env or cwd of any
//     context or request. Per-request env vars and a context's env are the
//     engine's snippets, applied after the hand-out as after a cold start.
//   - It serves a kernel in any cwd where its driver can be moved (python,
//     javascript, typescript: driver.cwdRecord) and, when sandboxed, that
//     its sandbox shows as a cold start's would (sandbox.Sandbox.Reaches: inside
//     the writable paths or the pool's cwd). Before the kernel gets it,
//     take sends it the kernel's cwd, absolute, and waits for the driver's
//     answer: the driver chdirs, sets PWD as a cold start's (pwdOf), and
//     redoes what its start derived from the directory (python: import's
//     directory caches; node: the cells' require(), which resolves from
//     the directory node started in). So it behaves as one started there,
//     for any user of the transport, not only for the engine, whose cwd
//     helper comes after its kernel setup request. A directory that
//     vanished in between fails the hand-out (the interpreter is killed)
//     and the kernel starts cold, which reports the error a cold start
//     always did. Other pools (off by default) serve only kernels in the
//     pool's cwd: a cd leaves bash's OLDPWD (`cd -`) unlike a fresh
//     start's; R's driver has no such record; a JVM cannot change its
//     process's cwd (user.dir is a property; children and the JDK's file
//     access use the process's).
//   - Nothing waits on the pool for long: a kernel takes a ready interpreter,
//     else one whose start is under way (it is no further from ready than a
//     cold start would be), else starts cold. Many contexts created at once
//     drain it and the rest start cold; it refills in the background.
//   - One that dies while it waits is dropped and replaced; one that is dead
//     when taken is dropped and the kernel starts cold. Close kills them all.
//
// With a fork server (python's, forkserver.go) the pool holds contexts made
// ahead of need: while the template is ready each slot is filled by a fork
// of it, made in the pool's cwd (its own pipes, cgroup, limits and, when
// sandboxed, its walls, network namespace and pasta included), and by a
// cold start while there is none. A slot is handed out only if it came
// from the template that is current now (a cold one once a template is
// ready, or a fork of a template since retired, is discarded and
// replaced: refresh), and a forked one only after its driver said, on
// the hand-out's cwd record, that nothing its template preloaded changed
// on disk since (pip install -U: the template is retired). Before it says
// ready, a fork made ahead of need uses what the template preloaded once
// (procSpec.warmUp), out of sight: its copies of the pages a session's
// first cells touch are made while it waits, not while they run. When no
// forked slot is ready, take gives up at once and the kernel is forked
// afresh: a burst larger than the pool degrades to the fork path, not to
// a cold start.

// maxPoolSize bounds a language's pool: each is an idle interpreter.
const maxPoolSize = 64

// ParsePoolSizes reads pool sizes as "language=size" pairs separated by
// commas ("python=2,javascript=1,r=0"); languages not named have no pool.
// The host's default (its -interpreter-pool) is python=1,javascript=1: a JVM
// (java) or R is slow to start and large to keep idle, so they are off
// unless asked for.
func ParsePoolSizes(s string) (map[string]int, error) {
	sizes := map[string]int{}
	for _, pair := range strings.Split(s, ",") {
		pair = strings.TrimSpace(pair)
		if pair == "" {
			continue
		}
		lang, size, ok := strings.Cut(pair, "=")
		lang = strings.TrimSpace(lang)
		n, err := strconv.Atoi(strings.TrimSpace(size))
		if !ok || lang == "" || err != nil || n < 0 || n > maxPoolSize {
			return nil, fmt.Errorf("interpreter pool %q: want language=size pairs separated by commas, sizes 0 to %d (python=1,javascript=1)", pair, maxPoolSize)
		}
		sizes[lang] = n
	}
	return sizes, nil
}

// poolStartTimeout bounds a pooled interpreter's start.
const poolStartTimeout = 2 * time.Minute

// pool holds the ready interpreters of one language.
type pool struct {
	lang string
	size int
	cwd  string
	// spec returns the start spec (a java pool compiles its driver first).
	spec func() (procSpec, error)
	// sandbox is its interpreters' (nil: none), which limits where they
	// may be moved (serves).
	sandbox *sandbox.Sandbox
	// forks fills its slots by fork while a template is ready (nil: none).
	forks *forkServer

	mu     sync.Mutex
	slots  []*poolSlot // oldest first: ready ones and those still starting
	closed bool
	// asking counts the kernels of the pool's language that wait for an
	// interpreter (ask); quiet is closed once none does (nil: none asked
	// yet). A refill waits for it (awaitQuiet).
	asking int
	quiet  chan struct{}
	stop   context.CancelFunc // cancels the starts under way
	ctx    context.Context    // their parent
	wg     sync.WaitGroup     // starts and watchers
}

// poolSlot is one pooled interpreter, from the start of its start.
type poolSlot struct {
	done  chan struct{} // closed when the start ended; p and err are set then
	p     *proc
	tmpl  *proc // the template p was forked from; nil: started cold
	err   error
	taken chan struct{} // closed when a kernel took it (ends the watcher)
}

func newPool(lang string, size int, cwd string, spec func() (procSpec, error), sb *sandbox.Sandbox, forks *forkServer) *pool {
	pl := &pool{lang: lang, size: size, cwd: cwd, spec: spec, sandbox: sb, forks: forks}
	pl.ctx, pl.stop = context.WithCancel(context.Background())
	forks.onChange(pl.refresh)
	pl.refill()
	return pl
}

// serves says whether the pool's interpreters may serve a kernel of lang in
// cwd: one in the pool's cwd, or anywhere the driver can be moved and, in
// a sandbox, where the pooled interpreter may write as a cold one would.
func (pl *pool) serves(lang language, cwd string) bool {
	if pl == nil {
		return false
	}
	if cleanCwd(cwd) == pl.cwd {
		return true
	}
	return lang.drv.cwdRecord(cwd) != nil && pl.sandbox.Reaches(pl.cwd, cwd)
}

func cleanCwd(cwd string) string {
	if cwd == "" {
		return ""
	}
	return filepath.Clean(cwd)
}

// take hands out a pooled interpreter whose messages go to out, in cwd: a
// ready one, else one still starting (waited for within ctx) unless a fork
// template is ready (a fresh fork is then no further from ready). nil when
// there is none or it failed, or could not enter cwd: the caller forks or
// starts one. Either way the pool refills in the background.
func (pl *pool) take(ctx context.Context, out chan<- core.Message, cwd string) *proc {
	defer pl.refill()
	dir, move, ok := pl.moveTo(cwd)
	if !ok {
		return nil
	}
	for {
		tmpl := pl.forks.current()
		s := pl.claim(tmpl != nil)
		if s == nil {
			return nil
		}
		close(s.taken)
		select {
		case <-s.done:
		case <-ctx.Done():
			pl.discardWhenStarted(s)
			return nil
		}
		if s.err != nil {
			return nil // the pool's starts fail: a cold start says why
		}
		if s.tmpl != tmpl {
			pl.discard(s.p) // a cold one, or a fork of a retired template
			continue
		}
		if move || s.tmpl != nil {
			if err := s.p.enterCwd(ctx, dir); err != nil {
				// Gone, or it died (a cold start says why it cannot start
				// there), or what its template preloaded changed: it is
				// not handed out.
				pl.discard(s.p)
				if refused := (*cwdRefused)(nil); errors.As(err, &refused) && strings.HasPrefix(refused.why, staleMark) {
					pl.forks.retire(s.tmpl)
				}
				return nil
			}
		}
		if s.p.adopt(out) {
			if s.p.req.cells != nil {
				s.p.req.cells.handedOut() // before the refill's wait (deferred above)
			}
			return s.p
		}
		s.p.kill() // it died while it waited, and its watcher had not seen it yet
	}
}

// staleMark starts the driver's answer when what a template preloaded
// changed on disk since (forkserver.py's _stale).
const staleMark = "stale: "

// moveTo says whether a pooled interpreter must be moved to serve a kernel
// in cwd, and into which directory ("": it stays): cwd made absolute (the interpreter's
// own cwd is the pool's, not the host's, to resolve a relative one), the
// same path a cold start's PWD gets (pwdOf). ok is false when the kernel
// starts cold instead: a kernel without a cwd (the host's directory) from a
// pool with one keeps the host's PWD, which a move could not give back.
func (pl *pool) moveTo(cwd string) (dir string, move, ok bool) {
	cwd = cleanCwd(cwd)
	if cwd == pl.cwd {
		return "", false, true
	}
	if dir = pwdOf(cwd); dir == "" {
		return "", false, false
	}
	return dir, true, true
}

// claim takes the first ready slot out of the pool, else (unless
// readyOnly) the oldest one still starting; nil when there is none.
func (pl *pool) claim(readyOnly bool) *poolSlot {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	i := slices.IndexFunc(pl.slots, func(s *poolSlot) bool { return isClosed(s.done) })
	if i < 0 && (readyOnly || len(pl.slots) == 0) {
		return nil
	}
	if i < 0 {
		i = 0
	}
	s := pl.slots[i]
	pl.slots = slices.Delete(pl.slots, i, i+1)
	return s
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// discard kills an interpreter taken out of the pool, in the background:
// a kill waits for the process, which the kernel that took the slot need
// not.
func (pl *pool) discard(p *proc) {
	pl.mu.Lock()
	closed := pl.closed
	if !closed {
		pl.wg.Add(1) // under mu: before close's Wait
	}
	pl.mu.Unlock()
	if closed {
		p.kill()
		return
	}
	go func() {
		defer pl.wg.Done()
		p.kill()
	}()
}

// refresh discards the ready slots that did not come from the current
// template (started cold before it was ready, or forked from one since
// retired) and refills: the fork server calls it when its template
// changed.
func (pl *pool) refresh() {
	tmpl := pl.forks.current()
	pl.mu.Lock()
	var stale []*poolSlot
	pl.slots = slices.DeleteFunc(pl.slots, func(s *poolSlot) bool {
		if isClosed(s.done) && s.err == nil && s.tmpl != tmpl {
			stale = append(stale, s)
			return true
		}
		return false
	})
	pl.mu.Unlock()
	for _, s := range stale {
		close(s.taken) // ends its watcher
		pl.discard(s.p)
	}
	pl.refill()
}

// discardWhenStarted kills a claimed interpreter once its start ends.
func (pl *pool) discardWhenStarted(s *poolSlot) {
	pl.wg.Add(1)
	go func() {
		defer pl.wg.Done()
		<-s.done
		if s.p != nil {
			s.p.kill()
		}
	}()
}

// ask registers a kernel that waits for an interpreter, until done is
// called; a nil pool does nothing.
func (pl *pool) ask() (done func()) {
	if pl == nil {
		return func() {}
	}
	pl.mu.Lock()
	defer pl.mu.Unlock()
	if pl.asking == 0 {
		pl.quiet = make(chan struct{})
	}
	pl.asking++
	return func() {
		pl.mu.Lock()
		defer pl.mu.Unlock()
		if pl.asking--; pl.asking == 0 {
			close(pl.quiet)
		}
	}
}

// awaitQuiet waits, before slot s's start, until no kernel waits for an
// interpreter (ask), s was claimed (a kernel waits for it: a pool without
// a fork server hands out slots still starting), or the pool closes. The
// cores go to the contexts asked for first: past a drained pool they are
// forked or started on request, and a refill would take a share of the
// same CPU (with 2 cores, 20 sandboxed contexts at once are bound by it:
// docs/benchmarks.md); the pool refills once they have their interpreters.
func (pl *pool) awaitQuiet(s *poolSlot) {
	pl.mu.Lock()
	quiet := pl.quiet
	pl.mu.Unlock()
	if quiet == nil {
		return
	}
	select {
	case <-quiet:
	case <-s.taken:
	case <-pl.ctx.Done():
	}
}

// refill starts interpreters until the pool holds size of them.
func (pl *pool) refill() {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	for !pl.closed && len(pl.slots) < pl.size {
		s := &poolSlot{done: make(chan struct{}), taken: make(chan struct{})}
		pl.slots = append(pl.slots, s)
		pl.wg.Add(1)
		go pl.fill(s)
	}
}

// fill starts the interpreter of slot s (a fork of the template when one
// is ready), then watches it while it waits.
func (pl *pool) fill(s *poolSlot) {
	defer pl.wg.Done()
	pl.awaitQuiet(s)
	was := pl.forks.current()
	spec, err := pl.spec()
	if err == nil && pl.forks != nil && spec.cells != nil {
		spec.cells.awaitPause(pl.ctx, s.taken) // for the fork's warm-up (cells.go)
	}
	if err == nil {
		ctx, cancel := context.WithTimeout(pl.ctx, poolStartTimeout)
		ahead := spec
		ahead.warmUp = true
		if s.p, s.tmpl = pl.forks.fork(ctx, nil, ahead, pl.cwd); s.p == nil {
			s.p, err = startProc(ctx, spec, nil)
		}
		cancel()
	}
	s.err = err
	close(s.done)
	if now := pl.forks.current(); err == nil && s.tmpl != now && now != was {
		// The template changed while this one started (it became ready
		// during a cold start): the refresh the change made missed it.
		pl.refresh()
	}
	if err != nil {
		// Not refilled until the next take: a start that fails (a broken
		// interpreter) is not retried in a loop; the kernel that takes
		// this slot starts cold and reports why.
		return
	}
	select {
	case <-s.taken:
	case <-s.p.rd.pumpDone:
		// It died while it waited (killed, out of memory), and the pump is
		// done reaping it (driverGone): dropped and replaced, unless a
		// kernel claimed it meanwhile (take sees it dead).
		if pl.remove(s) {
			s.p.kill()
			pl.refill()
		}
	case <-pl.ctx.Done():
	}
}

// remove takes s out of the pool; false when it was no longer there.
func (pl *pool) remove(s *poolSlot) bool {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	i := slices.Index(pl.slots, s)
	if i < 0 {
		return false
	}
	pl.slots = slices.Delete(pl.slots, i, i+1)
	return true
}

// close kills every pooled interpreter and waits for the pool's goroutines.
func (pl *pool) close() {
	pl.mu.Lock()
	pl.closed = true
	slots := pl.slots
	pl.slots = nil
	pl.mu.Unlock()
	pl.stop() // ends the starts under way
	pl.wg.Wait()
	for _, s := range slots {
		if s.p != nil {
			s.p.kill()
		}
	}
}

// PoolStat describes one language's pool, for metrics.
type PoolStat struct {
	Language string
	Size     int   // the configured size
	Ready    int   // interpreters ready in the pool
	RSSBytes int64 // their resident memory, descendants not counted
}

// stat counts the pool's ready interpreters and their memory.
func (pl *pool) stat() PoolStat {
	pl.mu.Lock()
	var ready []*proc
	for _, s := range pl.slots {
		if isClosed(s.done) && s.p != nil && !s.p.isGone() {
			ready = append(ready, s.p)
		}
	}
	pl.mu.Unlock()
	st := PoolStat{Language: pl.lang, Size: pl.size, Ready: len(ready)}
	for _, p := range ready {
		pid, _, _ := p.ids()
		st.RSSBytes += rssBytes(pid)
	}
	return st
}

// rssBytes is the resident memory of process pid (/proc/pid/statm); 0 when
// it is gone.
func rssBytes(pid int) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	pages, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return 0
	}
	return pages * int64(os.Getpagesize())
}
