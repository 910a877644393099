package kernelpy_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/kernelhost/kernelhost/internal/testkit"
	"github.com/kernelhost/kernelhost/transports/kernelpy"
)

// runPython runs code in a fresh Debian python and returns its stdout. The
// test fails (under CI) or skips (elsewhere) when that python or one of the
// packages is missing.
func runPython(t testing.TB, code string) string {
	t.Helper()
	testkit.NeedPythonModules(t, testkit.DebianPython, "IPython", "matplotlib", "pandas", "PIL")
	cmd := exec.Command(testkit.DebianPython, "-c", code)
	cmd.Env = append(os.Environ(), "MPLBACKEND=agg")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("python: %v\nstderr:\n%s", err, stderr.String())
	}
	return string(out)
}

// loadEnv is python that gives a bare interpreter the package, as the
// setup request does, and the environment loaded, as env.
var loadEnv = `
exec(compile(` + strconv.Quote(kernelpy.Setup("python")) + `, '<setup>', 'exec'), {})
env = sys.modules['_kernelhost'].load('_kernelhost.env')
`

func TestSetupIsForPythonOnly(t *testing.T) {
	for _, lang := range []string{"javascript", "typescript", "r", "java", "bash", ""} {
		if code := kernelpy.Setup(lang); code != "" {
			t.Errorf("Setup(%q) = %q, want nothing", lang, code)
		}
	}
	if kernelpy.Setup("python") == "" {
		t.Fatal("Setup(python) is empty")
	}
}

// The setup code runs again on a kernel that already has it (the engine
// applies it on every setup request, and a kernel can be set up twice):
// nothing is registered twice, nothing lands in the user's globals, and none
// of matplotlib, pandas, PIL is imported by it.
func TestPythonSetupIsIdempotentLazyAndClean(t *testing.T) {
	setup := kernelpy.Setup("python")
	out := runPython(t, `
import json, sys
from IPython.core.interactiveshell import InteractiveShell
shell = InteractiveShell.instance()
before = set(shell.user_ns)
for _ in range(3):
    shell.run_cell(`+strconv.Quote(setup)+`, silent=True)
hooks = [f for f in sys.meta_path if type(f).__name__ == '_ImportHook']
print(json.dumps({
    "hooks": len(hooks),
    "leaked": sorted(set(shell.user_ns) - before),
    "imported": sorted(m for m in ('matplotlib', 'pandas', 'PIL', 'numpy') if m in sys.modules),
    "formatters": sorted(k for k in shell.display_formatter.formatters if k.startswith('e2b/')),
}))
`)
	var got struct {
		Hooks      int
		Leaked     []string
		Imported   []string
		Formatters []string
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("decode %q: %v", out, err)
	}
	if got.Hooks != 1 || len(got.Leaked) != 0 || len(got.Imported) != 0 || strings.Join(got.Formatters, " ") != "e2b/chart e2b/data" {
		t.Fatalf("after three setups: %+v; want one import hook, no new globals, nothing imported, the e2b/chart and e2b/data formatters", got)
	}
}

// A kernel that already has formatters of its own for e2b/chart and
// application/json (E2B's startup scripts add such) keeps them: ours are not
// added beside or over them, and a figure gets one chart, theirs.
func TestPythonSetupKeepsExistingFormatters(t *testing.T) {
	out := runPython(t, `
import json
from IPython.core.interactiveshell import InteractiveShell
from IPython.core.formatters import BaseFormatter, JSONFormatter
from traitlets import ObjectName
shell = InteractiveShell.instance()
class TheirChart(BaseFormatter):
    format_type = 'e2b/chart'
    print_method = ObjectName('_their_chart_')
    _return_type = (dict,)
    def __call__(self, obj):
        return {'theirs': True} if type(obj).__name__ == 'Figure' else None
class TheirJSON(JSONFormatter):
    pass
forms = shell.display_formatter.formatters
forms['e2b/chart'] = TheirChart(parent=shell.display_formatter)
forms['application/json'] = TheirJSON(parent=shell.display_formatter)
shell.run_cell(`+strconv.Quote(kernelpy.Setup("python"))+`, silent=True)
import matplotlib.pyplot as plt
fig = plt.figure(); plt.plot([1, 2], [3, 4])
data, _ = shell.display_formatter.format(fig)
print(json.dumps({"chart": data.get('e2b/chart'), "json": 'application/json' in shell.display_formatter.format({'a': 1})[0]}))
`)
	if strings.TrimSpace(out) != `{"chart": {"theirs": true}, "json": false}` {
		t.Fatalf("got %s, want their chart and no JSON for a dict from their formatter", out)
	}
}

