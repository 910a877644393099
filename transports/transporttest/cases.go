package transporttest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/kernelhost/kernelhost/core"
)

// Cases returns the conformance table, a fresh copy each call: the kernel-level
// cases, then the engine-level ones (engineCases). Run runs each as a
// parallel subtest.
func Cases() []Case { return append(kernelCases(), engineCases()...) }

// kernelCases are the checks at the Kernel level.
func kernelCases() []Case {
	return []Case{
		{Name: "StartShutdown", Run: testStartShutdown},
		{Name: "UnknownLanguage", Run: testUnknownLanguage},
		{Name: "MainResult", Run: testMainResult, Shares: true},
		{Name: "Stdout", Run: testStdout, Shares: true},
		{Name: "Stderr", Run: testStderr, Shares: true},
		{Name: "StreamsBeforeEnd", Run: testStreamsBeforeEnd, Shares: true},
		{Name: "Error", Run: testError, Shares: true},
		{Name: "StatePersists", Run: testStatePersists, Shares: true},
		{Name: "SilentNotCounted", Run: testSilentNotCounted},
		{Name: "ParentIDs", Run: testParentIDs, Shares: true},
		{Name: "Interrupt", Run: testInterrupt},
		{Name: "InterruptIdle", Run: testInterruptIdle},
		{Name: "Restart", Run: testRestart},
		{Name: "RestartDuringExecution", Run: testRestartDuringExecution},
		{Name: "KernelDeath", Run: testKernelDeath},
	}
}

