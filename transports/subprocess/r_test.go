package subprocess

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/kernelhost/kernelhost/core"
	"github.com/kernelhost/kernelhost/core/engine"
	"github.com/kernelhost/kernelhost/internal/testkit"
	tt "github.com/kernelhost/kernelhost/transports/transporttest"
)

// dataString decodes the MIME type mime of m's bundle ("" when absent).
func dataString(t *testing.T, m core.Message, mime string) string {
	t.Helper()
	raw, ok := m.Data[mime]
	if !ok {
		return ""
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		t.Fatalf("%s is not a string: %s", mime, raw)
	}
	return s
}

// TestRValues: what R shows of a cell, on one kernel: the last visible value
// as the main result in R's printed form, earlier visible values as
// displays, invisible values not at all, data.frames with HTML, plots as
// PNG, warnings on stderr, errors with R's message and the user's calls.
func TestRValues(t *testing.T) {
	t.Parallel()
	testkit.NeedCommand(t, "Rscript", "r-base-core")
	k := startKernel(t, "r", t.TempDir())

	e := tt.Exec(t, k, `Sys.setenv(FOO = "bar"); Sys.getenv("FOO")`, false)
	if got, _ := e.Result(); got != `[1] "bar"` {
		t.Errorf(`Sys.getenv("FOO") result = %q, want [1] "bar":%s`, got, e)
	}

	e = tt.Exec(t, k, "x <- 1\nx\ninvisible(3)\n\"zwei ü\"", false)
	if got, _ := e.Result(); got != `[1] "zwei ü"` {
		t.Errorf("result = %q:%s", got, e)
	}
	if d := e.OfType(core.MsgDisplayData); len(d) != 1 || tt.TextPlain(d[0].Message) != "[1] 1" {
		t.Errorf("want one display [1] 1 for the earlier visible value:%s", e)
	}
	if e := tt.Exec(t, k, "y <- 2\ninvisible(y)", false); len(e.OfType(core.MsgExecuteResult)) != 0 {
		t.Errorf("an invisible value gave a result:%s", e)
	}

	e = tt.Exec(t, k, `data.frame(n = 1:2, s = c("a", "<b>"))`, false)
	res := e.OfType(core.MsgExecuteResult)
	if len(res) != 1 {
		t.Fatalf("data.frame: want one result:%s", e)
	}
	if got := tt.TextPlain(res[0].Message); got != "  n   s\n1 1   a\n2 2 <b>" {
		t.Errorf("data.frame text = %q", got)
	}
	html := dataString(t, res[0].Message, "text/html")
	if !strings.HasPrefix(html, "<table") || !strings.Contains(html, "<td>&lt;b&gt;</td>") || !strings.Contains(html, "<th>s</th>") {
		t.Errorf("data.frame html = %q", html)
	}

	e = tt.Exec(t, k, "plot(1:10, main = 'one')\nlines(1:10)\nplot(2:3)", false)
	plots := e.OfType(core.MsgDisplayData)
	if len(plots) != 2 || e.Reply().Status != core.ReplyOK {
		t.Fatalf("two plots: want two displays and ok:%s", e)
	}
	for _, p := range plots {
		png, err := base64.StdEncoding.DecodeString(dataString(t, p.Message, "image/png"))
		if err != nil || !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) {
			t.Errorf("image/png is not a base64 PNG (%v)", err)
		}
	}

	e = tt.Exec(t, k, `f <- function() warning("careful"); f(); cat("after\n")`, false)
	if got := e.Stream("stderr"); got != "Warning message:\nIn f() : careful\n" {
		t.Errorf("warning on stderr = %q", got)
	}
	if got := e.Stream("stdout"); got != "after\n" || e.Reply().Status != core.ReplyOK {
		t.Errorf("a warning stopped the cell:%s", e)
	}

	e = tt.Exec(t, k, "g <- function() stop(\"boom ü\")\nh <- function() g()\nh()", false)
	r := e.Reply()
	tb := strings.Join(r.Traceback, "\n")
	if r.EName != "ERROR" || r.EValue != "boom ü" || tb != "Error in g(): boom ü\n1. h()\n2. g()\n3. stop(\"boom ü\")" {
		t.Errorf("error = %s: %s, traceback:\n%s", r.EName, r.EValue, tb)
	}
	if r := tt.Exec(t, k, "1 +", false).Reply(); r.EName != "ERROR" || !strings.Contains(r.EValue, "unexpected end of input") {
		t.Errorf("syntax error = %+v", r)
	}
	if got := tt.Exec(t, k, `cat(x + y, "\n", sep = "")`, false).Stream("stdout"); got != "3\n" {
		t.Errorf("state after the errors = %q", got)
	}
}

