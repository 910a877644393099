package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"

	"github.com/kernelhost/kernelhost/core"
)

// fakeTransport starts scripted kernels. They behave like a Jupyter kernel in
// the ways the invariants depend on: one request at a time from an internal
// queue, stop_on_error (a failed request aborts whatever is queued behind it),
// interrupts that only hit running code, restarts that lose state, and the
// message sequence busy → execute_input → outputs → execute_reply → idle.
//
// User code is a tiny command language, one command per line:
//
//	print T | eprint T | result T | getenv K | cwd | block | ignoreint | raise | die | stray | many N
//
// Silent requests must be the engine's python snippets, which the fake parses,
// so the tests also prove the snippets carry values exactly.
type fakeTransport struct {
	mu       sync.Mutex
	kernels  []*fakeKernel
	startErr error // when set, StartKernel fails with it
	// paced kernels emit a message only once the one before it was taken
	// off their channel, as a real kernel's messages come one at a time,
	// apart: each then travels through the engine on its own.
	paced bool
}

func (t *fakeTransport) Info() core.TransportInfo {
	return core.TransportInfo{Name: "fake", Version: "test", Languages: []string{"python"}}
}

func (t *fakeTransport) StartKernel(ctx context.Context, spec core.KernelSpec) (core.Kernel, error) {
	if spec.Language != "python" {
		return nil, fmt.Errorf("fake transport: no kernel for language %q", spec.Language)
	}
	t.mu.Lock()
	err := t.startErr
	t.mu.Unlock()
	if err != nil {
		return nil, err
	}
	k := &fakeKernel{
		msgs:    make(chan core.Message, 4096),
		reqs:    make(chan core.ExecuteRequest, 64),
		intr:    make(chan struct{}, 1),
		release: make(chan struct{}),
		stop:    make(chan struct{}),
		kill:    make(chan struct{}),
		env:     map[string]string{},
		started: make(chan string, 64),
		paced:   t.paced,
	}
	t.mu.Lock()
	t.kernels = append(t.kernels, k)
	t.mu.Unlock()
	go k.serve()
	return k, nil
}

func (t *fakeTransport) kernel(i int) *fakeKernel {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.kernels[i]
}

type fakeKernel struct {
	msgs    chan core.Message
	reqs    chan core.ExecuteRequest
	intr    chan struct{}
	release chan struct{} // a send releases one `block`
	stop    chan struct{}
	kill    chan struct{} // closed by Restart and Shutdown: the running code is gone
	started chan string   // code of every user request as it starts running

	mu             sync.Mutex
	gen            int // bumped by Restart: older requests emit nothing more
	env            map[string]string
	saved          map[string]*string // values shadowed by the running request's env vars (nil: was unset)
	cwd            string
	count          int
	dead           bool
	running        bool
	outstanding    int
	maxOutstanding int
	aborted        int
	shut           bool
	// resetGate, if set, holds every env reset (the restore snippet) until
	// a value comes on it.
	resetGate chan struct{}
	// failRestart makes Restart fail, leaving the kernel as it is.
	failRestart bool
	paced       bool // see fakeTransport.paced
}

func (k *fakeKernel) Messages() <-chan core.Message { return k.msgs }

func (k *fakeKernel) Execute(ctx context.Context, req core.ExecuteRequest) error {
	k.mu.Lock()
	if k.shut {
		k.mu.Unlock()
		return errors.New("fake kernel: shut down")
	}
	k.outstanding++
	k.maxOutstanding = max(k.maxOutstanding, k.outstanding)
	k.mu.Unlock()
	select {
	case k.reqs <- req:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (k *fakeKernel) Interrupt(ctx context.Context) error {
	k.mu.Lock()
	running := k.running
	k.mu.Unlock()
	if running { // like SIGINT to an idle ipykernel: no effect between requests
		select {
		case k.intr <- struct{}{}:
		default:
		}
	}
	return nil
}

func (k *fakeKernel) Restart(ctx context.Context) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.failRestart {
		return errors.New("fake kernel: restart failed")
	}
	k.gen++
	close(k.kill)
	k.kill = make(chan struct{})
	k.env, k.cwd, k.count, k.dead = map[string]string{}, "", 0, false
	for {
		select {
		case <-k.reqs:
			k.outstanding--
			continue
		default:
		}
		break
	}
	k.msgs <- core.Message{Type: core.MsgStatus, State: core.StateRestarting}
	return nil
}

func (k *fakeKernel) Shutdown(ctx context.Context) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.shut {
		k.shut = true
		k.gen++
		close(k.stop)
		close(k.kill)
	}
	return nil
}

