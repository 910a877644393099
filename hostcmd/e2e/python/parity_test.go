package python_test

import (
	"encoding/base64"
	"strings"
	"testing"

	"github.com/kernelhost/kernelhost/hostcmd/internal/hosttest"
)

// testUpstreamParity checks, over HTTP, the figures whose results the E2B
// upstream gives differently from kernelhost's first rules (issue 25's
// table): one subtest per row, each the smallest cell that shows it. It runs
// from TestPythonResults, on the subprocess transport and on Jupyter.
func testUpstreamParity(t *testing.T, h *hosttest.Host) {
	// results runs code and returns its result lines, each with a png.
	results := func(t *testing.T, code string) []hosttest.Line {
		t.Helper()
		lines := h.Run(map[string]any{"code": code})
		hosttest.NoError(t, lines)
		rs := hosttest.OfType(lines, "result")
		for _, r := range rs {
			if png, err := base64.StdEncoding.DecodeString(r.Str("png")); err != nil || !strings.HasPrefix(string(png), "\x89PNG") {
				t.Fatalf("result without a png (%v): %v", err, r)
			}
		}
		return rs
	}
	// chartOf runs code that shows one figure and returns its chart.
	chartOf := func(t *testing.T, code string) map[string]any {
		t.Helper()
		rs := results(t, "import matplotlib.pyplot as plt\n"+code+"\nplt.show()")
		if len(rs) != 1 {
			t.Fatalf("want one result (the figure), got %v", rs)
		}
		c, ok := rs[0]["chart"].(map[string]any)
		if !ok {
			t.Fatalf("no chart object in %v", rs[0])
		}
		return c
	}
	kinds := func(c map[string]any) []string {
		var out []string
		for _, e := range c["elements"].([]any) {
			out = append(out, e.(map[string]any)["type"].(string))
		}
		return out
	}
	elements := func(c map[string]any) []any { e, _ := c["elements"].([]any); return e }

	t.Run("NoDataIsAnEmptyChart", func(t *testing.T) {
		if c := chartOf(t, `fig, ax = plt.subplots(); ax.text(.5, .5, "only text")`); len(c) != 0 {
			t.Fatalf("chart %v, want {}", c)
		}
	})
	t.Run("ColorbarIsASuperchart", func(t *testing.T) {
		c := chartOf(t, "fig, ax = plt.subplots(); sc = ax.scatter([1,2,3], [3,1,2], c=[1,2,3]); fig.colorbar(sc)")
		if c["type"] != "superchart" || strings.Join(kinds(c), " ") != "scatter unknown" {
			t.Fatalf("chart %v, want a superchart [scatter, unknown]", c)
		}
	})
	t.Run("MixedArtistsAreUnknown", func(t *testing.T) {
		c := chartOf(t, "fig, ax = plt.subplots(); ax.plot([1,2,3]); ax.scatter([1,2,3], [3,2,1])")
		if c["type"] != "unknown" || len(elements(c)) != 0 {
			t.Fatalf("chart %v, want unknown without elements", c)
		}
	})
	t.Run("MarkersOnlyAreALine", func(t *testing.T) {
		c := chartOf(t, `plt.plot([1,2,3], [3,1,2], "o")`)
		if c["type"] != "line" || len(elements(c)) != 1 {
			t.Fatalf("chart %v, want a line chart of one line", c)
		}
	})
	t.Run("EmptyTwinIsALine", func(t *testing.T) {
		c := chartOf(t, "fig, ax = plt.subplots(); ax.plot([1,2,3]); ax.twinx()")
		if c["type"] != "superchart" || strings.Join(kinds(c), " ") != "line line" {
			t.Fatalf("chart %v, want a superchart [line, line]", c)
		}
		if twin := elements(c)[1].(map[string]any); len(elements(twin)) != 0 {
			t.Fatalf("twin %v, want no elements", twin)
		}
	})
	t.Run("SavedFigureIsDisplayed", func(t *testing.T) {
		rs := results(t, "import os, tempfile\nimport matplotlib.pyplot as plt\nplt.plot([1,2,3])\n"+
			"plt.savefig(os.path.join(tempfile.mkdtemp(), 'out.png'))\nplt.show()")
		if len(rs) != 2 || rs[1]["chart"] == nil {
			t.Fatalf("want 2 pngs (the saved image, then the figure with its chart), got %v", rs)
		}
	})
	t.Run("PieAnglesAreRounded", func(t *testing.T) {
		c := chartOf(t, "plt.pie([10, 90], labels=['a', 'b'])")
		b := elements(c)[1].(map[string]any)
		if c["type"] != "pie" || b["label"] != "b" || b["angle"] != float64(324) {
			t.Fatalf("chart %v, want b's angle 324", c)
		}
	})
	t.Run("SavedImageIsDisplayed", func(t *testing.T) {
		rs := results(t, "import os, tempfile\nfrom PIL import Image\n"+
			"Image.new('RGB', (4, 3)).save(os.path.join(tempfile.mkdtemp(), 'x.png'))")
		if len(rs) != 1 || rs[0]["is_main_result"] != false {
			t.Fatalf("want the saved image displayed, got %v", rs)
		}
	})
}

// The subprocess transport's python is a script's process where ipykernel's
// differs (docs/RATIONALE.md, "The python driver's process is a script's"):
// an argparse parser gets no arguments and so its defaults, and
// sys.stdout.buffer writes bytes (after a flush, in order with the prints).
func TestPythonProcessAsAScript(t *testing.T) {
	t.Parallel()
	h := hosttest.Start(t)
	lines := h.Run(map[string]any{"code": "import argparse, sys\np = argparse.ArgumentParser()\np.add_argument('--n', default=3)\n" +
		"print(sys.argv, p.parse_args().n)\nsys.stdout.flush()\nsys.stdout.buffer.write(b'bytes\\n')\nprint('after')"})
	hosttest.NoError(t, lines)
	if got := hosttest.Stdout(lines); got != "['-c'] 3\nbytes\nafter\n" {
		t.Fatalf("stdout %q, want argv ['-c'], the default 3, then the bytes and the print in order", got)
	}
}
