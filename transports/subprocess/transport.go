package subprocess

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"

	"github.com/kernelhost/kernelhost/core"
)

// Version is reported in Info.
const Version = "0.1.0"

// Options configures a Transport. The zero value is ready to use.
type Options struct {
	// Python, Bash, Node, R and Java are the interpreters, as paths or names
	// looked up on PATH. Defaults: "python3", "bash", "node", "Rscript",
	// "java" (a JDK's: its javac, next to it, compiles the driver).
	Python, Bash, Node, R, Java string
	// NoCgroups turns off the cgroup per interpreter (see reap.go): delete,
	// restart and shutdown then end an interpreter's descendants by its
	// process tree.
	NoCgroups bool
	// Env holds extra "KEY=value" entries appended to the host's environment
	// (minus its KERNELHOST_* variables) for every interpreter.
	Env []string
	// PoolSizes is how many ready interpreters each language keeps (see
	// pool.go, ParsePoolSizes); nil or 0: none, every
	// kernel starts its interpreter cold. Close kills them.
	PoolSizes map[string]int
	// PoolCwd is where pooled interpreters start. The host passes its
	// default cwd. "" is this process's directory. A python, javascript or
	// typescript kernel in another cwd takes a pooled interpreter too, moved
	// there on hand-out (see pool.go); other languages' pools serve only
	// kernels in PoolCwd.
	PoolCwd string
	// Sandbox configures the sandbox each interpreter runs in (sandbox.go).
	Sandbox SandboxOptions
	// MaxMessageBytes caps what one interpreter message may carry: one
	// message line, one batch's output (see msgLines); past it output is
	// cut, with a notice. 0: DefaultMaxMessageBytes.
	MaxMessageBytes int
	// Limits bound each interpreter (limits.go). A limit this machine has no
	// cgroup controller for makes Limited and every StartKernel fail.
	Limits Limits
	// Preload lists the modules python's fork server preloads (forkserver.go,
	// ParsePreload); empty: no fork server. Ignored when interpreters are
	// sandboxed.
	Preload []string
}