// lose closes Messages as a transport does when the kernel is gone for good.
func (k *fakeKernel) lose() { _ = k.Shutdown(context.Background()) }

func (k *fakeKernel) stats() (maxOutstanding, aborted int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.maxOutstanding, k.aborted
}

func (k *fakeKernel) serve() {
	defer close(k.msgs)
	for {
		select {
		case <-k.stop:
			return
		case req := <-k.reqs:
			k.handle(req)
		}
	}
}

// emit sends m unless a restart or shutdown happened since gen.
func (k *fakeKernel) emit(gen int, m core.Message) bool {
	k.mu.Lock()
	if k.gen != gen {
		k.mu.Unlock()
		return false
	}
	k.msgs <- m
	k.mu.Unlock()
	for k.paced && len(k.msgs) > 0 {
		runtime.Gosched() // the kernel "computes" until its message was taken
	}
	return true
}

func (k *fakeKernel) handle(req core.ExecuteRequest) {
	k.mu.Lock()
	gen := k.gen
	if k.dead {
		k.outstanding--
		k.mu.Unlock()
		return // a dead kernel answers nothing
	}
	k.running = true
	kill := k.kill
	select { // a stale interrupt never reaches a new request
	case <-k.intr:
	default:
	}
	if !req.Silent {
		k.count++
	}
	count := k.count
	k.mu.Unlock()
	p := req.MsgID
	k.emit(gen, core.Message{ParentID: p, Type: core.MsgStatus, State: core.StateBusy})
	var failure *core.Message
	if req.Silent {
		failure = k.runSnippet(gen, p, req.Code)
	} else {
		k.emit(gen, core.Message{ParentID: p, Type: core.MsgExecuteInput, ExecutionCount: count})
		select {
		case k.started <- req.Code:
		default:
		}
		failure = k.runCommands(gen, p, req.Code, kill)
	}
	if failure != nil && failure.EName == "died" {
		k.mu.Lock()
		k.running = false
		k.outstanding--
		k.mu.Unlock()
		return
	}
	// stop_on_error aborts what was queued when the request failed; taken
	// now, before the reply goes out, so that what a client sends once it
	// has seen the reply is not counted as queued behind the failure.
	var queued []core.ExecuteRequest
	if failure != nil {
		queued = k.takeQueued(gen)
	}
	reply := core.Message{ParentID: p, Type: core.MsgExecuteReply, Status: core.ReplyOK, ExecutionCount: count}
	if failure != nil {
		if !req.Silent {
			k.emit(gen, core.Message{ParentID: p, Type: core.MsgError, EName: failure.EName, EValue: failure.EValue, Traceback: failure.Traceback})
		}
		reply.Status, reply.EName, reply.EValue = core.ReplyError, failure.EName, failure.EValue
	}
	k.emit(gen, reply)
	k.mu.Lock()
	k.running = false
	k.outstanding--
	k.mu.Unlock()
	k.emit(gen, core.Message{ParentID: p, Type: core.MsgStatus, State: core.StateIdle})
	for _, req := range queued {
		k.emit(gen, core.Message{ParentID: req.MsgID, Type: core.MsgStatus, State: core.StateBusy})
		k.emit(gen, core.Message{ParentID: req.MsgID, Type: core.MsgExecuteReply, Status: core.ReplyAborted})
		k.emit(gen, core.Message{ParentID: req.MsgID, Type: core.MsgStatus, State: core.StateIdle})
	}
}

// takeQueued is stop_on_error's first half: it takes every request queued
// behind a failure, counted as aborted; the caller answers them as aborted.
// Once a restart replaced the interpreter that failed (gen moved on), it
// takes nothing: what is queued then was sent to the new one.
func (k *fakeKernel) takeQueued(gen int) []core.ExecuteRequest {
	var queued []core.ExecuteRequest
	for {
		k.mu.Lock()
		if k.gen != gen {
			k.mu.Unlock()
			return queued
		}
		select {
		case req := <-k.reqs:
			k.aborted++
			k.outstanding--
			k.mu.Unlock()
			queued = append(queued, req)
		default:
			k.mu.Unlock()
			return queued
		}
	}
}

