package subprocess

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/kernelhost/kernelhost/core"
)

// A fork server (issue 28) makes python contexts by fork: it keeps a
// template, a python interpreter started as any other (procSpec: the
// host's environment, a cgroup of its own, the pool's cwd) that has
// imported the modules of Options.Preload and then only waits for fork
// requests (drivers/forkserver.py). A new context is a child of the
// template (forkProc), so it starts with those modules loaded, in pages it
// shares with the template until it writes them. What it holds and what it
// does not, as a pooled interpreter:
//
//   - No state of any context: the template never runs a request, and each
//     child is forked from it, not from another child. The env is the one
//     the template started with, which is the one a cold start gets; the
//     cwd is the kernel's (moved there as the pool moves a pooled
//     interpreter, pool.moveTo); each child has its own pipes, group,
//     cgroup and limits (enterGroups), its own wakeup pipe for SIGINT, its
//     own output thread once it runs a cell, and no thread of the template
//     (which has none: OpenBLAS's pool is stopped before each fork).
//   - What is installed: when a directory the preloaded modules came from
//     or one on the import path changed since the template preloaded (pip
//     install -U, pip install --user), the template refuses the fork, is
//     replaced by a new one, and the kernel starts as it would without a
//     fork server (pool or cold).
//   - Nothing waits on the template: until it is ready (it preloads in the
//     background from the transport's start), and whenever a fork fails,
//     kernels start as they would without it.
//
// When interpreters are sandboxed, the template runs in a sandbox of its
// own and each context it forks makes its own walls (forksandbox.go): the
// template runs only code from read-only paths (it holds capabilities in
// its user namespace), a context forks from it only in a cwd a pooled
// interpreter could be moved to (sandbox.Sandbox.Reaches), and a retired template
// lives on until the last context forked from it ended, since they are
// nested in its PID namespace.

// DefaultPreload() is what the python fork server preloads by default (those
// installed): the data stack an analysis context imports first.
// matplotlib.pyplot also sets up the inline backend (and so the IPython
// shell), as a cell that imports it would. A fresh slice each call.
func DefaultPreload() []string {
	return []string{"numpy", "pandas", "matplotlib", "matplotlib.pyplot", "IPython"}
}

// ParsePreload reads a preload setting: module names separated by commas;
// "off" (or nothing) turns the fork server off, "auto" is DefaultPreload().
func ParsePreload(s string) []string {
	switch strings.TrimSpace(s) {
	case "", "off":
		return nil
	case "auto":
		return DefaultPreload()
	}
	var out []string
	for _, name := range strings.Split(s, ",") {
		if name = strings.TrimSpace(name); name != "" {
			out = append(out, name)
		}
	}
	return out
}

// forkServer keeps one language's template and forks kernels from it.
type forkServer struct {
	lang string
	cwd  string
	// spec is the template's start spec: its language's, plus what makes
	// its driver a template.
	spec func() (procSpec, error)

	// forkMu serialises the forks of a template outside a sandbox: one
	// request on its fd 3 at a time, and its answer. A sandboxed one's go
	// on its control socket (forkLine).
	forkMu sync.Mutex

	// warn tells the operator, once until a template starts again, why
	// the template cannot start (Options.Warn).
	warn func(msg string, args ...any)

	mu      sync.Mutex
	changed func()        // told when the template changed (a new one is ready, or one retired): the pool's refresh
	tmpl    *proc         // the ready template; nil while none is
	failed  string        // why the last template start failed; "" when it did not
	warned  bool          // failed was told to warn
	ended   []*proc       // sandboxed templates told to stop, which exit once their contexts ended
	start   chan struct{} // closed when the template's start under way ended; nil: none under way
	first   chan struct{} // closed when the first template start ended, ready or failed
	closed  bool
	ctx     context.Context
	stop    context.CancelFunc
	wg      sync.WaitGroup
}

func newForkServer(lang, cwd string, spec func() (procSpec, error), warn func(string, ...any)) *forkServer {
	fs := &forkServer{lang: lang, cwd: cwd, spec: spec, warn: warn}
	fs.ctx, fs.stop = context.WithCancel(context.Background())
	fs.startTemplate()
	return fs
}