// TestRInterruptLoop: an interrupt stops R code that never sleeps, and the
// session and its state survive it. Not parallel: see
// TestBashInterruptIsSentAgain.
func TestRInterruptLoop(t *testing.T) {
	testkit.NeedCommand(t, "Rscript", "r-base-core")
	interruptLoop(t, "r", "kept <- 7", "cat(\"start\\n\"); i <- 0; repeat i <- i + 1", "[1] 7")
}

// interruptLoop starts a lang kernel, runs keep (which sets kept), then
// loop (which prints a line and never sleeps), interrupts it once the line
// arrived, and checks the reply is a KeyboardInterrupt error and that kept
// still reads want.
func interruptLoop(t *testing.T, lang, keep, loop, want string) {
	t.Helper()
	k := startKernel(t, lang, t.TempDir())
	tt.Exec(t, k, keep, false)
	e := tt.Send(t, k, loop, false)
	tt.Collect(t, k, e, tt.ExecTimeout, func(tt.Received) bool { return e.Stream("stdout") != "" })
	if err := k.Interrupt(context.Background()); err != nil {
		t.Fatal(err)
	}
	tt.Collect(t, k, e, tt.InterruptTimeout, nil)
	if r := e.Reply(); r.Status != core.ReplyError || r.EName != "KeyboardInterrupt" {
		t.Errorf("reply %+v, want a KeyboardInterrupt error", r)
	}
	if got, _ := tt.Exec(t, k, "kept", false).Result(); got != want {
		t.Errorf("state after the interrupt = %q, want %q", got, want)
	}
}

// A language whose interpreter is missing is not listed, and starting it is
// a client error that names the Debian package to install.
func TestMissingInterpreterNamesPackage(t *testing.T) {
	t.Parallel()
	tr := New(Options{Interpreters: map[string]string{"rscript": "kh-no-such-Rscript", "node": "kh-no-such-node"}})
	if langs := tr.Info().Languages; slices.Contains(langs, "r") || slices.Contains(langs, "javascript") {
		t.Errorf("languages %v list a missing interpreter", langs)
	}
	for lang, pkg := range map[string]string{"r": "r-base-core", "javascript": "nodejs"} {
		_, err := tr.StartKernel(context.Background(), core.KernelSpec{Language: lang, Cwd: t.TempDir()})
		var ce *core.Error
		if !errors.As(err, &ce) || ce.Kind != core.KindInvalid {
			t.Fatalf("StartKernel(%s) = %v, want a KindInvalid error", lang, err)
		}
		if !strings.Contains(err.Error(), "apt-get install "+pkg) {
			t.Errorf("StartKernel(%s) error %q does not name %s", lang, err, pkg)
		}
	}
}

// The engine's env helpers run apart from user code on R (driver.R's
// helper_env): code that redefined Sys.setenv and Sys.unsetenv in the
// global environment neither keeps a request's var from arriving nor from
// being removed, and the helpers take no execution counts.
func TestREnvHelpersResistRedefinition(t *testing.T) {
	t.Parallel()
	testkit.NeedCommand(t, "Rscript", "r-base-core")
	e := tt.NewEngine(t, engine.Config{Transport: New(Options{})})
	ctx := context.Background()
	run := func(code string, env map[string]string) (stdout string, count int) {
		outs := tt.EngineRun(t, e, ctx, engine.ExecRequest{Language: "r", Code: code, EnvVars: env})
		for _, o := range outs {
			if o.Type == engine.OutNumberOfExecutions {
				count = o.ExecutionCount
			}
		}
		return tt.EngineStdout(t, outs), count
	}
	_, first := run("Sys.setenv <- function(...) invisible(TRUE)\nSys.unsetenv <- function(...) invisible(TRUE)\nSys.getenv <- function(...) \"fake\"", nil)
	const show = `cat(base::Sys.getenv("KH_R", unset = "<unset>"))`
	if got, n := run(show, map[string]string{"KH_R": "set ü"}); got != "set ü" || n != first+1 {
		t.Errorf("during the request KH_R = %q (count %d, want %d)", got, n, first+1)
	}
	if got, n := run(show, nil); got != "<unset>" || n != first+2 {
		t.Errorf("after the request KH_R = %q (count %d, want %d)", got, n, first+2)
	}
}