func (k *fakeKernel) runCommands(gen int, p, code string, kill chan struct{}) *core.Message {
	out := func(name, text string) {
		k.emit(gen, core.Message{ParentID: p, Type: core.MsgStream, Name: name, Text: text})
	}
	for _, line := range strings.Split(code, "\n") {
		cmd, arg, _ := strings.Cut(line, " ")
		switch cmd {
		case "":
		case "print":
			out("stdout", arg+"\n")
		case "eprint":
			out("stderr", arg+"\n")
		case "result":
			raw, _ := json.Marshal(arg)
			k.emit(gen, core.Message{ParentID: p, Type: core.MsgExecuteResult, Data: map[string]json.RawMessage{"text/plain": raw}})
		case "getenv":
			k.mu.Lock()
			v, ok := k.env[arg]
			k.mu.Unlock()
			if ok {
				out("stdout", arg+"="+v)
			} else {
				out("stdout", arg+" unset")
			}
		case "cwd":
			k.mu.Lock()
			cwd := k.cwd
			k.mu.Unlock()
			out("stdout", cwd)
		case "block":
			select {
			case <-k.release:
			case <-k.intr:
				return &core.Message{EName: "KeyboardInterrupt", EValue: ""}
			case <-kill:
				return &core.Message{EName: "died"}
			}
		case "ignoreint":
			select {
			case <-k.release:
			case <-kill:
				return &core.Message{EName: "died"}
			}
		case "raise":
			return &core.Message{EName: "NameError", EValue: "name 'x' is not defined", Traceback: []string{"Traceback", "NameError: name 'x' is not defined"}}
		case "die":
			k.mu.Lock()
			k.dead = true
			k.mu.Unlock()
			k.emit(gen, core.Message{Type: core.MsgStatus, State: core.StateDead})
			return &core.Message{EName: "died"}
		case "stray":
			k.emit(gen, core.Message{ParentID: "not-a-request", Type: core.MsgStream, Name: "stdout", Text: "stray\n"})
		case "many":
			n, _ := strconv.Atoi(arg)
			for i := range n {
				out("stdout", strconv.Itoa(i)+"\n")
			}
		default:
			return &core.Message{EName: "SyntaxError", EValue: "unknown command " + cmd}
		}
	}
	return nil
}

var (
	setEnvRe   = regexp.MustCompile(`^__import__\('os'\)\.environ\.__setitem__\(('(?:[^'\\]|\\.)*'), ('(?:[^'\\]|\\.)*')\)$`)
	unsetEnvRe = regexp.MustCompile(`^__import__\('os'\)\.environ\.pop\(('(?:[^'\\]|\\.)*'), None\)$`)
	chdirRe    = regexp.MustCompile(`^__import__\('os'\)\.chdir\(('(?:[^'\\]|\\.)*')\)$`)
)

// The fixed starts of pySaveAndSet's and pyRestore's expressions; the
// literals follow.
const (
	saveAndSetPrefix = "(lambda e, s, n: (s.__setitem__('_kh_env_saved', {k: e.get(k) for k in n}), [e.__setitem__(k, v) for k, v in n.items()]))(__import__('os').environ, __import__('sys').__dict__, {"
	restorePrefix    = "(lambda e, s, ks: [e.__setitem__(k, s[k]) if s.get(k) is not None else e.pop(k, None) for k in ks])(__import__('os').environ, __import__('sys').__dict__.pop('_kh_env_saved', None) or {}, ("
)

var pyLiteralRe = regexp.MustCompile(`'(?:[^'\\]|\\.)*'`)