// chartTimings extracts the chart of a figure with one 10,000-point line n
// times in a Debian python and returns the median wall and CPU time of one
// extraction, in milliseconds (CPU time is what a loaded machine disturbs
// least).
func chartTimings(t testing.TB, n int) (wallMS, cpuMS float64) {
	out := runPython(t, `
import json, statistics, sys, time
`+loadEnv+`import matplotlib.pyplot as plt
import numpy as np
x = np.linspace(0, 100, 10000)
fig = plt.figure()
plt.plot(x, np.sin(x), label='sin')
plt.xlabel('Time (s)')
chart = env.figure_chart(fig)
assert chart['type'] == 'line' and len(chart['elements'][0]['points']) == 10000, chart['type']
wall, cpu = [], []
for _ in range(`+strconv.Itoa(n)+`):
    w, c = time.perf_counter(), time.process_time()
    env.figure_chart(fig)
    wall.append(time.perf_counter() - w)
    cpu.append(time.process_time() - c)
print(json.dumps([statistics.median(wall) * 1000, statistics.median(cpu) * 1000]))
`)
	var ms [2]float64
	if err := json.Unmarshal([]byte(out), &ms); err != nil {
		t.Fatalf("decode %q: %v", out, err)
	}
	return ms[0], ms[1]
}

// The chart of a 10,000-point line is extracted within 50 ms (CPU time,
// median of 15: the machine running the tests may be loaded).
func TestChartOf10kPointLineWithin50ms(t *testing.T) {
	wall, cpu := chartTimings(t, 15)
	t.Logf("chart of a 10,000-point line: median %.1f ms wall, %.1f ms CPU", wall, cpu)
	if cpu > 50 {
		t.Fatalf("chart extraction took %.1f ms CPU (median), want <= 50", cpu)
	}
}

// BenchmarkChart10kLine reports the median time to extract the chart of a
// 10,000-point line (chart-p50-ms, chart-cpu-p50-ms), over at least 50
// extractions in one python process; ns/op includes that process's start,
// read the metrics.
func BenchmarkChart10kLine(b *testing.B) {
	wall, cpu := chartTimings(b, max(b.N, 50))
	b.ReportMetric(wall, "chart-p50-ms")
	b.ReportMetric(cpu, "chart-cpu-p50-ms")
}

// A shell made after the environment was applied (a driver that loads
// IPython only when a cell needs it) gets the formatters too, and applying
// the environment imports no IPython.
func TestPythonShellMadeLaterGetsTheFormatters(t *testing.T) {
	out := runPython(t, `
import json, sys
exec(compile(`+strconv.Quote(kernelpy.Setup("python"))+`, '<setup>', 'exec'), {})
ipython_after_setup = 'IPython' in sys.modules
from IPython.core.interactiveshell import InteractiveShell
shell = InteractiveShell.instance()
import matplotlib.pyplot as plt
fig = plt.figure(); plt.plot([1, 2], [3, 4])
data, _ = shell.display_formatter.format(fig)
print(json.dumps({"ipython_after_setup": ipython_after_setup, "chart": data.get('e2b/chart', {}).get('type')}))
`)
	if strings.TrimSpace(out) != `{"ipython_after_setup": false, "chart": "line"}` {
		t.Fatalf("got %s, want no IPython import by the setup and a line chart from the later shell", out)
	}
}

