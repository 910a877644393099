package subprocess

import (
	"context"
	"strings"
	"testing"

	"github.com/kernelhost/kernelhost/core"
	"github.com/kernelhost/kernelhost/core/engine"
	"github.com/kernelhost/kernelhost/internal/testkit"
	tt "github.com/kernelhost/kernelhost/transports/transporttest"
)

// TestJavaEngine, on one Java context under the engine: a request's env var
// is both a system property and in System.getenv, exactly, and both are gone afterwards; an inherited one it
// shadowed (HOME) comes back; a String value is the result as itself;
// errors name the exception; a busy loop is interrupted and the session
// keeps its state.
func TestJavaEngine(t *testing.T) {
	t.Parallel()
	testkit.NeedCommand(t, "java", "default-jdk-headless")
	e := tt.NewEngine(t, engine.Config{Transport: New(Options{})})
	ctx := context.Background()
	run := func(code string, env map[string]string) []engine.Output {
		return tt.EngineRun(t, e, ctx, engine.ExecRequest{Language: "java", Code: code, EnvVars: env})
	}
	result := func(outs []engine.Output) string {
		for _, o := range outs {
			if o.Type == engine.OutResult {
				return tt.TextPlain(core.Message{Data: o.Bundle})
			}
		}
		return "<none>"
	}
	errorLine := func(outs []engine.Output) engine.Output {
		for _, o := range outs {
			if o.Type == engine.OutError {
				return o
			}
		}
		return engine.Output{}
	}
	const show = `System.out.print(System.getProperty("FOO") + "|" + System.getenv("FOO") + "|" + System.getenv("HOME"));`
	home := "/kh-home 'ü'"
	v := "bar \"q\" ü😀\nline"
	if got := tt.EngineStdout(t, run(show, map[string]string{"FOO": v, "HOME": home})); got != v+"|"+v+"|"+home {
		t.Errorf("during the request: %q", got)
	}
	if got := result(run(`System.getProperty("FOO")`, map[string]string{"FOO": "bar"})); got != "bar" {
		t.Errorf(`System.getProperty("FOO") result = %q, want bar`, got)
	}
	if got := tt.EngineStdout(t, run(show, nil)); !strings.HasPrefix(got, "null|null|") || strings.Contains(got, home) {
		t.Errorf("after the requests: %q", got)
	}

	run("int kept = 7;", nil)
	outs := run("String s = \"x\";\nthrow new IllegalArgumentException(\"bad \" + s);", nil)
	if o := errorLine(outs); o.Type != engine.OutError || o.ErrName != "java.lang.IllegalArgumentException" || o.ErrValue != "bad x" {
		t.Errorf("error line = %+v", o)
	}
	if got := result(run(`"a\"b" + kept`, nil)); got != `a"b7` {
		t.Errorf("String result = %q", got)
	}
}

// TestJavaInterruptLoop: an interrupt stops a loop that never sleeps. Not
// parallel: see TestBashInterruptIsSentAgain.
func TestJavaInterruptLoop(t *testing.T) {
	testkit.NeedCommand(t, "java", "default-jdk-headless")
	interruptLoop(t, "java", "int kept = 7;", "System.out.println(\"start\");\nlong i = 0; while (true) { i++; }", "7")
}

// The JVM runs a SIGINT handler late under load, after the cell the signal
// was sent for; it must not stop the next cell (see awaitSignals in
// Driver.java). Here each cell sends itself the signal at its very end,
// where an interrupt's signal lands when the cell ends on its own, and
// the test writes the record the host writes after each SIGINT it sends.
// (Without the record a third of the next cells were stopped.)
func TestJavaSigintDoesNotReachTheNextCell(t *testing.T) {
	t.Parallel()
	testkit.NeedCommand(t, "java", "default-jdk-headless")
	k := startKernel(t, "java", t.TempDir())
	for range 20 {
		e := tt.Exec(t, k, `new ProcessBuilder("kill", "-INT", "" + ProcessHandle.current().pid()).start().waitFor();`, false)
		writeSigintRecord(k, e.MsgID)
		if next := tt.Exec(t, k, "Thread.sleep(30); 1", false); next.Reply().Status != core.ReplyOK {
			t.Fatalf("the cell after a SIGINT was stopped by it:%s%s", e, next)
		}
	}
}

// A record of a signal the handler never runs for (the kernel merged it
// with another) holds the next cell back for a second at most.
func TestJavaSigintRecordWithoutSignal(t *testing.T) {
	t.Parallel()
	testkit.NeedCommand(t, "java", "default-jdk-headless")
	k := startKernel(t, "java", t.TempDir())
	e := tt.Exec(t, k, "int kept = 7;", false)
	writeSigintRecord(k, e.MsgID)
	if got, _ := tt.Exec(t, k, "kept", false).Result(); got != "7" {
		t.Fatalf("kept = %q after a record without a signal, want 7", got)
	}
}

// An interrupt stops the cell's thread and no other: a pool whose worker
// the cell started (idle in its queue's take when the interrupt comes)
// keeps that worker. jshell's local engine stops every thread of the
// cell's thread group, and a worker stopped inside LinkedBlockingQueue.take
// throws IllegalMonitorStateException and dies (CI saw the exception from
// such a worker, and the next cell never ended).
func TestJavaInterruptSparesOtherThreads(t *testing.T) {
	t.Parallel()
	testkit.NeedCommand(t, "java", "default-jdk-headless")
	k := startKernel(t, "java", t.TempDir())
	// made counts the pool's threads: a worker that dies is replaced.
	tt.Exec(t, k, "var made = new java.util.concurrent.atomic.AtomicInteger();\n"+
		"var pool = java.util.concurrent.Executors.newFixedThreadPool(1, r -> { made.incrementAndGet(); return new Thread(r); });", false)
	e := tt.Send(t, k, "pool.submit(() -> 1).get();\nSystem.out.println(\"start\");\nlong i = 0; while (true) { i++; }", false)
	tt.Collect(t, k, e, tt.ExecTimeout, func(tt.Received) bool { return e.Stream("stdout") != "" })
	if err := k.Interrupt(context.Background()); err != nil {
		t.Fatal(err)
	}
	tt.Collect(t, k, e, tt.InterruptTimeout, nil)
	if r := e.Reply(); r.Status != core.ReplyError || r.EName != "KeyboardInterrupt" {
		t.Errorf("reply %+v, want a KeyboardInterrupt error", r)
	}
	next := tt.Exec(t, k, `pool.submit(() -> 2).get(20, java.util.concurrent.TimeUnit.SECONDS) + " threads made: " + made.get()`, false)
	if got, _ := next.Result(); got != "2 threads made: 1" || next.Stream("stderr") != "" {
		t.Errorf("the pool after the interrupt: %q, want its one thread alive:%s", got, next)
	}
}
