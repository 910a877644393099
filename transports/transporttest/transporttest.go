// Package transporttest is the conformance suite that every core.Transport
// runs: the subprocess and Jupyter transports, in-process and through the
// plugin boundary, and the example plugin. A transport is done when it passes.
//
// Use it from a transport's tests:
//
//	func TestConformance(t *testing.T) {
//		transporttest.Run(t, func(t *testing.T) core.Transport { return mytransport.New(...) }, transporttest.Python())
//	}
//
// The suite works at the Kernel level: it starts kernels, sends requests and
// reads Messages in the test goroutine (it starts no goroutines of its own).
// Its checks are the table Cases returns; each is one parallel subtest, skipped
// when the language's LanguageSnippets lacks the code it needs. Add a check to
// kernelCases (cases.go) or engineCases (engine_cases.go); run the cases
// another way by calling a Case's Run with a Suite of your own.
package transporttest

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kernelhost/kernelhost/core"
)

// Timeouts of the suite. They are generous because CI machines are small and
// busy; a passing transport is far quicker.
const (
	StartTimeout = 60 * time.Second // StartKernel and Restart
	ExecTimeout  = 30 * time.Second // one execution, request to reply and idle
	// InterruptTimeout bounds the end of an interrupted request.
	InterruptTimeout = 10 * time.Second
	// SleepRunsFor is how long each language's Sleep snippet runs.
	SleepRunsFor = 60 * time.Second
)

// Suite is what a Case runs against.
type Suite struct {
	NewTransport func(t *testing.T) core.Transport
	Lang         LanguageSnippets

	// kernel, when set, is what StartKernel returns: the kernel that the
	// cases of SharingKernel's group run on.
	kernel core.Kernel
}

// Case is one named conformance check.
type Case struct {
	Name string
	Run  func(t *testing.T, s *Suite)
	// Shares says that the case may run on a kernel that cases before it
	// used (SharingKernel): it starts one kernel with Suite.StartKernel and
	// neither restarts, interrupts, kills nor shuts it down, its checks hold
	// on a kernel that ran other code (execution counts relative to the
	// first it sees), and it reads no state that another sharing case sets
	// (of StatePersists and SilentNotCounted, which both set SetState's
	// variable, only StatePersists shares: a value left by the other would
	// hide a SetState that did nothing).
	Shares bool
}

// Run runs every case of Cases as a parallel subtest (go test's -parallel
// bounds how many run at once). newTransport is called once per case, from
// the case's goroutine, so cases may run concurrently; the transport it
// returns must start kernels for lang.Language.
func Run(t *testing.T, newTransport func(t *testing.T) core.Transport, lang LanguageSnippets) {
	t.Helper()
	RunCases(t, &Suite{NewTransport: newTransport, Lang: lang}, Cases())
}

// RunSharing runs Cases as Run does, but the cases that need no kernel of
// their own share one (SharingKernel): for a transport whose kernels cost
// much to start.
func RunSharing(t *testing.T, newTransport func(t *testing.T) core.Transport, lang LanguageSnippets) {
	t.Helper()
	RunCases(t, &Suite{NewTransport: newTransport, Lang: lang}, SharingKernel(Cases()))
}

// RunCases runs cases on s as Run runs Cases: each a parallel subtest.
func RunCases(t *testing.T, s *Suite, cases []Case) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			// Each case starts kernels of its own and spends most of its
			// time waiting on them: side by side, the waits overlap.
			t.Parallel()
			c.Run(t, s)
		})
	}
}

// SharedKernelCase is the name of the case that SharingKernel puts in place
// of the cases that share a kernel.
const SharedKernelCase = "SharedKernel"

// SharingKernel returns cases with those that Share replaced by one case,
// SharedKernelCase, where the first of them stood: it starts one kernel and
// runs them on it one after the other, in their order, each as a subtest of
// its own name. A case that fails leaves its kernel to no other: the next
// starts a kernel of its own. Run gives every case a kernel of its own; this
// is for a transport whose kernel starts are most of its suite's cost (the
// Jupyter transport's: an ipykernel start is about a CPU-second).
func SharingKernel(cases []Case) []Case {
	var out, sharing []Case
	at := -1
	for _, c := range cases {
		if !c.Shares {
			out = append(out, c)
			continue
		}
		if at < 0 {
			at = len(out)
			out = append(out, Case{})
		}
		sharing = append(sharing, c)
	}
	if at < 0 {
		return out
	}
	out[at] = Case{Name: SharedKernelCase, Run: func(t *testing.T, s *Suite) {
		var on *Suite
		for _, c := range sharing {
			if on == nil {
				// Started (and shut down at the end) by the group.
				ss := *s
				ss.kernel = s.StartKernel(t)
				on = &ss
			}
			if !t.Run(c.Name, func(t *testing.T) { c.Run(t, on) }) {
				on = nil
			}
		}
	}}
	return out
}

