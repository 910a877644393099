package subprocess

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/kernelhost/kernelhost/core"
	"github.com/kernelhost/kernelhost/transports/subprocess/internal/jscompile"
)

// A driver is one language's rules: how its interpreter starts, how a
// request is framed on fd 3, how a running request is interrupted, whether
// a pooled interpreter can be moved into another cwd, and on which channel
// its messages come back. Each language has one file (python.go, node.go,
// bash.go, r.go, java.go) holding its driver and its registration
// (register); docs/drivers.md describes the protocol, a section per driver.
type driver interface {
	// command returns the arguments that run the driver under the
	// interpreter, and the environment it adds. It is called before every
	// start (java compiles its driver on the first, python checks its
	// compiled copy).
	command() (args, env []string, err error)
	// encode frames a request for fd 3.
	encode(core.ExecuteRequest) ([]byte, error)
	// interrupt interrupts request id ("": none runs) of the interpreter
	// behind s. Called with the kernel's lock held.
	interrupt(ctx context.Context, s signaller, id string) error
	// cwdRecord frames the record that moves a pooled interpreter, not
	// handed out yet, into dir; the driver answers kh_cwd. nil when the
	// driver cannot move: its pool serves only kernels in the pool's cwd
	// (pool.go).
	cwdRecord(dir string) []byte
	// channel is where the driver's messages come back.
	channel() channel
}

// A forker is a driver whose interpreter can fork itself into a new one,
// an optional capability (python's): its contexts can be forked
// (Transport.ForkKernel) and, with Options.Preload, made by fork from a
// template (forkserver.go). The fork record on fd 3 and what the child
// does are the driver's (fork.go, drivers/forkserver.py).
type forker interface {
	// template makes spec, a context's start spec in cwd, a fork
	// template's that preloads modules.
	template(spec procSpec, preload []string, cwd string) procSpec
}

var _ forker = pythonLang{}

// channel is where a driver writes its messages.
type channel int

const (
	// fd4Lines: JSON lines on fd 4 (msglines.go).
	fd4Lines channel = iota
	// fd1Frames: frames among the prints on fd 1 (frames.go); fd 4 is held
	// open and never written, so its end tells the host the driver exited.
	fd1Frames
)

// langDef registers a language, from its driver's file (register): its
// name as clients give it, the interpreter it runs on and its driver for
// the interpreter found. In this package a language is its driver's file
// (its langDef, its driver, its init that registers it) and its driver
// script (drivers/); the transport and the plugin's settings read the
// languages from here. Outside it a new language needs more (its
// snippets, goldens, a docs row, a Debian package to install):
// docs/drivers.md, "Where a language lives", lists them.
type langDef struct {
	name        string
	interpreter Interpreter
	newDriver   func(t *Transport, path string) (driver, error)
}

// languages are the languages a Transport knows, as their drivers' files
// registered them (register).
var languages []langDef

// register adds a language, from its driver's file's init.
func register(def langDef) {
	for _, d := range languages {
		if d.name == def.name {
			panic("subprocess: language " + def.name + " registered twice")
		}
	}
	languages = append(languages, def)
}

// Interpreter is an interpreter the transport runs languages on, as the
// setting that chooses it describes it.
type Interpreter struct {
	// Name keys it in Options.Interpreters, and names the plugin's setting
	// (-python, -node, -bash, -rscript, -java).
	Name string
	// Default is what runs when Options.Interpreters does not name it: a
	// path, or a name looked up on PATH.
	Default string
	// DebianPackage provides it, for the errors of a language whose
	// interpreter is missing.
	DebianPackage string
	// Help describes the setting.
	Help string
}

