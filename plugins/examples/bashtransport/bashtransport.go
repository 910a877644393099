// Package bashtransport is an example out-of-tree kernelhost transport: a
// template for authors. It runs each kernel as one long-lived bash process
// and sends each request's code to it on stdin, so shell state (variables,
// functions, cwd) lives on between requests.
//
// How a request runs: the code is passed to `eval` (inside a function, so an
// interrupt can end it) through a quoted here-document read by `read`, so it
// is never spliced into shell syntax; then the shell
// prints an end marker carrying the exit status on stdout and on stderr. The
// readers turn everything before the markers into stream messages and, once
// both markers arrived, send execute_reply and status idle. A non-zero exit
// status is reported as an error named "ExitStatus".
//
// To turn it into a plugin, the main is one line:
//
//	func main() { transportplugin.Serve(bashtransport.New()) }
package bashtransport

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/kernelhost/kernelhost/core"
)

// Transport starts bash kernels. The zero value is not usable; call New.
type Transport struct {
	bash string
}

var _ core.Transport = (*Transport)(nil)

// New returns a transport that runs "bash" from PATH.
func New() *Transport { return &Transport{bash: "bash"} }

// Info names the transport and the one language it speaks.
func (t *Transport) Info() core.TransportInfo {
	return core.TransportInfo{Name: "example-bash", Version: "0.1.0", Languages: []string{"bash"}}
}

// StartKernel starts a bash process in spec.Cwd.
func (t *Transport) StartKernel(ctx context.Context, spec core.KernelSpec) (core.Kernel, error) {
	if spec.Language != "bash" {
		return nil, &core.Error{Kind: core.KindInvalid, Msg: fmt.Sprintf("example-bash transport: unknown language %s (it only runs bash)", core.Quote(spec.Language))}
	}
	// A cwd that is not a directory is the caller's mistake, not the
	// transport's: say so with a KindInvalid error, which the host answers
	// with 400, instead of failing in fork/exec.
	if fi, err := os.Stat(spec.Cwd); spec.Cwd != "" && (err != nil || !fi.IsDir()) {
		return nil, &core.Error{Kind: core.KindInvalid, Msg: fmt.Sprintf("example-bash transport: cwd %s is not an existing directory", core.Quote(spec.Cwd)), Err: err}
	}
	k := &kernel{bash: t.bash, cwd: spec.Cwd, msgs: make(chan core.Message, 64), closing: make(chan struct{})}
	if err := k.spawn(); err != nil {
		return nil, err
	}
	return k, nil
}

// kernel is one bash session. mu guards the process and the request state;
// emit holds it so that a restart can cut off the old process's output.
type kernel struct {
	bash string
	cwd  string

	msgs      chan core.Message
	closing   chan struct{} // closed by Shutdown: emits stop blocking
	closeOnce sync.Once
	readers   sync.WaitGroup // readers of the current and older processes

	mu    sync.Mutex
	proc  *process
	count int    // execution counter
	cur   string // msg_id of the running request, "" when idle
}

// process is one bash process and its per-request reader state.
type process struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	dead  bool
	// end markers seen for the current request, and its exit status
	outDone, errDone bool
	status           int
}

func (k *kernel) spawn() error {
	cmd := exec.Command(k.bash, "--noprofile", "--norc")
	cmd.Dir = k.cwd
	cmd.Env = os.Environ()
	// Own process group, so Interrupt and kill reach everything the code
	// started; Pdeathsig, so bash dies with the plugin even on SIGKILL.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("example-bash transport: start bash: %w", err)
	}
	p := &process{cmd: cmd, stdin: stdin}
	// Requests run inside __kh_run so that the SIGINT handler can end the
	// whole request (a loop too) with `return`; outside a request the return
	// fails quietly. A handler, not "ignore", which children would inherit,
	// also keeps the non-interactive bash itself alive.
	if _, err := io.WriteString(stdin, "__kh_run() { eval \"$1\"; }\ntrap 'return 130 2>/dev/null' INT\n"); err != nil {
		return err
	}
	k.mu.Lock()
	k.proc = p
	k.mu.Unlock()
	k.readers.Add(2)
	go k.read(p, stdout, "stdout")
	go k.read(p, stderr, "stderr")
	return nil
}