// Received is one kernel message and when the suite read it.
type Received struct {
	core.Message
	At time.Time
}

// Execution is everything one request produced, in arrival order.
type Execution struct {
	MsgID string
	Sent  time.Time
	Msgs  []Received
}

// Stream concatenates the text of the execution's stream messages named name.
func (e *Execution) Stream(name string) string {
	var b strings.Builder
	for _, m := range e.Msgs {
		if m.Type == core.MsgStream && m.Name == name {
			b.WriteString(m.Text)
		}
	}
	return b.String()
}

// OfType returns the execution's messages of type typ.
func (e *Execution) OfType(typ core.MessageType) []Received {
	var out []Received
	for _, m := range e.Msgs {
		if m.Type == typ {
			out = append(out, m)
		}
	}
	return out
}

// Reply returns the execute_reply (the suite only returns executions that have one).
func (e *Execution) Reply() core.Message {
	for _, m := range e.Msgs {
		if m.Type == core.MsgExecuteReply {
			return m.Message
		}
	}
	return core.Message{}
}

// Result returns the text/plain of the main result and whether there is one.
func (e *Execution) Result() (string, bool) {
	for _, m := range e.Msgs {
		if m.Type == core.MsgExecuteResult {
			return TextPlain(m.Message), true
		}
	}
	return "", false
}

// ExecutionCount returns the count of the execute_input, 0 without one.
func (e *Execution) ExecutionCount() int {
	for _, m := range e.Msgs {
		if m.Type == core.MsgExecuteInput {
			return m.ExecutionCount
		}
	}
	return 0
}

// TextPlain decodes the text/plain of a message's MIME bundle.
func TextPlain(m core.Message) string {
	raw, ok := m.Data["text/plain"]
	if !ok {
		return ""
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return string(raw)
	}
	return s
}

func (e *Execution) String() string {
	var b strings.Builder
	for _, m := range e.Msgs {
		j, _ := json.Marshal(m.Message)
		fmt.Fprintf(&b, "\n  +%v %s", m.At.Sub(e.Sent).Round(time.Millisecond), j)
	}
	return b.String()
}

// StartKernel starts a kernel for the suite's language in a fresh temporary
// cwd; cleanup shuts it down and checks that Messages closes.
func (s *Suite) StartKernel(t *testing.T) core.Kernel {
	t.Helper()
	if s.kernel != nil {
		return s.kernel
	}
	tr := s.NewTransport(t)
	ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
	defer cancel()
	k, err := tr.StartKernel(ctx, core.KernelSpec{Language: s.Lang.Language, Cwd: t.TempDir()})
	if err != nil {
		t.Fatalf("StartKernel(%s): %v", s.Lang.Language, err)
	}
	t.Cleanup(func() { ShutdownAndDrain(t, k) })
	return k
}

// ShutdownAndDrain shuts k down and fails t unless Messages closes in time.
func ShutdownAndDrain(t *testing.T, k core.Kernel) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
	defer cancel()
	if err := k.Shutdown(ctx); err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	timeout := time.After(StartTimeout)
	for {
		select {
		case _, ok := <-k.Messages():
			if !ok {
				return
			}
		case <-timeout:
			t.Errorf("Messages still open %v after Shutdown", StartTimeout)
			return
		}
	}
}

var msgSeq atomic.Int64

// NewMsgID returns a fresh request id.
func NewMsgID() string {
	return fmt.Sprintf("kh-test-%d-%d", time.Now().UnixNano(), msgSeq.Add(1))
}

// Exec runs code and returns what it produced once both its execute_reply
// and its status idle arrived. It checks on the way that every message
// carries the request's ParentID (kernel-wide status messages aside) and
// that the order is: busy, execute_input (unless silent), outputs, with no
// output after idle.
func Exec(t *testing.T, k core.Kernel, code string, silent bool) *Execution {
	t.Helper()
	e := Send(t, k, code, silent)
	Collect(t, k, e, ExecTimeout, nil)
	CheckOrder(t, e, silent)
	return e
}