// Interpreters lists the interpreters the transport's languages run on,
// sorted by name: what the plugin makes its settings of. A fresh slice each
// call.
func Interpreters() []Interpreter {
	var out []Interpreter
	for _, def := range languages {
		if !slices.ContainsFunc(out, func(in Interpreter) bool { return in.Name == def.interpreter.Name }) {
			out = append(out, def.interpreter)
		}
	}
	slices.SortFunc(out, func(a, b Interpreter) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// signaller is the running interpreter as a driver's interrupt acts on it.
// Its methods are called with the kernel's lock held.
type signaller interface {
	// sigint sends SIGINT to the interpreter's process group.
	sigint() error
	// send writes record on fd 3, bounded by ctx and interruptWriteWait.
	send(ctx context.Context, record []byte) error
	// alive says the interpreter has not exited.
	alive() bool
	// later calls f after d, with the kernel's lock held, if request id
	// still runs on the same interpreter then: its end has not been
	// reported, and no later request can have been sent.
	later(d time.Duration, id string, f func())
}

// sigintRecorder is a driver that is told, by a record on fd 3, of each
// SIGINT sent while a request runs (node, java: see sigintNoted).
type sigintRecorder interface {
	sigintRecord(msgID string) []byte
}

// interruptWriteWait bounds the write of an interrupt's record on fd 3.
const interruptWriteWait = time.Second

// sigintNoted sends SIGINT for request id and then, when record is set,
// the record that says so on fd 3. Node and the JVM can handle a signal
// after the request it was sent for is over, in the next one (drainSigint
// in driver.js, awaitSignals in Driver.java); the record, on fd 3 before
// any later request, lets the driver take the signal first.
func sigintNoted(s signaller, id string, record func(msgID string) []byte) error {
	if err := s.sigint(); err != nil {
		return err
	}
	if id != "" && record != nil {
		_ = s.send(context.Background(), record(id))
	}
	return nil
}

// sigintResends are the delays after an interrupt at which a driver that
// can miss a SIGINT (bash, R, java) gets it again if the same request
// still runs. A SIGINT that lands while bash forks a command substitution
// (`for i in $(seq 600)`) is taken by the child before it resets its traps;
// the child exits normally, so bash assumes the command handled the signal
// and runs on. A second SIGINT ends nearly all of those; the rare rest
// ignores the later ones too and is left to the engine, which restarts the
// kernel after InterruptGrace.
var sigintResends = []time.Duration{100 * time.Millisecond, 400 * time.Millisecond, time.Second}

// sigintResent sends SIGINT (sigintNoted) now, and again after each of
// delays while request id still runs.
func sigintResent(s signaller, id string, record func(msgID string) []byte, delays []time.Duration) error {
	if err := sigintNoted(s, id, record); err != nil {
		return err
	}
	resendSigint(s, id, record, delays)
	return nil
}

func resendSigint(s signaller, id string, record func(msgID string) []byte, delays []time.Duration) {
	if id == "" || len(delays) == 0 {
		return
	}
	s.later(delays[0], id, func() {
		_ = sigintNoted(s, id, record)
		resendSigint(s, id, record, delays[1:])
	})
}

// jsonRequest is a request as the python and node drivers read it: one
// JSON line on fd 3.
type jsonRequest struct {
	MsgID  string `json:"msg_id"`
	Code   string `json:"code"`
	Silent bool   `json:"silent,omitempty"`

	// For driver.js (see jscompile.Cell).
	Imports   string                  `json:"imports,omitempty"`
	SourceMap string                  `json:"source_map,omitempty"`
	Error     *jscompile.CompileError `json:"compile_error,omitempty"`
}

func (r jsonRequest) line() ([]byte, error) {
	b, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// jsonRecord frames a record {"<key>": value} on fd 3 of the python and
// node drivers.
func jsonRecord(key, value string) []byte {
	b, _ := json.Marshal(map[string]string{key: value}) // a map of strings always marshals
	return append(b, '\n')
}

// encodeHeader frames a request for the drivers without a JSON parser (R,
// java): a header line "<silent 0|1> <code length in bytes> <msg_id>",
// then the code.
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
