package subprocess

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/kernelhost/kernelhost/core"
	"github.com/kernelhost/kernelhost/transports/subprocess/internal/cgroup"
	"github.com/kernelhost/kernelhost/transports/subprocess/internal/sandbox"
)

// Version is reported in Info.
const Version = "0.1.0"

// Options configures a Transport. The zero value is ready to use.
type Options struct {
	// Interpreters are the interpreters to run, as paths or names looked
	// up on PATH, by Interpreter.Name: "python", "node" (javascript and
	// typescript), "bash", "rscript" (r), "java" (a JDK's: its javac, next
	// to it, compiles the driver). One not named runs its Default
	// (Interpreters lists them); a name that is no interpreter's is
	// ignored, with a Warn.
	Interpreters map[string]string
	// NoCgroups turns off the cgroup per interpreter (internal/cgroup):
	// delete, restart and shutdown then end an interpreter's descendants
	// by its process tree (reap.go).
	NoCgroups bool
	// Env holds extra "KEY=value" entries appended to the host's environment
	// (minus the host's own KERNELHOST_* variables, internal/sandbox) for
	// every interpreter.
	Env []string
	// PoolSizes is how many ready interpreters each language keeps (see
	// pool.go, ParsePoolSizes); nil or 0: none, every
	// kernel starts its interpreter cold (or by fork). With a fork server
	// (Preload) python's are contexts forked ahead of need. Close kills
	// them.
	PoolSizes map[string]int
	// PoolCwd is where pooled interpreters start. The host passes its
	// default cwd. "" is this process's directory. A python, javascript or
	// typescript kernel in another cwd takes a pooled interpreter too, moved
	// there on hand-out (see pool.go); other languages' pools serve only
	// kernels in PoolCwd.
	PoolCwd string
	// Sandbox configures the sandbox each interpreter runs in
	// (internal/sandbox).
	Sandbox SandboxOptions
	// MaxMessageBytes caps what one interpreter message may carry: one
	// message line, one batch's output (see msgLines); past it output is
	// cut, with a notice. 0: DefaultMaxMessageBytes.
	MaxMessageBytes int
	// Limits bound each interpreter (limits.go, internal/cgroup). A limit this machine has no
	// cgroup controller for makes Limited and every StartKernel fail.
	Limits Limits
	// Preload lists the modules python's fork server preloads (forkserver.go,
	// ParsePreload); empty: no fork server.
	Preload []string
	// Warn, when set, is told what the operator should hear of while the
	// transport runs, once per cause: a fork template that cannot start.
	Warn func(msg string, args ...any)
}

// Transport starts local interpreter processes. It is safe for concurrent use.
type Transport struct {
	cgroups    bool
	maxMessage int
	sandbox    *sandbox.Sandbox // nil: interpreters run unsandboxed
	// noSandbox says why there is no sandbox; sandboxErr, when set, is why
	// no interpreter starts (-sandbox=on where bwrap cannot work).
	noSandbox  string
	sandboxErr error
	limits     *cgroup.Limiter // nil: none
	limitsErr  error           // why the limits asked for cannot be applied here
	cells      *cellActivity   // whether its contexts run cells, for the pools' refills
	// closed ends what the transport runs apart from kernels (the python
	// driver's compile) when it is closed.
	closed      context.Context
	closeCancel context.CancelFunc
	env         []string
	langs       map[string]language // by normalised language name, only those found
	// missing explains each known language whose interpreter was not found:
	// what was looked for and the Debian package that provides it.
	missing map[string]string
	pools   map[string]*pool       // by language, those with a size above 0
	forks   map[string]*forkServer // by language: python's when Options.Preload is set (forkserver.go)
	live    sync.Map               // the kernels not shut down, as keys (MemoryStats)
}

var _ core.Transport = (*Transport)(nil)

// language is one language found on this machine: its interpreter and
// its driver.
type language struct {
	name string
	path string // the interpreter, resolved
	drv  driver
}

// New returns a Transport for the interpreters of opts that exist on this
// machine; Info().Languages lists only those.
func New(opts Options) *Transport {
	noCoreDumps()
	t := &Transport{
		cgroups:    !opts.NoCgroups,
		maxMessage: cmp.Or(opts.MaxMessageBytes, DefaultMaxMessageBytes),
		env:        append(sandbox.WithoutHostVars(os.Environ()), opts.Env...),
		langs:      map[string]language{},
		missing:    map[string]string{},
		cells:      newCellActivity(),
	}
	if opts.Sandbox.Network == "" {
		opts.Sandbox.Network = unsetNetwork
	}
	t.sandbox, t.noSandbox, t.sandboxErr = sandbox.New(withDriverCache(opts.Sandbox), sandbox.Works)
	if t.sandbox != nil && opts.Warn != nil {
		for _, note := range t.sandbox.Notes() {
			opts.Warn("a host path that should be hidden is readable in every sandbox", "why", note)
		}
	}
	t.limits, t.limitsErr = cgroup.NewLimiter(opts.Limits, t.cgroups)
	t.closed, t.closeCancel = context.WithCancel(context.Background())
	for _, def := range languages {
		t.add(def, cmp.Or(opts.Interpreters[def.interpreter.Name], def.interpreter.Default))
	}
	for name := range opts.Interpreters {
		if !slices.ContainsFunc(languages, func(d langDef) bool { return d.interpreter.Name == name }) && opts.Warn != nil {
			opts.Warn("subprocess: no language runs on this interpreter: its setting is ignored", "interpreter", name)
		}
	}
	if t.limitsErr == nil {
		t.startForkServer(opts.Preload, cleanCwd(opts.PoolCwd), opts.Warn) // fork hook (issue 28)
		t.startPools(opts.PoolSizes, cleanCwd(opts.PoolCwd))
	} else {
		t.forks = map[string]*forkServer{}
		t.startPools(nil, "")
	}
	if t.cgroups {
		go cgroup.RemoveOrphans(killWait)
	}
	return t
}

