package subprocess

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strings"

	"github.com/kernelhost/kernelhost/core"
)

// Version is reported in Info.
const Version = "0.1.0"

// Options configures a Transport. The zero value is ready to use.
type Options struct {
	// Python, Bash and Node are the interpreters, as paths or names looked up
	// on PATH. Defaults: "python3", "bash", "node".
	Python, Bash, Node string
	// Env holds extra "KEY=value" entries appended to the host's environment
	// for every interpreter.
	Env []string
}

// Transport starts local interpreter processes. It is safe for concurrent use.
type Transport struct {
	env   []string
	langs map[string]language // by normalised language name, only those found
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
	// resendSigint: SIGINT is sent again while the interrupted request still
	// runs (see sigintResends).
	resendSigint bool
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
	t := &Transport{
		env:   append(os.Environ(), opts.Env...),
		langs: map[string]language{},
	}
	if path, err := exec.LookPath(opts.Python); err == nil {
		// Unbuffered, so that writes to sys.__stdout__ by libraries reach fd 1 at once.
		t.langs["python"] = language{path: path, args: []string{"-c", driverPython}, env: []string{"PYTHONUNBUFFERED=1"}, encode: encodeJSON}
	}
	if path, err := exec.LookPath(opts.Bash); err == nil {
		t.langs["bash"] = language{path: path, args: []string{"--noprofile", "--norc", "-c", driverBash, "bash"}, encode: encodeBash, resendSigint: true}
	}
	if path, err := exec.LookPath(opts.Node); err == nil {
		// typescript runs on the same driver: the host compiles each cell
		// (see jscell.go), so node is all either needs.
		t.langs["javascript"] = language{path: path, args: []string{"-e", driverNode}, encode: encodeJavaScript, interrupt: encodeInterrupt}
		t.langs["typescript"] = language{path: path, args: []string{"-e", driverNode}, encode: encodeTypeScript, interrupt: encodeInterrupt}
	}
	return t
}

// Info implements core.Transport.
func (t *Transport) Info() core.TransportInfo {
	names := make([]string, 0, len(t.langs))
	for name := range t.langs {
		names = append(names, name)
	}
	sort.Strings(names)
	return core.TransportInfo{Name: "subprocess", Version: Version, Languages: names}
}

// StartKernel implements core.Transport: it starts the interpreter in
// spec.Cwd and returns once its driver reported ready.
func (t *Transport) StartKernel(ctx context.Context, spec core.KernelSpec) (core.Kernel, error) {
	lang, ok := t.langs[spec.Language]
	if !ok {
		// The client asked for something this host cannot run: KindInvalid (400).
		return nil, &core.Error{Kind: core.KindInvalid, Msg: fmt.Sprintf("subprocess: unknown language %s (available: %s)", core.Quote(spec.Language), strings.Join(t.Info().Languages, ", "))}
	}
	if fi, err := os.Stat(spec.Cwd); spec.Cwd != "" && (err != nil || !fi.IsDir()) {
		// The client's mistake, not ours: the API answers 400.
		return nil, &core.Error{Kind: core.KindInvalid, Msg: fmt.Sprintf("cwd %s is not an existing directory", core.Quote(spec.Cwd)), Err: err}
	}
	k := &Kernel{
		lang:     lang,
		langName: spec.Language,
		cwd:      spec.Cwd,
		env:      append(append([]string(nil), t.env...), lang.env...),
		msgs:     make(chan core.Message, 1024),
		quit:     make(chan struct{}),
	}
	p, err := k.startProc(ctx)
	if err != nil {
		return nil, err
	}
	k.setProc(p)
	return k, nil
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

func encodeInterrupt(msgID string) []byte {
	b, _ := json.Marshal(struct {
		Interrupt string `json:"interrupt"`
	}{msgID}) // a struct of one string always marshals
	return append(b, '\n')
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