// startTemplate starts a template in the background unless one runs or
// starts already.
func (fs *forkServer) startTemplate() {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.closed || fs.tmpl != nil || fs.start != nil {
		return
	}
	done := make(chan struct{})
	fs.start = done
	if fs.first == nil {
		fs.first = done
	}
	fs.wg.Add(1)
	go func() {
		defer fs.wg.Done()
		defer close(done)
		spec, err := fs.spec()
		var p *proc
		if err == nil {
			ctx, cancel := context.WithTimeout(fs.ctx, poolStartTimeout)
			p, err = startProc(ctx, spec, nil)
			cancel()
		}
		fs.mu.Lock()
		defer fs.mu.Unlock()
		fs.start = nil
		if err != nil {
			// Not retried in a loop: the next kernel's fork tries again.
			if !fs.closed {
				fs.failed = err.Error()
				if !fs.warned && fs.warn != nil {
					fs.warned = true
					fs.warn("the "+fs.lang+" fork template cannot start: its contexts come from the warm pool or start cold (slower, without the preloaded modules) until it can", "error", fs.failed)
				}
			}
			return
		}
		fs.failed, fs.warned = "", false
		if fs.closed {
			go p.kill()
			return
		}
		if p.spec.sandbox != nil {
			p.fork.line = newForkLine(p.fork.ctl)
		}
		fs.tmpl = p
		if fs.changed != nil {
			go fs.changed() // not under mu: it asks for the template
		}
	}()
}

// awaitFirstTemplate waits, bounded by ctx, until the first template start
// ended. The contexts a host makes as it starts (its default python
// context, the first client's) are then forks of the template, with the
// preloaded modules, and can be copied into their family; a cold start
// made meanwhile would be neither, for its whole life. A later template,
// after a package changed, is not waited for: contexts start from the pool
// or cold meanwhile.
func (fs *forkServer) awaitFirstTemplate(ctx context.Context) {
	if fs == nil {
		return
	}
	fs.mu.Lock()
	first := fs.first
	fs.mu.Unlock()
	if first == nil {
		return // closed before its first start
	}
	select {
	case <-first:
	case <-ctx.Done():
	}
}