const markerPrefix = "\x1e__kernelhost_end__"

// Execute writes the request to bash. It returns once bash has it.
func (k *kernel) Execute(ctx context.Context, req core.ExecuteRequest) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	p := k.proc
	if p == nil || p.dead {
		return errors.New("example-bash transport: kernel is dead; restart it")
	}
	if k.cur != "" {
		return fmt.Errorf("example-bash transport: request %s is still running", k.cur)
	}
	k.cur = req.MsgID
	p.outDone, p.errDone, p.status = false, false, 0
	if !req.Silent {
		k.count++
	}
	k.emitLocked(core.Message{ParentID: req.MsgID, Type: core.MsgStatus, State: core.StateBusy})
	if !req.Silent {
		k.emitLocked(core.Message{ParentID: req.MsgID, Type: core.MsgExecuteInput, ExecutionCount: k.count})
	}
	delim := "__kernelhost_code_" + randomHex()
	// The here-document is read by the read builtin, not cat: a request may
	// set PATH to anything.
	script := fmt.Sprintf("IFS= read -r -d '' __kh_code <<'%s'\n%s\n%s\n__kh_run \"$__kh_code\"\n__kh=$?; printf '\\n%s %%d\\n' \"$__kh\"; printf '\\n%s %%d\\n' \"$__kh\" >&2\n",
		delim, req.Code, delim, markerPrefix, markerPrefix)
	if _, err := io.WriteString(p.stdin, script); err != nil {
		k.cur = ""
		return fmt.Errorf("example-bash transport: send code to bash: %w", err)
	}
	return nil
}

// read turns one of bash's output pipes into stream messages and notices the
// end markers. The marker is printed after a newline so it always starts a
// line; the newline that ends each line is held back until the next line
// shows whether it was that added newline (dropped) or the code's own output.
func (k *kernel) read(p *process, r io.Reader, name string) {
	defer k.readers.Done()
	br := bufio.NewReaderSize(r, 64<<10)
	pendingNL := false
	for {
		line, err := br.ReadSlice('\n')
		if rest, ok := bytes.CutPrefix(line, []byte(markerPrefix+" ")); ok && pendingNL && err == nil {
			pendingNL = false
			st, _ := strconv.Atoi(string(bytes.TrimSpace(rest)))
			k.markerSeen(p, name, st)
		} else if len(line) > 0 {
			var text []byte
			if pendingNL {
				text = append(text, '\n')
			}
			pendingNL = err == nil // a complete line: hold its newline back
			if pendingNL {
				line = line[:len(line)-1]
			}
			text = append(text, line...)
			if len(text) > 0 {
				k.emitIfCurrent(p, core.Message{Type: core.MsgStream, Name: name, Text: string(text)})
			}
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if err != nil {
			k.processEnded(p)
			return
		}
	}
}

// markerSeen records one end marker; with both in, the request is done.
func (k *kernel) markerSeen(p *process, name string, status int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.proc != p || k.cur == "" {
		return
	}
	if name == "stdout" {
		p.outDone, p.status = true, status
	} else {
		p.errDone = true
	}
	if !p.outDone || !p.errDone {
		return
	}
	id := k.cur
	k.cur = ""
	if p.status != 0 {
		ev := fmt.Sprintf("exit status %d", p.status)
		k.emitLocked(core.Message{ParentID: id, Type: core.MsgError, EName: "ExitStatus", EValue: ev, Traceback: []string{ev}})
		k.emitLocked(core.Message{ParentID: id, Type: core.MsgExecuteReply, Status: core.ReplyError, ExecutionCount: k.count,
			EName: "ExitStatus", EValue: ev, Traceback: []string{ev}})
	} else {
		k.emitLocked(core.Message{ParentID: id, Type: core.MsgExecuteReply, Status: core.ReplyOK, ExecutionCount: k.count})
	}
	k.emitLocked(core.Message{ParentID: id, Type: core.MsgStatus, State: core.StateIdle})
}

// processEnded runs when a pipe of p closes. If p is still the kernel's
// process (not replaced by Restart, not shut down), bash died: the kernel
// says so with a kernel-wide dead status; Restart brings it back.
func (k *kernel) processEnded(p *process) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.proc != p || p.dead {
		return
	}
	p.dead = true
	k.cur = ""
	_ = p.cmd.Process.Kill()
	k.emitLocked(core.Message{Type: core.MsgStatus, State: core.StateDead})
}

