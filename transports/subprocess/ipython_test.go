package subprocess

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kernelhost/kernelhost/core"
	"github.com/kernelhost/kernelhost/internal/testkit"
	tt "github.com/kernelhost/kernelhost/transports/transporttest"
)

// needIPython returns Debian's python3, skipping the test where it lacks
// IPython or matplotlib, or failing it under CI, where `make test` installed
// them.
func needIPython(t *testing.T) string {
	t.Helper()
	testkit.NeedPythonModules(t, testkit.DebianPython, "IPython", "matplotlib")
	return testkit.DebianPython
}

// pythonWithoutIPython is Debian's python3 without site-packages (-S): the
// standard library only, as on a machine without python3-ipython.
func pythonWithoutIPython(t *testing.T) string {
	t.Helper()
	if _, err := os.Stat(testkit.DebianPython); err != nil {
		testkit.Missing(t, err)
	}
	path := filepath.Join(t.TempDir(), "python-no-site")
	if err := os.WriteFile(path, []byte("#!/bin/sh\nexec "+testkit.DebianPython+" -S \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

func startPython(t *testing.T, python string) *Kernel {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), tt.StartTimeout)
	defer cancel()
	k, err := New(Options{Interpreters: map[string]string{"python": python}}).StartKernel(ctx, core.KernelSpec{Language: "python", Cwd: t.TempDir()})
	if err != nil {
		t.Fatalf("StartKernel(%s): %v", python, err)
	}
	t.Cleanup(func() { k.Shutdown(context.Background()) })
	return k.(*Kernel)
}

// execOK runs code and fails the test unless it ends with status ok.
func execOK(t *testing.T, k *Kernel, code string) *tt.Execution {
	t.Helper()
	e := tt.Exec(t, k, code, false)
	if r := e.Reply(); r.Status != core.ReplyOK {
		t.Fatalf("%q: reply %+v:%s", code, r, e)
	}
	return e
}

func results(e *tt.Execution) []string {
	var out []string
	for _, m := range e.OfType(core.MsgExecuteResult) {
		out = append(out, tt.TextPlain(m.Message))
	}
	return out
}

// The conformance suite, on an interpreter with IPython and matplotlib.
func TestConformancePythonIPython(t *testing.T) {
	t.Parallel()
	python := needIPython(t)
	tt.Run(t, func(t *testing.T) core.Transport {
		return New(Options{Interpreters: map[string]string{"python": python}})
	}, tt.Python())
}

// A cell cut from an indented block runs, with and without IPython.
func TestPythonIndentedCell(t *testing.T) {
	t.Parallel()
	for name, python := range map[string]string{"ipython": needIPython(t), "no-ipython": pythonWithoutIPython(t)} {
		t.Run(name, func(t *testing.T) {
			k := startPython(t, python)
			if got := execOK(t, k, "\n    x = 40\n    print(x + 2)\n").Stream("stdout"); got != "42\n" {
				t.Fatalf("stdout = %q, want 42", got)
			}
			e := execOK(t, k, "    def f():\n        return 'in'\n    f()")
			if r := results(e); len(r) != 1 || r[0] != "'in'" {
				t.Fatalf("results %q", r)
			}
		})
	}
}

// Plain cells do not load IPython: an idle context stays small.
func TestPythonPlainCellsDoNotLoadIPython(t *testing.T) {
	t.Parallel()
	k := startPython(t, needIPython(t))
	for _, code := range []string{"x = 1", "print(x)", "x + 1", "'s' * 2", "\n  y = 2", "import matplotlib"} {
		execOK(t, k, code)
	}
	e := execOK(t, k, "import sys\nprint('IPython' in sys.modules, 'matplotlib.pyplot' in sys.modules)")
	if got := e.Stream("stdout"); got != "False False\n" {
		t.Fatalf("IPython or pyplot loaded by plain cells: %q", got)
	}
}

// `!cmd` runs in a shell; its output arrives between the prints around it,
// live: the first line arrives while the command still runs, and an
// interrupt ends it.
func TestIPythonShellCommand(t *testing.T) {
	t.Parallel()
	k := startPython(t, needIPython(t))
	// One command per line: a child's own stdout against its stderr is in
	// the order of the host's reads of two pipes (docs/drivers.md).
	checkTrace(t, execOK(t, k, "print('a')\n!echo b\n!echo c >&2\nprint('d')\nfiles = !printf 'x\\ny\\n'\nfiles"),
		"stdout:a\nstdout:b\nstderr:c\nstdout:d\nresult:['x', 'y']\n")
	if got := execOK(t, k, "    v = 'indented'\n    !echo $v").Stream("stdout"); got != "indented\n" {
		t.Fatalf("stdout = %q", got)
	}

	e := tt.Send(t, k, "!echo started; sleep 60; echo never", false)
	tt.Collect(t, k, e, tt.ExecTimeout, func(tt.Received) bool { return strings.Contains(e.Stream("stdout"), "started") })
	if err := k.Interrupt(context.Background()); err != nil {
		t.Fatal(err)
	}
	tt.Collect(t, k, e, tt.InterruptTimeout, nil)
	if strings.Contains(e.Stream("stdout"), "never") {
		t.Fatalf("the command ran on after the interrupt:%s", e)
	}
	// IPython reports the interrupted command on stderr and goes on, as
	// ipykernel does; _exit_code says the signal.
	if got := results(execOK(t, k, "_exit_code")); len(got) != 1 || got[0] != "-2" {
		t.Fatalf("_exit_code = %q, want -2", got)
	}
}

// Line and cell magics run through IPython's magics.
func TestIPythonMagics(t *testing.T) {
	t.Parallel()
	k := startPython(t, needIPython(t))
	execOK(t, k, "%env KH_MAGIC=1")
	if got := results(execOK(t, k, "import os\nos.environ['KH_MAGIC']")); len(got) != 1 || got[0] != "'1'" {
		t.Fatalf("after %%env: %q", got)
	}
	dir := filepath.Join(k.cwd, "sub") // where its sandbox sees it
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	execOK(t, k, "%cd "+dir)
	if got := results(execOK(t, k, "os.getcwd()")); len(got) != 1 || got[0] != "'"+dir+"'" {
		t.Fatalf("after %%cd: %q, want %q", got, dir)
	}
	// A lone name IPython knows as a magic or alias runs as one (automagic);
	// a bound name stays a name.
	if got := results(execOK(t, k, "pwd")); len(got) != 1 || got[0] != "'"+dir+"'" {
		t.Fatalf("pwd: %q, want %q", got, dir)
	}
	if err := os.WriteFile(filepath.Join(dir, "listed.txt"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if got := execOK(t, k, "ls").Stream("stdout"); !strings.Contains(got, "listed.txt") {
		t.Fatalf("ls: stdout %q", got)
	}
	if got := results(execOK(t, k, "ls = 3\nls")); len(got) != 1 || got[0] != "3" {
		t.Fatalf("a bound ls: %q", got)
	}
	if r := tt.Exec(t, k, "no_such_name_xyz", false).Reply(); r.EName != "NameError" {
		t.Fatalf("an unbound name: %+v", r)
	}
	e := execOK(t, k, "%time 20 + 22")
	if r := results(e); len(r) != 1 || r[0] != "42" || !strings.Contains(e.Stream("stdout"), "Wall time") {
		t.Fatalf("%%time:%s", e)
	}
	// An error the magic catches and shows is an error message, as ipykernel sends it.
	if errs := tt.Exec(t, k, "%time 1/0", false).OfType(core.MsgError); len(errs) != 1 || errs[0].EName != "ZeroDivisionError" {
		t.Fatalf("%%time 1/0: errors %+v", errs)
	}
	// A float's text comes from IPython's text/plain formatter, which %precision sets.
	execOK(t, k, "%precision 2")
	if got := results(execOK(t, k, "3.14159")); len(got) != 1 || got[0] != "3.14" {
		t.Fatalf("after %%precision 2: %q", got)
	}
	// %%bash reads the script's stdout and stderr from two pipes: each
	// stream in order, not one against the other.
	e = execOK(t, k, "%%bash\necho from bash\necho err >&2\necho again")
	if out, errs := e.Stream("stdout"), e.Stream("stderr"); out != "from bash\nagain\n" || errs != "err\n" {
		t.Fatalf("%%%%bash: stdout %q, stderr %q", out, errs)
	}
	if got := execOK(t, k, "%pip --version").Stream("stdout"); !strings.HasPrefix(got, "pip ") {
		t.Fatalf("%%pip --version: stdout %q", got)
	}
}

// A trailing ';' hides the result, as in IPython; one in a string or
// before a comment is read as IPython reads it.
func TestIPythonSemicolon(t *testing.T) {
	t.Parallel()
	k := startPython(t, needIPython(t))
	// In order: the last cell reads the x the one before it set.
	for _, c := range []struct {
		code string
		want int
	}{{"1+1;", 0}, {"1+1;  # quiet", 0}, {"1+1", 1}, {"'a;'", 1}, {"x = 1; x", 1}, {"x;\n\n# done\n", 0}} {
		if got := len(results(execOK(t, k, c.code))); got != c.want {
			t.Errorf("%q gave %d results, want %d", c.code, got, c.want)
		}
	}
}

// A traceback names the cell and the user's line, also where IPython
// turned the cell into Python.
func TestIPythonTraceback(t *testing.T) {
	t.Parallel()
	k := startPython(t, needIPython(t))
	e := tt.Exec(t, k, "x = 1\n!true\ny = x / 0", false)
	r := e.Reply()
	if r.EName != "ZeroDivisionError" {
		t.Fatalf("reply %+v", r)
	}
	tb := strings.Join(r.Traceback, "\n")
	if !strings.Contains(tb, "Cell In[") || !strings.Contains(tb, "line 3") || !strings.Contains(tb, "y = x / 0") {
		t.Fatalf("traceback does not name the line:\n%s", tb)
	}
}

// matplotlib inline: plt.show() displays the figure as image/png where it is
// called, a figure still open at the end of the cell is displayed then and
// closed.
func TestIPythonInlineFigures(t *testing.T) {
	t.Parallel()
	k := startPython(t, needIPython(t))
	e := execOK(t, k, "import matplotlib.pyplot as plt\nprint('before')\nplt.plot([1, 2])\nplt.show()\nprint('after')")
	checkTrace(t, e, "stdout:before\ndisplay:<Figure size 640x480 with 1 Axes>\nstdout:after\n")
	checkPNG(t, e.OfType(core.MsgDisplayData)[0].Message)

	e = execOK(t, k, "fig = plt.figure()\nplt.plot([3, 1])\n'done'")
	checkTrace(t, e, "result:'done'\ndisplay:<Figure size 640x480 with 1 Axes>\n")
	checkPNG(t, e.OfType(core.MsgDisplayData)[0].Message)
	if got := results(execOK(t, k, "plt.get_fignums()")); len(got) != 1 || got[0] != "[]" {
		t.Fatalf("figures left open: %q", got)
	}
	if got := execOK(t, k, "plt.plot([1]);"); len(results(got)) != 0 || len(got.OfType(core.MsgDisplayData)) != 1 {
		t.Fatalf("plt.plot(...); gave:%s", got)
	}
}

func checkPNG(t *testing.T, m core.Message) {
	t.Helper()
	var b64 string
	if err := json.Unmarshal(m.Data["image/png"], &b64); err != nil {
		t.Fatalf("image/png: %v", err)
	}
	png, err := base64.StdEncoding.DecodeString(b64)
	if err != nil || !strings.HasPrefix(string(png), "\x89PNG") {
		t.Fatalf("image/png is not a base64 png (%v): %.40q", err, b64)
	}
}

// Formatters registered on get_ipython().display_formatter (as a silent
// setup execution does) format results and displays.
func TestIPythonDisplayFormatter(t *testing.T) {
	t.Parallel()
	k := startPython(t, needIPython(t))
	setup := "class Point:\n    pass\nget_ipython().display_formatter.formatters['text/html'].for_type(Point, lambda p: '<b>point</b>')"
	if r := tt.Exec(t, k, setup, true).Reply(); r.Status != core.ReplyOK {
		t.Fatalf("setup: %+v", r)
	}
	e := execOK(t, k, "display(Point())\nPoint()")
	for _, m := range append(e.OfType(core.MsgDisplayData), e.OfType(core.MsgExecuteResult)...) {
		var html string
		if err := json.Unmarshal(m.Data["text/html"], &html); err != nil || html != "<b>point</b>" {
			t.Errorf("%s text/html = %s", m.Type, m.Data["text/html"])
		}
	}
	if n := len(e.OfType(core.MsgDisplayData)) + len(e.OfType(core.MsgExecuteResult)); n != 2 {
		t.Fatalf("%d outputs, want a display and a result:%s", n, e)
	}
	// One registered for a builtin scalar applies too, after a scalar
	// was formatted without it (the shell keeps the printers' dicts).
	if r := execOK(t, k, "6").OfType(core.MsgExecuteResult); len(r) != 1 || r[0].Data["text/html"] != nil {
		t.Fatalf("6 before any int formatter: %+v", r)
	}
	execOK(t, k, "get_ipython().display_formatter.formatters['text/html'].for_type(int, lambda i: '<i>%d</i>' % i)")
	var html string
	if r := execOK(t, k, "7").OfType(core.MsgExecuteResult); len(r) != 1 || json.Unmarshal(r[0].Data["text/html"], &html) != nil || html != "<i>7</i>" {
		t.Fatalf("int formatter not applied: %+v", r)
	}
	// So does one in a printers dict given anew, or in a formatter added.
	execOK(t, k, "get_ipython().display_formatter.formatters['text/markdown'].type_printers = {float: lambda f: 'md'}")
	var md string
	if r := execOK(t, k, "1.5").OfType(core.MsgExecuteResult); len(r) != 1 || json.Unmarshal(r[0].Data["text/markdown"], &md) != nil || md != "md" {
		t.Fatalf("a float formatter in a new dict not applied: %+v", r)
	}
	add := "from IPython.core.formatters import BaseFormatter\nclass Text(BaseFormatter):\n    format_type = 'text/x-kh'\n" +
		"f = Text(parent=get_ipython().display_formatter)\nf.for_type(complex, lambda c: 'kh')\nget_ipython().display_formatter.formatters['text/x-kh'] = f"
	execOK(t, k, add)
	var kh string
	if r := execOK(t, k, "1j").OfType(core.MsgExecuteResult); len(r) != 1 || json.Unmarshal(r[0].Data["text/x-kh"], &kh) != nil || kh != "kh" {
		t.Fatalf("a formatter added not applied: %+v", r)
	}
}

// The shell's execution count is the cell's (the driver's, which each
// reply carries), as are Out, _N and _iN; %reset does not change it.
func TestIPythonExecutionCount(t *testing.T) {
	t.Parallel()
	k := startPython(t, needIPython(t))
	execOK(t, k, "get_ipython()")
	execOK(t, k, "40 + 2")
	e := execOK(t, k, "print(get_ipython().execution_count, Out[2], _2, _i2)")
	if got := e.Stream("stdout"); got != "3 42 42 40 + 2\n" || e.Reply().ExecutionCount != 3 {
		t.Fatalf("count, Out[2], _2, _i2: %q, reply count %d", got, e.Reply().ExecutionCount)
	}
	execOK(t, k, "%reset -f")
	if got := results(execOK(t, k, "get_ipython().execution_count")); len(got) != 1 || got[0] != "5" {
		t.Fatalf("after %%reset: %q", got)
	}
}

// What a context keeps of its cells (In, Out, _, __, ___, _i, _ii, _iii,
// _N, _iN and which of them %who hides) is what IPython's own run_cell
// keeps for the same cells: the shell's history and result hook are
// kernelhost's leaner versions of IPython's (_kernelhost/shell.py).
func TestIPythonHistoryAsIPythonKeepsIt(t *testing.T) {
	t.Parallel()
	python := needIPython(t)
	cells := []string{"get_ipython()", "40 + 2", "x = 7", "x * 3", "_ = 'mine'", "5", "del _\n6", "[1, 2]",
		"print('no result')", "None", "'%d' % x", "8;", "  x + 1", "exit_code = 1\nexit_code"}
	// Cell 1 makes the context's shell, which then keeps cells from 2 on:
	// the probe compares those.
	probe := `import re; h = get_ipython().user_ns_hidden
names = ("_", "__", "___", "_i", "_ii", "_iii")
print("PROBE", repr((In[-13:-1], {k: v for k, v in Out.items() if k >= 2}, ["the shell" if v is get_ipython() else v for v in (globals().get(n, "unset") for n in names)], _2, _i4, _8, _i14,
    sorted(k for k in h if k in names or (re.fullmatch(r"_i?[0-9]+", k) and int(k.lstrip("_i")) >= 2)))))`
	k := startPython(t, python)
	for _, c := range cells {
		execOK(t, k, c)
	}
	got := strings.TrimSpace(execOK(t, k, probe).Stream("stdout"))

	ctx, cancel := context.WithTimeout(context.Background(), tt.StartTimeout)
	defer cancel()
	script := `import json, sys
from IPython.core.interactiveshell import InteractiveShell
from traitlets.config import Config
c = Config(); c.HistoryManager.hist_file = ":memory:"; c.InteractiveShell.colors = "NoColor"
sh = InteractiveShell.instance(config=c)
for cell in json.loads(sys.argv[1]):
    sh.run_cell(cell, store_history=True)
`
	all, _ := json.Marshal(append(cells, probe))
	cmd := exec.CommandContext(ctx, python, "-c", script, string(all))
	cmd.Env = append(os.Environ(), "IPYTHONDIR="+t.TempDir())
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("IPython's own shell: %v\n%s", err, out)
	}
	var want string
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, "PROBE ") {
			want = line
		}
	}
	if want == "" || got != want {
		t.Fatalf("the context keeps\n%s\nIPython keeps\n%s\n(IPython's output:\n%s)", got, want, out)
	}
}