func need(t *testing.T, snippets ...string) {
	t.Helper()
	for _, s := range snippets {
		if s == "" {
			t.Skip("no snippet for this language")
		}
	}
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// testStartShutdown: a kernel starts, Shutdown closes Messages, a second
// Shutdown is harmless and a shut-down kernel refuses work.
func testStartShutdown(t *testing.T, s *Suite) {
	tr := s.NewTransport(t)
	k, err := tr.StartKernel(ctxT(t, StartTimeout), core.KernelSpec{Language: s.Lang.Language, Cwd: t.TempDir()})
	if err != nil {
		t.Fatalf("StartKernel(%s): %v", s.Lang.Language, err)
	}
	ShutdownAndDrain(t, k)
	if err := k.Shutdown(ctxT(t, StartTimeout)); err != nil {
		t.Errorf("second Shutdown: %v", err)
	}
	if err := k.Execute(ctxT(t, ExecTimeout), core.ExecuteRequest{MsgID: NewMsgID(), Code: s.Lang.StdoutCode}); err == nil {
		t.Errorf("Execute after Shutdown succeeded")
	}
}

func testUnknownLanguage(t *testing.T, s *Suite) {
	tr := s.NewTransport(t)
	const lang = "kh-no-such-language"
	k, err := tr.StartKernel(ctxT(t, StartTimeout), core.KernelSpec{Language: lang, Cwd: t.TempDir()})
	if err == nil {
		ShutdownAndDrain(t, k)
		t.Fatalf("StartKernel(%s) succeeded", lang)
	}
	if !strings.Contains(err.Error(), lang) {
		t.Errorf("error %q does not name the language %q", err, lang)
	}
}

func testMainResult(t *testing.T, s *Suite) {
	need(t, s.Lang.Result)
	k := s.StartKernel(t)
	e := Exec(t, k, s.Lang.Result, false)
	if r := e.Reply(); r.Status != core.ReplyOK {
		t.Fatalf("reply status %q:%s", r.Status, e)
	}
	if n := len(e.OfType(core.MsgExecuteResult)); n != 1 {
		t.Fatalf("want one execute_result, got %d:%s", n, e)
	}
	if got, _ := e.Result(); got != s.Lang.ResultText {
		t.Errorf("result text/plain = %q, want %q", got, s.Lang.ResultText)
	}
	if got := e.OfType(core.MsgExecuteResult)[0].ExecutionCount; got != e.ExecutionCount() {
		t.Errorf("execute_result count %d, execute_input count %d", got, e.ExecutionCount())
	}
}

func testStdout(t *testing.T, s *Suite) {
	need(t, s.Lang.StdoutCode)
	k := s.StartKernel(t)
	e := Exec(t, k, s.Lang.StdoutCode, false)
	if got := e.Stream("stdout"); got != "out\n" {
		t.Errorf("stdout = %q, want %q:%s", got, "out\n", e)
	}
	if got := e.Stream("stderr"); got != "" {
		t.Errorf("stderr = %q, want nothing", got)
	}
	if r := e.Reply(); r.Status != core.ReplyOK {
		t.Errorf("reply status %q", r.Status)
	}
}

func testStderr(t *testing.T, s *Suite) {
	need(t, s.Lang.StderrCode)
	k := s.StartKernel(t)
	e := Exec(t, k, s.Lang.StderrCode, false)
	if got := e.Stream("stderr"); got != "err\n" {
		t.Errorf("stderr = %q, want %q:%s", got, "err\n", e)
	}
	if got := e.Stream("stdout"); got != "" {
		t.Errorf("stdout = %q, want nothing", got)
	}
}

// testStreamsBeforeEnd: output is streamed as it happens, not at the end.
func testStreamsBeforeEnd(t *testing.T, s *Suite) {
	need(t, s.Lang.PrintThenSleep)
	k := s.StartKernel(t)
	e := Exec(t, k, s.Lang.PrintThenSleep, false)
	var printed, idle time.Time
	for _, m := range e.Msgs {
		if m.Type == core.MsgStream && printed.IsZero() {
			printed = m.At
		}
		if m.Type == core.MsgStatus && m.State == core.StateIdle {
			idle = m.At
		}
	}
	if got := e.Stream("stdout"); got != "start\n" {
		t.Fatalf("stdout = %q, want %q:%s", got, "start\n", e)
	}
	// Half the sleep leaves room for a slow start of the sleep itself.
	min := time.Duration(s.Lang.PrintSleepSeconds * float64(time.Second) / 2)
	if gap := idle.Sub(printed); gap < min {
		t.Errorf("output arrived only %v before idle, want at least %v (the sleep is %vs):%s", gap, min, s.Lang.PrintSleepSeconds, e)
	}
}

func testError(t *testing.T, s *Suite) {
	need(t, s.Lang.ErrorCode)
	k := s.StartKernel(t)
	e := Exec(t, k, s.Lang.ErrorCode, false)
	r := e.Reply()
	if r.Status != core.ReplyError {
		t.Fatalf("reply status %q, want error:%s", r.Status, e)
	}
	errs := e.OfType(core.MsgError)
	if len(errs) != 1 {
		t.Fatalf("want one error message, got %d:%s", len(errs), e)
	}
	m := errs[0]
	if m.EName == "" || (s.Lang.ErrorName != "" && m.EName != s.Lang.ErrorName) {
		t.Errorf("error name %q, want %q", m.EName, s.Lang.ErrorName)
	}
	if !strings.Contains(m.EValue, s.Lang.ErrorValue) {
		t.Errorf("error value %q does not contain %q", m.EValue, s.Lang.ErrorValue)
	}
	if len(m.Traceback) == 0 {
		t.Errorf("error has no traceback")
	}
	if r.EName != m.EName {
		t.Errorf("reply ename %q, error message ename %q", r.EName, m.EName)
	}
	// The kernel lives on.
	if s.Lang.StdoutCode != "" {
		if got := Exec(t, k, s.Lang.StdoutCode, false).Stream("stdout"); got != "out\n" {
			t.Errorf("after the error stdout = %q", got)
		}
	}
}

// stateText is what GetState showed: the main result or stdout.
func stateText(e *Execution) string {
	if r, ok := e.Result(); ok {
		return r
	}
	return strings.TrimSuffix(e.Stream("stdout"), "\n")
}

func testStatePersists(t *testing.T, s *Suite) {
	need(t, s.Lang.SetState, s.Lang.GetState)
	k := s.StartKernel(t)
	if r := Exec(t, k, s.Lang.SetState, false).Reply(); r.Status != core.ReplyOK {
		t.Fatalf("SetState failed: %+v", r)
	}
	if e := Exec(t, k, s.Lang.GetState, false); stateText(e) != "42" {
		t.Errorf("GetState = %q, want 42:%s", stateText(e), e)
	}
}

// testSilentNotCounted: silent requests run but neither count nor announce
// themselves with execute_input.
func testSilentNotCounted(t *testing.T, s *Suite) {
	need(t, s.Lang.StdoutCode)
	k := s.StartKernel(t)
	first := Exec(t, k, s.Lang.StdoutCode, false).ExecutionCount()
	if first < 1 {
		t.Fatalf("execution count %d, want >= 1", first)
	}
	Exec(t, k, s.Lang.StdoutCode, true) // CheckOrder: no execute_input
	if s.Lang.SetState != "" && s.Lang.GetState != "" {
		Exec(t, k, s.Lang.SetState, true)
		if e := Exec(t, k, s.Lang.GetState, false); stateText(e) != "42" {
			t.Errorf("a silent request's effect is lost: GetState = %q", stateText(e))
		} else if got := e.ExecutionCount(); got != first+1 {
			t.Errorf("execution count after silent requests = %d, want %d", got, first+1)
		}
		return
	}
	if got := Exec(t, k, s.Lang.StdoutCode, false).ExecutionCount(); got != first+1 {
		t.Errorf("execution count after a silent request = %d, want %d", got, first+1)
	}
}

// testParentIDs: a mix of requests; Exec fails on any message whose parent
// is another request.
func testParentIDs(t *testing.T, s *Suite) {
	need(t, s.Lang.StdoutCode)
	k := s.StartKernel(t)
	for _, code := range []string{s.Lang.StdoutCode, s.Lang.ErrorCode, s.Lang.StderrCode, s.Lang.Result, s.Lang.StdoutCode} {
		if code == "" {
			continue
		}
		e := Exec(t, k, code, false)
		for _, m := range e.Msgs {
			if m.ParentID != e.MsgID {
				t.Errorf("message with parent %q in request %s", m.ParentID, e.MsgID)
			}
		}
	}
}

// sentStart reports whether the execution printed "start".
func sentStart(e *Execution) func(Received) bool {
	return func(Received) bool { return strings.Contains(e.Stream("stdout"), "start") }
}

func testInterrupt(t *testing.T, s *Suite) {
	need(t, s.Lang.Sleep)
	k := s.StartKernel(t)
	e := Send(t, k, s.Lang.Sleep, false)
	Collect(t, k, e, ExecTimeout, sentStart(e))
	interrupted := time.Now()
	if err := k.Interrupt(ctxT(t, ExecTimeout)); err != nil {
		t.Fatalf("Interrupt: %v", err)
	}
	Collect(t, k, e, InterruptTimeout, nil)
	CheckOrder(t, e, false)
	t.Logf("interrupted request ended %v after Interrupt", time.Since(interrupted).Round(time.Millisecond))
	if r := e.Reply(); r.Status != core.ReplyError {
		t.Errorf("interrupted request's reply status %q, want error:%s", r.Status, e)
	}
	if s.Lang.StdoutCode != "" {
		if got := Exec(t, k, s.Lang.StdoutCode, false).Stream("stdout"); got != "out\n" {
			t.Errorf("after the interrupt stdout = %q", got)
		}
	}
}

// testInterruptIdle: an interrupt with nothing running harms nothing.
func testInterruptIdle(t *testing.T, s *Suite) {
	need(t, s.Lang.StdoutCode)
	k := s.StartKernel(t)
	Exec(t, k, s.Lang.StdoutCode, false)
	if err := k.Interrupt(ctxT(t, ExecTimeout)); err != nil {
		t.Fatalf("Interrupt: %v", err)
	}
	for i := 0; i < 3; i++ {
		if got := Exec(t, k, s.Lang.StdoutCode, false).Stream("stdout"); got != "out\n" {
			t.Errorf("after an idle interrupt stdout = %q", got)
		}
	}
}

func testRestart(t *testing.T, s *Suite) {
	need(t, s.Lang.SetState, s.Lang.GetState)
	k := s.StartKernel(t)
	Exec(t, k, s.Lang.SetState, false)
	if err := k.Restart(ctxT(t, StartTimeout)); err != nil {
		t.Fatalf("Restart: %v", err)
	}
	WaitStatus(t, k, core.StateRestarting, "", StartTimeout)
	if e := Exec(t, k, s.Lang.GetState, false); stateText(e) == "42" {
		t.Errorf("state survived the restart:%s", e)
	}
	Exec(t, k, s.Lang.SetState, false)
	if e := Exec(t, k, s.Lang.GetState, false); stateText(e) != "42" {
		t.Errorf("after restart GetState = %q, want 42:%s", stateText(e), e)
	}
}

// testRestartDuringExecution: Restart while a request runs; nothing of that
// request follows the restarting status.
func testRestartDuringExecution(t *testing.T, s *Suite) {
	need(t, s.Lang.Sleep, s.Lang.StdoutCode)
	k := s.StartKernel(t)
	e := Send(t, k, s.Lang.Sleep, false)
	Collect(t, k, e, ExecTimeout, sentStart(e))
	if err := k.Restart(ctxT(t, StartTimeout)); err != nil {
		t.Fatalf("Restart: %v", err)
	}
	WaitStatus(t, k, core.StateRestarting, e.MsgID, StartTimeout)
	// Exec fails on any message of e's request that still comes.
	if got := Exec(t, k, s.Lang.StdoutCode, false).Stream("stdout"); got != "out\n" {
		t.Errorf("after restart stdout = %q", got)
	}
}

func testKernelDeath(t *testing.T, s *Suite) {
	need(t, s.Lang.Exit, s.Lang.StdoutCode)
	k := s.StartKernel(t)
	e := Send(t, k, s.Lang.Exit, false)
	WaitStatus(t, k, core.StateDead, e.MsgID, ExecTimeout)
	if err := k.Restart(ctxT(t, StartTimeout)); err != nil {
		t.Fatalf("Restart after death: %v", err)
	}
	WaitStatus(t, k, core.StateRestarting, "", StartTimeout)
	if got := Exec(t, k, s.Lang.StdoutCode, false).Stream("stdout"); got != "out\n" {
		t.Errorf("after death and restart stdout = %q", got)
	}
}