// Send sends code without waiting for anything.
func Send(t *testing.T, k core.Kernel, code string, silent bool) *Execution {
	t.Helper()
	e := &Execution{MsgID: NewMsgID(), Sent: time.Now()}
	ctx, cancel := context.WithTimeout(context.Background(), ExecTimeout)
	defer cancel()
	if err := k.Execute(ctx, core.ExecuteRequest{MsgID: e.MsgID, Code: code, Silent: silent}); err != nil {
		t.Fatalf("Execute(%q): %v", code, err)
	}
	return e
}

// Collect reads Messages into e until its reply and idle arrived, or until
// stop (when not nil) returns true for a message. A message of another
// request fails the test; a kernel-wide message (ParentID "") must be a status
// and is returned in kernelWide. It fails the test on timeout or when
// Messages closes.
func Collect(t *testing.T, k core.Kernel, e *Execution, timeout time.Duration, stop func(Received) bool) (kernelWide []Received) {
	t.Helper()
	deadline := time.After(timeout)
	for !done(e) {
		select {
		case m, ok := <-k.Messages():
			if !ok {
				t.Fatalf("Messages closed while waiting for request %s; got:%s", e.MsgID, e)
			}
			r := Received{Message: m, At: time.Now()}
			if m.ParentID == "" {
				if m.Type != core.MsgStatus {
					t.Errorf("kernel-wide message is not a status: %+v", m)
				}
				kernelWide = append(kernelWide, r)
			} else if m.ParentID != e.MsgID {
				t.Errorf("message of another request (parent %q, want %q): %+v", m.ParentID, e.MsgID, m)
				continue
			} else {
				e.Msgs = append(e.Msgs, r)
			}
			if stop != nil && stop(r) {
				return kernelWide
			}
		case <-deadline:
			t.Fatalf("request %s not finished after %v; got:%s", e.MsgID, timeout, e)
		}
	}
	return kernelWide
}

func done(e *Execution) bool {
	var reply, idle bool
	for _, m := range e.Msgs {
		reply = reply || m.Type == core.MsgExecuteReply
		idle = idle || (m.Type == core.MsgStatus && m.State == core.StateIdle)
	}
	return reply && idle
}

// CheckOrder checks the message order of a finished execution.
func CheckOrder(t *testing.T, e *Execution, silent bool) {
	t.Helper()
	if len(e.Msgs) == 0 || e.Msgs[0].Type != core.MsgStatus || e.Msgs[0].State != core.StateBusy {
		t.Errorf("first message is not status busy:%s", e)
		return
	}
	inputs := e.OfType(core.MsgExecuteInput)
	switch {
	case silent && len(inputs) != 0:
		t.Errorf("silent request has an execute_input:%s", e)
	case !silent && len(inputs) != 1:
		t.Errorf("want exactly one execute_input:%s", e)
	case !silent:
		for _, m := range e.Msgs {
			if m.Type == core.MsgExecuteInput {
				break
			}
			if isOutput(m.Type) {
				t.Errorf("%s before execute_input:%s", m.Type, e)
				break
			}
		}
	}
	if n := len(e.OfType(core.MsgExecuteReply)); n != 1 {
		t.Errorf("want one execute_reply, got %d:%s", n, e)
	}
	idle := false
	for _, m := range e.Msgs {
		if m.Type == core.MsgStatus && m.State == core.StateIdle {
			idle = true
			continue
		}
		if idle && m.Type != core.MsgExecuteReply {
			t.Errorf("%s after status idle:%s", m.Type, e)
		}
	}
}

func isOutput(t core.MessageType) bool {
	switch t {
	case core.MsgStream, core.MsgExecuteResult, core.MsgDisplayData, core.MsgUpdateDisplayData, core.MsgError:
		return true
	}
	return false
}

// WaitStatus reads Messages until a kernel-wide status with state arrives.
// Messages of request parent (may be "") are allowed before it; any other
// request's message fails the test.
func WaitStatus(t *testing.T, k core.Kernel, state string, parent string, timeout time.Duration) {
	t.Helper()
	deadline := time.After(timeout)
	var seen []core.Message
	for {
		select {
		case m, ok := <-k.Messages():
			if !ok {
				t.Fatalf("Messages closed while waiting for status %s; got %+v", state, seen)
			}
			if m.ParentID == "" && m.Type == core.MsgStatus && m.State == state {
				return
			}
			if m.ParentID != "" && m.ParentID != parent {
				t.Errorf("message of another request (parent %q) while waiting for status %s: %+v", m.ParentID, state, m)
			}
			seen = append(seen, m)
		case <-deadline:
			t.Fatalf("no status %s after %v; got %+v", state, timeout, seen)
		}
	}
}