// startPools starts filling the pool of each language with a size.
func (t *Transport) startPools(sizes map[string]int, cwd string) {
	t.pools = map[string]*pool{}
	for name, size := range sizes {
		if _, ok := t.langs[name]; !ok || size <= 0 {
			continue
		}
		t.pools[name] = newPool(name, size, cwd, func() (procSpec, error) { return t.spec(name, cwd) }, t.sandbox, t.forks[name])
	}
}

// Close kills the pooled interpreters. Kernels are the engine's to shut
// down. The Transport starts no more interpreters into pools afterwards; it
// still starts kernels cold.
func (t *Transport) Close() error {
	t.closeCancel()
	for _, pl := range t.pools {
		pl.close()
	}
	for _, fs := range t.forks {
		fs.close()
	}
	return nil
}

// PoolStats describes each language's pool, sorted by language.
func (t *Transport) PoolStats() []PoolStat {
	stats := make([]PoolStat, 0, len(t.pools))
	for _, pl := range t.pools {
		stats = append(stats, pl.stat())
	}
	sort.Slice(stats, func(i, j int) bool { return stats[i].Language < stats[j].Language })
	return stats
}

// add registers a language when its interpreter is found and its driver
// can run there, and otherwise notes why not, with the Debian package that
// would provide what is missing.
func (t *Transport) add(def langDef, interpreter string) {
	path, err := exec.LookPath(interpreter)
	if err != nil {
		t.missing[def.name] = fmt.Sprintf("its interpreter %q is not installed here (Debian: apt-get install %s)", interpreter, def.interpreter.DebianPackage)
		return
	}
	drv, err := def.newDriver(t, path)
	if err != nil {
		t.missing[def.name] = fmt.Sprintf("%v (Debian: apt-get install %s)", err, def.interpreter.DebianPackage)
		return
	}
	t.langs[def.name] = language{name: def.name, path: path, drv: drv}
}

// tools is how the transport runs an interpreter of the contexts' for its
// own use (the drivers' compiles): in its sandbox, with their environment.
func (t *Transport) tools() sandbox.ToolRunner { return sandbox.Tools(t.sandbox, t.env) }

// Sandboxed reports whether interpreters run in sandboxes; when not, why
// not, and an error when -sandbox=on could not be honoured.
func (t *Transport) Sandboxed() (on bool, why string, err error) {
	return t.sandbox != nil, t.noSandbox, t.sandboxErr
}

// Limited reports an error when a limit of Options.Limits cannot be
// applied on this machine (then no interpreter starts).
func (t *Transport) Limited() error { return t.limitsErr }

// Info implements core.Transport.
func (t *Transport) Info() core.TransportInfo {
	names := make([]string, 0, len(t.langs))
	for name := range t.langs {
		names = append(names, name)
	}
	sort.Strings(names)
	return core.TransportInfo{Name: "subprocess", Version: Version, Languages: names}
}

// StartKernel implements core.Transport: it takes a pooled interpreter, or
// starts one in spec.Cwd, and returns once its driver reported ready.
func (t *Transport) StartKernel(ctx context.Context, spec core.KernelSpec) (core.Kernel, error) {
	if t.sandboxErr != nil {
		return nil, t.sandboxErr
	}
	if t.limitsErr != nil {
		return nil, t.limitsErr
	}
	_, ok := t.langs[spec.Language]
	if why, missing := t.missing[spec.Language]; !ok && missing {
		return nil, &core.Error{Kind: core.KindInvalid, Msg: fmt.Sprintf("subprocess: language %s is not available: %s", core.Quote(spec.Language), why)}
	}
	if !ok {
		// The client asked for something this host cannot run: KindInvalid (400).
		return nil, &core.Error{Kind: core.KindInvalid, Msg: fmt.Sprintf("subprocess: unknown language %s (available: %s)", core.Quote(spec.Language), strings.Join(t.Info().Languages, ", "))}
	}
	if fi, err := os.Stat(spec.Cwd); spec.Cwd != "" && (err != nil || !fi.IsDir()) {
		// The client's mistake, not ours: the API answers 400.
		return nil, &core.Error{Kind: core.KindInvalid, Msg: fmt.Sprintf("cwd %s is not an existing directory", core.Quote(spec.Cwd)), Err: err}
	}
	ps, err := t.spec(spec.Language, spec.Cwd)
	if err != nil {
		return nil, err
	}
	k := &Kernel{
		procSpec: ps,
		pool:     t.pools[spec.Language],
		forks:    t.forks[spec.Language],
		msgs:     make(chan core.Message, 1024),
		quit:     make(chan struct{}),
	}
	p, err := k.startInterpreter(ctx)
	if err != nil {
		return nil, err
	}
	k.setProc(p)
	t.track(k)
	return k, nil
}

// spec is how an interpreter of language name starts in cwd: the same for a
// pooled one and a cold one.
func (t *Transport) spec(name, cwd string) (procSpec, error) {
	lang := t.langs[name]
	args, env, err := lang.drv.command()
	if err != nil {
		return procSpec{}, fmt.Errorf("subprocess: %s: %w", name, err)
	}
	return procSpec{
		lang:       lang,
		args:       args,
		cwd:        cwd,
		env:        append(append([]string(nil), t.env...), env...),
		cgroups:    t.cgroups,
		sandbox:    t.sandbox,
		maxMessage: t.maxMessage,
		limits:     t.limits,
		cells:      t.cells,
	}, nil
}