// A figure whose chart cannot be read loses only its chart, silently: the
// other formats stay and nothing is printed.
func TestPythonUnreadableChartIsLeftOut(t *testing.T) {
	out := runPython(t, `
import contextlib, io, json
from IPython.core.interactiveshell import InteractiveShell
shell = InteractiveShell.instance()
shell.run_cell(`+strconv.Quote(kernelpy.Setup("python"))+`, silent=True)
from matplotlib.figure import Figure
class Odd(Figure):
    def get_axes(self):
        raise RuntimeError('unreadable')
err = io.StringIO()
with contextlib.redirect_stderr(err), contextlib.redirect_stdout(err):
    data, _ = shell.display_formatter.format(Odd())
print(json.dumps({"formats": sorted(data), "printed": err.getvalue()}))
`)
	if strings.TrimSpace(out) != `{"formats": ["image/png", "text/plain"], "printed": ""}` {
		t.Fatalf("got %s, want the png and text without a chart, and nothing printed", out)
	}
}

// On a kernel with nothing to format or show yet (the subprocess driver
// before IPython), the setup leaves env.py uncompiled: it loads at the
// first import of a module it patches, which it then patches. Run twice
// before that, the setup installs one hook.
func TestPythonSetupDefersTheEnvironment(t *testing.T) {
	setup := strconv.Quote(kernelpy.Setup("python"))
	out := runPython(t, `
import json, sys
for _ in range(2):
    exec(compile(`+setup+`, '<setup>', 'exec'), {})
deferred = '`+kernelpy.PythonModule+`' not in sys.modules
hooks = [type(f).__name__ for f in sys.meta_path].count('_ImportHook')
from PIL import Image
print(json.dumps({
    "deferred": deferred,
    "hooks": hooks,
    "loaded_by_import": '`+kernelpy.PythonModule+`' in sys.modules,
    "show_patched": getattr(Image.Image.show, '_kernelhost', False),
}))
`)
	if strings.TrimSpace(out) != `{"deferred": true, "hooks": 1, "loaded_by_import": true, "show_patched": true}` {
		t.Fatalf("got %s, want the environment deferred by the setup, one hook, and loaded and applied by the import of PIL.Image", out)
	}
}

// The boot stage watches exactly the modules the environment patches: one
// it missed would never be patched where the environment loads late.
func TestPythonBootWatchesWhatTheEnvironmentPatches(t *testing.T) {
	out := runPython(t, `
import json, sys
`+loadEnv+`
print(json.dumps([sorted(sys.modules['_kernelhost'].ENV_WATCHED), sorted(env.ON_IMPORT)]))
`)
	var lists [2][]string
	if err := json.Unmarshal([]byte(out), &lists); err != nil {
		t.Fatalf("decode %q: %v", out, err)
	}
	if strings.Join(lists[0], " ") != strings.Join(lists[1], " ") {
		t.Fatalf("_kernelhost watches %v, _kernelhost.env patches %v", lists[0], lists[1])
	}
}

// Box plot values lose float noise as E2B's extractor rounds it away (at
// the first run of three 9s, or of three 0s after a significant digit), and
// other values are kept; pie angles keep the 7 significant digits of
// matplotlib's float32 pie(): 90% of a pie is 324, not 323.99999141693115.
func TestPythonChartRounding(t *testing.T) {
	out := runPython(t, `
import json, sys
`+loadEnv+`import matplotlib.pyplot as plt
fig, ax = plt.subplots()
ax.pie([90, 10], startangle=90)
print(json.dumps({
    "tidy": [env._tidy(v) for v in (4.749999999, 0.30000000000000004, 0.0005163749999999999, 2.2680000000000003e-05, 3.14159, 36.000003814697266, -1.0000001)],
    "angles": [e["angle"] for e in env.figure_chart(fig)["elements"]],
}))
`)
	const want = `{"tidy": [4.75, 0.3, 0.000516375, 2.268e-05, 3.14159, 36.000003814697266, -1.0000001], "angles": [324.0, 36.0]}`
	if strings.TrimSpace(out) != want {
		t.Fatalf("got %s\nwant %s", out, want)
	}
}