// Transport starts local interpreter processes. It is safe for concurrent use.
type Transport struct {
	cgroups    bool
	maxMessage int
	sandbox    *sandbox // nil: interpreters run unsandboxed
	// noSandbox says why there is no sandbox; sandboxErr, when set, is why
	// no interpreter starts (-sandbox=on where bwrap cannot work).
	noSandbox  string
	sandboxErr error
	limits     *limiter // nil: none
	limitsErr  error    // why the limits asked for cannot be applied here
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

// language says how to run one language's driver.
type language struct {
	path   string                                    // resolved interpreter
	args   []string                                  // arguments that run the driver
	env    []string                                  // extra environment for this language
	encode func(core.ExecuteRequest) ([]byte, error) // request framing on fd 3
	// interrupt, when set, frames an interrupt of request msgID, written on
	// fd 3 before any SIGINT (see Kernel.Interrupt and driver.js).
	interrupt func(msgID string) []byte
	// sigintSent, when set, frames the record written on fd 3 after each
	// SIGINT sent while request msgID runs (see Kernel.sigintNoted).
	sigintSent func(msgID string) []byte
	// resendSigint: SIGINT is sent again while the interrupted request still
	// runs (see sigintResends).
	resendSigint bool
	// noIdleSigint: no SIGINT is sent while no request runs. The JVM runs
	// its signal handlers on a thread of their own, late under load: an
	// idle interrupt's SIGINT could reach the Java driver once the next
	// cell had started, and stop it.
	noIdleSigint bool
	// prepare, when set, readies the driver before the first start and
	// returns the arguments that run it (java compiles its driver once).
	prepare func() ([]string, error)
	// ticks: the driver reads flush ticks on fd 5 (see proc.startTicks and
	// doc.go, "Output coalescing").
	ticks bool
	// enterCwd, when set, frames the record that moves a pooled interpreter
	// into a kernel's cwd on hand-out; the driver answers kh_cwd (see
	// proc.enterCwd). Without it a pool serves only kernels in its own cwd.
	enterCwd func(dir string) []byte
	// framed: the driver writes its messages into fd 1 as frames, among
	// its prints, instead of to fd 4 (frames.go).
	framed bool
}

// New returns a Transport for the interpreters of opts that exist on this
// machine; Info().Languages lists only those.
func New(opts Options) *Transport {
	if opts.Python == "" {
		opts.Python = "python3"
	}
	if opts.Bash == "" {
		opts.Bash = "bash"
	}
	if opts.Node == "" {
		opts.Node = "node"
	}
	if opts.R == "" {
		opts.R = "Rscript"
	}
	if opts.Java == "" {
		opts.Java = "java"
	}
	noCoreDumps()
	t := &Transport{
		cgroups:    !opts.NoCgroups,
		maxMessage: cmp.Or(opts.MaxMessageBytes, DefaultMaxMessageBytes),
		env:        append(withoutHostSettings(os.Environ()), opts.Env...),
		langs:      map[string]language{},
		missing:    map[string]string{},
	}
	t.sandbox, t.noSandbox, t.sandboxErr = newSandbox(opts.Sandbox, bwrapWorks)
	t.limits, t.limitsErr = newLimiter(opts.Limits, t.cgroups)
	t.closed, t.closeCancel = context.WithCancel(context.Background())
	// Unbuffered, so that writes to sys.__stdout__ by libraries reach fd 1 at once.
	t.add("python", opts.Python, "python3", language{env: []string{"PYTHONUNBUFFERED=1"}, encode: encodeJSON, ticks: true, framed: true, enterCwd: encodeEnterCwd})
	if lang, ok := t.langs["python"]; ok {
		lang.prepare = newPythonDriver(t.closed, lang.path).prepare
		t.langs["python"] = lang
	}
	t.add("bash", opts.Bash, "bash", language{args: []string{"--noprofile", "--norc", "-c", driverBash, "bash"}, encode: encodeBash, resendSigint: true})
	// typescript runs on the same driver: the host compiles each cell (see
	// jscell.go), so node is all either needs.
	t.add("javascript", opts.Node, "nodejs", language{args: []string{"-e", driverNode}, encode: encodeJavaScript, interrupt: encodeInterrupt, sigintSent: encodeSigintSent, enterCwd: encodeEnterCwd})
	t.add("typescript", opts.Node, "nodejs", language{args: []string{"-e", driverNode}, encode: encodeTypeScript, interrupt: encodeInterrupt, sigintSent: encodeSigintSent, enterCwd: encodeEnterCwd})
	// R keeps a SIGINT that lands while it reads fd 3 pending and the driver
	// drops it once the request is read (see driver.R): the resends cover an
	// interrupt sent just before the code started.
	t.add("r", opts.R, "r-base-core", language{args: rDriverArgs, env: []string{rDriverEnv + "=" + driverR}, encode: encodeHeader, resendSigint: true})
	t.addJava(opts.Java)
	if t.limitsErr == nil {
		t.startPools(opts.PoolSizes, cleanCwd(opts.PoolCwd))
	} else {
		t.startPools(nil, "")
	}
	if t.limitsErr == nil {
		t.startForkServer(opts.Preload, cleanCwd(opts.PoolCwd)) // fork hook (issue 28)
	}
	if t.cgroups {
		go removeOrphanCgroups()
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
		t.pools[name] = newPool(name, size, cwd, func() (procSpec, error) { return t.spec(name, cwd) })
		t.pools[name].sandbox = t.sandbox
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

// addJava registers java: jshell's API runs in the driver's JVM, so a JDK
// (java with javac beside it) is needed.
func (t *Transport) addJava(interpreter string) {
	const pkg = "default-jdk-headless"
	t.add("java", interpreter, pkg, language{encode: encodeHeader, sigintSent: encodeHeaderSigint, resendSigint: true, noIdleSigint: true})
	lang, ok := t.langs["java"]
	if !ok {
		return
	}
	d, err := newJavaDriver(lang.path)
	if err != nil {
		delete(t.langs, "java")
		t.missing["java"] = fmt.Sprintf("%v (Debian: apt-get install %s)", err, pkg)
		return
	}
	lang.prepare = d.prepare
	t.langs["java"] = lang
}

// add registers lang when its interpreter is found, and otherwise notes
// which Debian package would provide it.
func (t *Transport) add(name, interpreter, debianPackage string, lang language) {
	path, err := exec.LookPath(interpreter)
	if err != nil {
		t.missing[name] = fmt.Sprintf("its interpreter %q is not installed here (Debian: apt-get install %s)", interpreter, debianPackage)
		return
	}
	lang.path = path
	t.langs[name] = lang
}

// hostEnvPrefix starts kernelhost's own environment variables: its settings
// and secrets (KERNELHOST_ACCESS_TOKEN, KERNELHOST_JUPYTER_TOKEN, policy
// configs). Interpreters run user code, which must not read them.
const hostEnvPrefix = "KERNELHOST_"

// withoutHostSettings returns env without kernelhost's own variables.
func withoutHostSettings(env []string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		if !strings.HasPrefix(kv, hostEnvPrefix) {
			out = append(out, kv)
		}
	}
	return out
}

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
	if lang.prepare != nil {
		args, err := lang.prepare()
		if err != nil {
			return procSpec{}, fmt.Errorf("subprocess: %s: %w", name, err)
		}
		lang.args = args
	}
	return procSpec{
		lang:       lang,
		langName:   name,
		cwd:        cwd,
		env:        append(append([]string(nil), t.env...), lang.env...),
		cgroups:    t.cgroups,
		sandbox:    t.sandbox,
		maxMessage: t.maxMessage,
		limits:     t.limits,
	}, nil
}

type jsonRequest struct {
	MsgID  string `json:"msg_id"`
	Code   string `json:"code"`
	Silent bool   `json:"silent,omitempty"`

	// For driver.js (see jsCell).
	Imports   string     `json:"imports,omitempty"`
	SourceMap string     `json:"source_map,omitempty"`
	Error     *cellError `json:"compile_error,omitempty"`
}

func encodeJSON(req core.ExecuteRequest) ([]byte, error) {
	b, err := json.Marshal(jsonRequest{MsgID: req.MsgID, Code: req.Code, Silent: req.Silent})
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

func encodeJavaScript(req core.ExecuteRequest) ([]byte, error) {
	return encodeCell(req, prepareJavaScript(req.Code))
}

func encodeTypeScript(req core.ExecuteRequest) ([]byte, error) {
	return encodeCell(req, prepareTypeScript(req.Code))
}

func encodeCell(req core.ExecuteRequest, c jsCell) ([]byte, error) {
	b, err := json.Marshal(jsonRequest{MsgID: req.MsgID, Code: c.code, Silent: req.Silent, Imports: c.imports, SourceMap: c.sourceMap, Error: c.err})
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// jsonRecord returns the framing of a record {"<key>": value} on fd 3 of
// the python and node drivers.
func jsonRecord(key string) func(value string) []byte {
	return func(value string) []byte {
		b, _ := json.Marshal(map[string]string{key: value}) // a map of strings always marshals
		return append(b, '\n')
	}
}

var (
	encodeInterrupt  = jsonRecord("interrupt") // node: an interrupt, before any SIGINT
	encodeSigintSent = jsonRecord("sigint")    // node: after a SIGINT (see Kernel.sigintNoted)
	encodeEnterCwd   = jsonRecord("cwd")       // the hand-out of a pooled interpreter
)

// encodeHeaderSigint frames the record of a SIGINT for the Java driver: a
// header line "sigint 0 <msg_id>" (the msg_id of a request encodeHeader
// framed, so without a line break).
func encodeHeaderSigint(msgID string) []byte {
	return []byte("sigint 0 " + msgID + "\n")
}

// encodeHeader frames a request for the drivers without a JSON parser (R):
// a header line "<silent 0|1> <code length in bytes> <msg_id>", then the code.
func encodeHeader(req core.ExecuteRequest) ([]byte, error) {
	if strings.ContainsAny(req.MsgID, "\n\r") {
		return nil, errors.New("msg_id cannot contain a line break")
	}
	silent := 0
	if req.Silent {
		silent = 1
	}
	header := fmt.Sprintf("%d %d %s\n", silent, len(req.Code), req.MsgID)
	return append([]byte(header), req.Code...), nil
}

func encodeBash(req core.ExecuteRequest) ([]byte, error) {
	if strings.IndexByte(req.Code, 0) >= 0 {
		return nil, errors.New("bash code cannot contain a NUL byte")
	}
	b := make([]byte, 0, len(req.Code)+2)
	if req.Silent {
		b = append(b, '1')
	} else {
		b = append(b, '0')
	}
	b = append(b, req.Code...)
	return append(b, 0), nil
}