func (k *kernel) emitIfCurrent(p *process, m core.Message) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.proc != p || k.cur == "" {
		return
	}
	m.ParentID = k.cur
	k.emitLocked(m)
}

// emitLocked sends m (k.mu held, which keeps messages in order). It gives up
// once Shutdown started, so a reader never blocks forever.
func (k *kernel) emitLocked(m core.Message) {
	if m.Timestamp == "" {
		m.Timestamp = time.Now().UTC().Format(time.RFC3339Nano)
	}
	select {
	case k.msgs <- m:
	case <-k.closing:
	}
}

// Messages delivers everything the kernel emits, in order.
func (k *kernel) Messages() <-chan core.Message { return k.msgs }

// Interrupt sends SIGINT to the running command's process group.
func (k *kernel) Interrupt(ctx context.Context) error {
	k.mu.Lock()
	p, id := k.proc, k.cur
	k.mu.Unlock()
	if p == nil || p.dead {
		return errors.New("example-bash transport: kernel is dead")
	}
	// bash runs commands in its own group (Setpgid), so -pid reaches them;
	// bash itself survives thanks to its INT trap.
	if err := syscall.Kill(-p.cmd.Process.Pid, syscall.SIGINT); err != nil {
		return err
	}
	k.resendInterrupt(p, id, interruptResends)
	return nil
}

// interruptResends are the delays after an interrupt at which bash gets
// SIGINT again while the same request still runs: a SIGINT that lands while
// bash forks a command (`for i in $(seq 600)`) can be taken by the child
// alone, and bash runs on. The subprocess transport does the same.
var interruptResends = []time.Duration{100 * time.Millisecond, 400 * time.Millisecond, time.Second}

// resendInterrupt sends SIGINT to p again after each of delays while request
// id is still the one running on it.
func (k *kernel) resendInterrupt(p *process, id string, delays []time.Duration) {
	if id == "" || len(delays) == 0 {
		return
	}
	time.AfterFunc(delays[0], func() {
		k.mu.Lock()
		still := k.proc == p && !p.dead && k.cur == id
		k.mu.Unlock()
		if still {
			_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGINT)
			k.resendInterrupt(p, id, delays[1:])
		}
	})
}

// Restart kills bash and starts a fresh one. The restarting status is
// emitted after the old process is cut off, so none of its output follows.
func (k *kernel) Restart(ctx context.Context) error {
	k.mu.Lock()
	old := k.proc
	k.proc = nil
	k.cur = ""
	k.emitLocked(core.Message{Type: core.MsgStatus, State: core.StateRestarting})
	k.mu.Unlock()
	if old != nil {
		old.kill()
	}
	return k.spawn()
}

// Shutdown kills bash, waits for its readers and closes Messages.
func (k *kernel) Shutdown(ctx context.Context) error {
	k.closeOnce.Do(func() {
		close(k.closing)
		k.mu.Lock()
		p := k.proc
		k.proc = nil
		k.mu.Unlock()
		if p != nil {
			p.kill()
		}
		k.readers.Wait()
		close(k.msgs)
	})
	return nil
}

func (p *process) kill() {
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	_ = p.cmd.Wait()
}

func randomHex() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