// onChange makes changed be told when the template changed; nil does
// nothing.
func (fs *forkServer) onChange(changed func()) {
	if fs == nil {
		return
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.changed = changed
}

// current is the ready template, without starting one; nil when there is
// none (or no fork server).
func (fs *forkServer) current() *proc {
	if fs == nil {
		return nil
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.tmpl != nil && fs.tmpl.isGone() {
		return nil
	}
	return fs.tmpl
}

// template returns the ready template; nil (and a start under way) when
// there is none.
func (fs *forkServer) template() *proc {
	fs.mu.Lock()
	p := fs.tmpl
	if p != nil && p.isGone() {
		fs.tmpl, p = nil, nil
	}
	fs.mu.Unlock()
	if p == nil {
		fs.startTemplate()
	}
	return p
}

// retire ends template p, if it is still the current one, and starts
// another.
func (fs *forkServer) retire(p *proc) {
	fs.mu.Lock()
	current := fs.tmpl == p
	if current {
		fs.tmpl = nil
	}
	changed := fs.changed
	fs.mu.Unlock()
	if current {
		fs.end(p)
		if changed != nil {
			changed() // its ready contexts are discarded
		}
	}
	fs.startTemplate()
}

// end ends template p. One in a sandbox is told to stop (its control
// socket closes) and exits once the last context forked from it ended:
// they are in its PID namespace, which ends with it.
func (fs *forkServer) end(p *proc) {
	if p.spec.sandbox == nil {
		p.kill()
		return
	}
	p.fork.ctl.Close()
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.ended = slices.DeleteFunc(fs.ended, func(e *proc) bool {
		if !isClosed(e.rd.pumpDone) {
			return false
		}
		e.kill() // it exited: this closes its files
		return true
	})
	fs.ended = append(fs.ended, p)
}

// fork makes a kernel's interpreter, in cwd, as a child of the template,
// which it returns too; nil when it cannot (no template ready, a kernel
// without a cwd where the template has one, a stale template, a failed
// fork): the caller starts one as it would without a fork server.
func (fs *forkServer) fork(ctx context.Context, out chan<- core.Message, spec procSpec, cwd string) (_, tmpl *proc) {
	if fs == nil {
		return nil, nil
	}
	dir := ""
	if cleanCwd(cwd) != fs.cwd {
		if dir = pwdOf(cwd); dir == "" {
			return nil, nil // the host's own directory and PWD: see pool.moveTo
		}
	}
	if !spec.sandbox.Reaches(fs.cwd, cwd) {
		return nil, nil // as for the pool: the template's sandbox shows the directory read-only
	}
	tmpl = fs.template()
	if tmpl == nil {
		return nil, nil
	}
	var p *proc
	var err error
	if tmpl.spec.sandbox != nil {
		p, err = forkSandboxed(ctx, tmpl, spec, dir, out)
	} else {
		fs.forkMu.Lock()
		p, err = forkProc(ctx, tmpl, spec, dir, out)
		fs.forkMu.Unlock()
	}
	if err != nil {
		shadowed := strings.Contains(err.Error(), errForkRefused.Error()+": shadowed")
		if (errors.Is(err, errForkRefused) && !shadowed) || errors.Is(err, errTemplateStuck) || errors.Is(err, errNoForkAnswer) || tmpl.isGone() {
			fs.retire(tmpl)
		}
		// The caller starts the context another way; without this the
		// operator sees only slower contexts without the preloaded
		// modules. A shadowed module is documented (a preloaded module
		// in the user site), and a cancelled start is the caller's own.
		if !shadowed && ctx.Err() == nil && fs.warn != nil {
			fs.warn("a "+fs.lang+" context could not be forked from the template: it starts without it (slower, without the preloaded modules)", "error", err)
		}
		return nil, nil
	}
	return p, tmpl
}

// close ends the template and waits for a start under way, and (bounded)
// for sandboxed templates to exit, which they do once their contexts
// ended (the engine shuts kernels down before it closes the transport).
func (fs *forkServer) close() {
	fs.mu.Lock()
	fs.closed = true
	p := fs.tmpl
	fs.tmpl = nil
	fs.mu.Unlock()
	fs.stop()
	fs.wg.Wait()
	if p != nil {
		fs.end(p)
	}
	fs.mu.Lock()
	ended := fs.ended
	fs.mu.Unlock()
	timeout := time.After(killWait)
	for _, e := range ended {
		select {
		case <-e.rd.pumpDone:
			e.kill() // it exited: this closes its files
		case <-timeout:
			return // a context forked from it still runs
		}
	}
}

// rss is the template's resident memory (0: none ready), for PoolStats.
func (fs *forkServer) rss() (ready bool, bytes int64) {
	fs.mu.Lock()
	p := fs.tmpl
	fs.mu.Unlock()
	if p == nil || p.isGone() {
		return false, 0
	}
	pid, _, _ := p.ids()
	return true, rssBytes(pid)
}

// retired returns the sandboxed templates retired that still run, until
// the last context forked from them ended.
func (fs *forkServer) retired() []*proc {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	var out []*proc
	for _, e := range fs.ended {
		if !isClosed(e.rd.pumpDone) {
			out = append(out, e)
		}
	}
	return out
}

// ForkStat is the state of one language's fork server, for metrics.
type ForkStat struct {
	Language string
	// Failing says why the template's last start failed ("" if it did
	// not): until one starts, contexts come from the pool or start cold.
	Failing string
}

// ForkStats reports each language's fork server, sorted by language.
func (t *Transport) ForkStats() []ForkStat {
	var out []ForkStat
	for lang, fs := range t.forks {
		fs.mu.Lock()
		out = append(out, ForkStat{Language: lang, Failing: fs.failed})
		fs.mu.Unlock()
	}
	slices.SortFunc(out, func(a, b ForkStat) int { return strings.Compare(a.Language, b.Language) })
	return out
}

// startForkServer starts a fork server for each language whose driver
// forks (forker: python's) when preload names modules.
func (t *Transport) startForkServer(preload []string, cwd string, warn func(string, ...any)) {
	t.forks = map[string]*forkServer{}
	if len(preload) == 0 {
		return
	}
	for name, lang := range t.langs {
		f, ok := lang.drv.(forker)
		if !ok {
			continue
		}
		t.forks[name] = newForkServer(name, cwd, func() (procSpec, error) {
			spec, err := t.spec(name, cwd)
			spec.forkTemplate = true
			return f.template(spec, preload, cwd), err
		}, warn)
	}
}

// ForkServerReady says whether lang's fork server has its template ready
// (a kernel started now is forked from it). For tests and benchmarks.
func (t *Transport) ForkServerReady(lang string) bool {
	fs := t.forks[lang]
	if fs == nil {
		return false
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.tmpl != nil && !fs.tmpl.isGone()
}
