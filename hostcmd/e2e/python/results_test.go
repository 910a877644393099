package python_test

import (
	"encoding/base64"
	"strings"
	"testing"

	"github.com/kernelhost/kernelhost/hostcmd/internal/hosttest"
	"github.com/kernelhost/kernelhost/internal/testkit"
	"github.com/kernelhost/kernelhost/transports/jupyter/jupytertest"
)

// Charts, data and images over HTTP: kernelhost's python kernel environment
// (package kernelpy), which every new python kernel gets, on
// the subprocess transport (the driver on Debian's python) and on Jupyter
// (ipykernel, whose kernels the test does not change). The official SDK's
// view of the same is hostcmd/sdktest/sdk-charts.test.mjs.

func TestPythonResults(t *testing.T) {
	t.Parallel()
	testkit.NeedPythonModules(t, testkit.DebianPython, "IPython", "matplotlib", "pandas", "PIL")
	t.Run("subprocess", func(t *testing.T) {
		t.Parallel() // each transport has a host of its own
		testPythonResults(t, hosttest.Start(t, hosttest.OnDebianPython))
	})
	t.Run("jupyter", func(t *testing.T) {
		t.Parallel()
		srv := jupytertest.Shared(t)
		testPythonResults(t, hosttest.Start(t, hosttest.JupyterInProcess(t, srv)))
	})
}

const lineOverDates = `import datetime
import matplotlib.pyplot as plt
days = [datetime.datetime(2024, 3, 1) + datetime.timedelta(days=i) for i in range(5)]
plt.plot(days, [1.5, 2, 2.5, 3, 3.5], label='load')
plt.title('settings.Load')
plt.ylabel('settings.Load (kW)')
plt.show()`

func testPythonResults(t *testing.T, h *hosttest.Host) {
	chart := func(t *testing.T, lines []hosttest.Line) map[string]any {
		t.Helper()
		hosttest.NoError(t, lines)
		results := hosttest.OfType(lines, "result")
		if len(results) != 1 {
			t.Fatalf("want one result (the figure), got %v", results)
		}
		r := results[0]
		if png, err := base64.StdEncoding.DecodeString(r.Str("png")); err != nil || !strings.HasPrefix(string(png), "\x89PNG") {
			t.Fatalf("no png beside the chart (%v): %v", err, r)
		}
		c, ok := r["chart"].(map[string]any)
		if !ok {
			t.Fatalf("no chart in %v", r)
		}
		return c
	}
	checkLine := func(t *testing.T, c map[string]any) {
		t.Helper()
		el := c["elements"].([]any)[0].(map[string]any)
		first := el["points"].([]any)[0].([]any)
		if c["type"] != "line" || c["title"] != "settings.Load" || c["x_scale"] != "datetime" || c["y_unit"] != "kW" || c["x_unit"] != nil ||
			el["label"] != "load" || first[0] != "2024-03-01T00:00:00" || first[1] != 1.5 {
			t.Fatalf("line chart %v", c)
		}
	}
	t.Run("LineOverDates", func(t *testing.T) { checkLine(t, chart(t, h.Run(map[string]any{"code": lineOverDates}))) })

	t.Run("DataFrame", func(t *testing.T) {
		lines := h.Run(map[string]any{"code": "import pandas as pd\npd.DataFrame({'n': [1, 2], 's': ['a', None]})"})
		hosttest.NoError(t, lines)
		r := hosttest.OfType(lines, "result")[0]
		data, _ := r["data"].(map[string]any)
		n, _ := data["n"].([]any)
		s, _ := data["s"].([]any)
		if len(n) != 2 || n[0] != float64(1) || len(s) != 2 || s[0] != "a" || s[1] != nil || !strings.Contains(r.Str("html"), "<table") {
			t.Fatalf("DataFrame result %v", r)
		}
	})

	t.Run("Images", func(t *testing.T) {
		lines := h.Run(map[string]any{"code": "from PIL import Image\nimg = Image.new('L', (3, 2))\nimg.show()\nimg"})
		hosttest.NoError(t, lines)
		results := hosttest.OfType(lines, "result")
		if len(results) != 2 || results[0]["is_main_result"] != false || results[1]["is_main_result"] != true {
			t.Fatalf("want the shown image and the main result, got %v", results)
		}
		for _, r := range results {
			if png, err := base64.StdEncoding.DecodeString(r.Str("png")); err != nil || !strings.HasPrefix(string(png), "\x89PNG") {
				t.Fatalf("not a png (%v): %v", err, r)
			}
		}
	})

	t.Run("JSON", func(t *testing.T) {
		lines := h.Run(map[string]any{"code": "{'a': [1, None]}"})
		hosttest.NoError(t, lines)
		j, _ := hosttest.OfType(lines, "result")[0]["json"].(map[string]any)
		if a, _ := j["a"].([]any); len(a) != 2 || a[0] != float64(1) || a[1] != nil {
			t.Fatalf("json %v", j)
		}
	})

	// A cell that does not plot gets what it got without the environment.
	t.Run("PlainCell", func(t *testing.T) {
		lines := h.Run(map[string]any{"code": "print('hi')\n6 * 7"})
		if got := hosttest.MainResult(t, lines); got != "42" || hosttest.Stdout(lines) != "hi\n" {
			t.Fatalf("plain cell: result %q, stdout %q", got, hosttest.Stdout(lines))
		}
		if r := hosttest.OfType(lines, "result")[0]; len(r) != 4 { // type, text, extra, is_main_result
			t.Fatalf("plain result has more than its text: %v", r)
		}
	})

	t.Run("UpstreamParity", func(t *testing.T) { testUpstreamParity(t, h) })
	t.Run("Corpus", func(t *testing.T) { testChartCorpus(t, h) })

	// A restarted kernel is a new interpreter: the environment is applied again.
	t.Run("AfterRestart", func(t *testing.T) {
		id := h.DefaultID("python")
		if status, body := h.Do("POST", "/contexts/"+id+"/restart", ""); status != 200 {
			t.Fatalf("restart: %d %s", status, body)
		}
		checkLine(t, chart(t, h.Run(map[string]any{"code": lineOverDates})))
	})
}