// In[N] is cell N also when the shell is made by a later cell than the
// first (no preload: here by the third, which imports IPython); the cells
// that ran before it existed are empty.
func TestIPythonInNumbersTheCellsBeforeTheShell(t *testing.T) {
	t.Parallel()
	k := startPython(t, needIPython(t))
	for _, c := range []string{"a = 1", "b = 2", "import IPython", "40 + 2"} {
		execOK(t, k, c)
	}
	if got := execOK(t, k, "print(repr((In[1:], _i4, Out)))").Stream("stdout"); got != "(['', '', '', '40 + 2', 'print(repr((In[1:], _i4, Out)))'], '40 + 2', {4: 42})\n" {
		t.Fatalf("In, _i4 and Out after the shell was made by cell 3: %q", got)
	}
}

// With the shell, a builtin scalar's result is IPython's text/plain: its
// repr, unless a text/plain printer registered for its type says otherwise
// (one for int leaves bool, whose True and False have printers of their
// own, as it was).
func TestIPythonScalarResults(t *testing.T) {
	t.Parallel()
	k := startPython(t, needIPython(t))
	execOK(t, k, "get_ipython()")
	check := func(code, want string) {
		t.Helper()
		if got := results(execOK(t, k, code)); len(got) != 1 || got[0] != want {
			t.Errorf("%s: results %q, want %q", code, got, want)
		}
	}
	for code, want := range map[string]string{"2": "2", "True": "True", "'a\\u2028b'": "'a\\u2028b'", "b'x'": "b'x'", "1.5": "1.5", "1j": "1j"} {
		check(code, want)
	}
	execOK(t, k, "get_ipython().display_formatter.formatters['text/plain'].for_type(int, lambda i, p, cycle: p.text('int %d' % i))")
	check("8", "int 8")
	check("False", "False")
}

// Without IPython a plain cell runs as before, and a magic or `!` line fails
// with an error that says what to install.
func TestPythonWithoutIPython(t *testing.T) {
	t.Parallel()
	k := startPython(t, pythonWithoutIPython(t))
	for _, code := range []string{"!echo hi", "x = 1\n%time x", "%%bash\necho hi"} {
		r := tt.Exec(t, k, code, false).Reply()
		if r.EName != "ModuleNotFoundError" || !strings.Contains(r.EValue, "python3-ipython") {
			t.Errorf("%q: reply %+v, want ModuleNotFoundError naming python3-ipython", code, r)
		}
	}
	if got := results(execOK(t, k, "[1, 2]")); len(got) != 1 || got[0] != "[1, 2]" {
		t.Fatalf("results %q", got)
	}
	if r := tt.Exec(t, k, "print(1", false).Reply(); r.EName != "SyntaxError" {
		t.Fatalf("a plain syntax error: %+v", r)
	}
}