// pyLiterals decodes every string literal in s, in order.
func pyLiterals(s string) ([]string, error) {
	var out []string
	for _, lit := range pyLiteralRe.FindAllString(s, -1) {
		v, err := decodePyString(lit)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// saveAndSet applies pySaveAndSet's dict of keys and values (rest holds its literals).
func (k *fakeKernel) saveAndSet(rest string) error {
	lits, err := pyLiterals(rest)
	if err != nil || len(lits)%2 != 0 {
		return fmt.Errorf("bad save-and-set snippet %q: %v", rest, err)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.saved = map[string]*string{}
	for i := 0; i < len(lits); i += 2 {
		if v, ok := k.env[lits[i]]; ok {
			k.saved[lits[i]] = &v
		} else {
			k.saved[lits[i]] = nil
		}
		k.env[lits[i]] = lits[i+1]
	}
	return nil
}

// restore applies pyRestore's tuple of keys (rest holds its literals).
func (k *fakeKernel) restore(rest string) error {
	k.mu.Lock()
	gate := k.resetGate
	k.mu.Unlock()
	if gate != nil {
		<-gate
	}
	keys, err := pyLiterals(rest)
	if err != nil {
		return err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, key := range keys {
		if v := k.saved[key]; v != nil {
			k.env[key] = *v
		} else {
			delete(k.env, key)
		}
	}
	k.saved = nil
	return nil
}

// runSnippet applies the engine's python helper code, and prints the text
// of "print " and "eprint " lines (a kernel setup's output); anything else
// fails, as a syntax error would in Python.
func (k *fakeKernel) runSnippet(gen int, p, code string) *core.Message {
	for _, line := range strings.Split(code, "\n") {
		var err error
		switch m := (struct{ set, unset, cd []string }{setEnvRe.FindStringSubmatch(line), unsetEnvRe.FindStringSubmatch(line), chdirRe.FindStringSubmatch(line)}); {
		case line == "" || line == "# kernelhost helper":
		case strings.HasPrefix(line, "print "):
			k.emit(gen, core.Message{ParentID: p, Type: core.MsgStream, Name: "stdout", Text: strings.TrimPrefix(line, "print ") + "\n"})
		case strings.HasPrefix(line, "eprint "):
			k.emit(gen, core.Message{ParentID: p, Type: core.MsgStream, Name: "stderr", Text: strings.TrimPrefix(line, "eprint ") + "\n"})
		case strings.HasPrefix(line, saveAndSetPrefix):
			err = k.saveAndSet(strings.TrimPrefix(line, saveAndSetPrefix))
		case strings.HasPrefix(line, restorePrefix):
			err = k.restore(strings.TrimPrefix(line, restorePrefix))
		case m.set != nil:
			var key, val string
			if key, err = decodePyString(m.set[1]); err == nil {
				if val, err = decodePyString(m.set[2]); err == nil {
					k.mu.Lock()
					k.env[key] = val
					k.mu.Unlock()
				}
			}
		case m.unset != nil:
			var key string
			if key, err = decodePyString(m.unset[1]); err == nil {
				k.mu.Lock()
				delete(k.env, key)
				k.mu.Unlock()
			}
		case m.cd != nil:
			var dir string
			if dir, err = decodePyString(m.cd[1]); err == nil {
				if strings.HasPrefix(dir, "/missing") {
					return &core.Message{EName: "FileNotFoundError", EValue: "No such file or directory: " + dir}
				}
				k.mu.Lock()
				k.cwd = dir
				k.mu.Unlock()
			}
		default:
			err = fmt.Errorf("not a snippet: %q", line)
		}
		if err != nil {
			return &core.Message{EName: "SyntaxError", EValue: err.Error()}
		}
	}
	return nil
}

// decodePyString decodes the subset of Python string literals pyString writes.
func decodePyString(lit string) (string, error) {
	if len(lit) < 2 || lit[0] != '\'' || lit[len(lit)-1] != '\'' {
		return "", fmt.Errorf("not a literal: %s", lit)
	}
	s := lit[1 : len(lit)-1]
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '\n' || c == '\r' {
			return "", fmt.Errorf("raw line break in literal %s", lit)
		}
		if c != '\\' {
			b.WriteByte(c)
			continue
		}
		i++
		if i >= len(s) {
			return "", fmt.Errorf("dangling backslash in %s", lit)
		}
		switch s[i] {
		case '\\', '\'':
			b.WriteByte(s[i])
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 't':
			b.WriteByte('\t')
		case 'x', 'u':
			n := 2
			if s[i] == 'u' {
				n = 4
			}
			v, err := strconv.ParseUint(s[i+1:i+1+n], 16, 32)
			if err != nil {
				return "", err
			}
			b.WriteRune(rune(v))
			i += n
		default:
			return "", fmt.Errorf("unknown escape \\%c", s[i])
		}
	}
	return b.String(), nil
}
