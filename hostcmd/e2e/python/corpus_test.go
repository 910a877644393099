package python_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/kernelhost/kernelhost/hostcmd/internal/hosttest"
)

// The chart corpus: real plotting cells, rewritten from the examples of
// matplotlib's and pandas' documentation (gallery and user guide), each with
// the chart kind and the number of elements E2B's extractor rules give it
// (a superchart lists its charts). chartCorpus runs them all on one host and
// reports figures, kinds matched and elements matched (docs/python-results.md
// keeps the table); every cell must match.
var chartCorpus = []struct {
	name, code, want string
}{
	// matplotlib: Pyplot tutorial, Quick start guide and the gallery.
	{"pyplot line", `plt.plot([1, 2, 3, 4]); plt.ylabel('some numbers')`, "line:1"},
	{"quick start, three labelled lines", `x = np.linspace(0, 2, 100)
fig, ax = plt.subplots(figsize=(5, 2.7), layout='constrained')
ax.plot(x, x, label='linear'); ax.plot(x, x**2, label='quadratic'); ax.plot(x, x**3, label='cubic')
ax.set_xlabel('x label'); ax.set_ylabel('y label'); ax.set_title('Simple Plot'); ax.legend()`, "line:3"},
	{"red circles (markers only)", `plt.plot([1, 2, 3, 4], [1, 4, 9, 16], 'ro'); plt.axis((0, 6, 0, 20))`, "line:1"},
	{"three styles in one call", `t = np.arange(0., 5., 0.2)
plt.plot(t, t, 'r--', t, t**2, 'bs', t, t**3, 'g^')`, "line:3"},
	{"step", `x = np.arange(14); y = np.sin(x / 2)
plt.step(x, y + 2, label='pre (default)'); plt.plot(x, y + 2, 'o--', color='grey', alpha=0.3); plt.legend(title='Parameter where:')`, "line:2"},
	{"semilogy with grid", `t = np.arange(0.01, 20.0, 0.01)
fig, ax = plt.subplots(); ax.semilogy(t, np.exp(-t / 5.0)); ax.set(title='semilogy'); ax.grid()`, "line:1"},
	{"annotated line", `fig, ax = plt.subplots(); t = np.arange(0.0, 5.0, 0.01)
line, = ax.plot(t, np.cos(2 * np.pi * t), lw=2)
ax.annotate('local max', xy=(2, 1), xytext=(3, 1.5), arrowprops=dict(facecolor='black', shrink=0.05)); ax.set_ylim(-2, 2)`, "line:1"},
	{"line with axhline", `fig, ax = plt.subplots(); ax.plot([0, 1, 2, 3], [1, -1, 2, -2]); ax.axhline(0, color='grey')`, "line:1"},
	{"scatter with sizes and colours", `np.random.seed(19680801); N = 50
x, y, colors = np.random.rand(N), np.random.rand(N), np.random.rand(N)
area = (30 * np.random.rand(N))**2
plt.scatter(x, y, s=area, c=colors, alpha=0.5)`, "scatter:1"},
	{"scatter of two groups", `np.random.seed(0)
fig, ax = plt.subplots()
for color in ['tab:blue', 'tab:orange']:
    x, y = np.random.rand(2, 20)
    ax.scatter(x, y, c=color, label=color, alpha=0.3, edgecolors='none')
ax.legend(); ax.grid(True)`, "scatter:2"},
	{"bar with labels and colours", `fig, ax = plt.subplots()
fruits = ['apple', 'blueberry', 'cherry', 'orange']; counts = [40, 100, 30, 55]
bar_labels = ['red', 'blue', '_red', 'orange']; bar_colors = ['tab:red', 'tab:blue', 'tab:red', 'tab:orange']
ax.bar(fruits, counts, label=bar_labels, color=bar_colors)
ax.set_ylabel('fruit supply'); ax.set_title('Fruit supply by kind and color'); ax.legend(title='Fruit color')`, "bar:4"},
	{"grouped bars with bar labels", `species = ('Adelie', 'Chinstrap', 'Gentoo')
penguin_means = {'Bill Depth': (18.35, 18.43, 14.98), 'Bill Length': (38.79, 48.83, 47.50), 'Flipper Length': (189.95, 195.82, 217.19)}
x = np.arange(len(species)); width = 0.25; multiplier = 0
fig, ax = plt.subplots(layout='constrained')
for attribute, measurement in penguin_means.items():
    offset = width * multiplier
    rects = ax.bar(x + offset, measurement, width, label=attribute)
    ax.bar_label(rects, padding=3)
    multiplier += 1
ax.set_ylabel('Length (mm)'); ax.set_xticks(x + width, species); ax.legend(loc='upper left', ncols=3)`, "bar:9"},
	{"stacked bars", `species = ('Adelie', 'Chinstrap', 'Gentoo')
weight_counts = {'Below': np.array([70, 31, 58]), 'Above': np.array([82, 37, 66])}
fig, ax = plt.subplots(); bottom = np.zeros(3)
for boolean, weight_count in weight_counts.items():
    p = ax.bar(species, weight_count, 0.5, label=boolean, bottom=bottom)
    bottom += weight_count
ax.legend(loc='upper right')`, "bar:6"},
	{"horizontal bars with error bars", `np.random.seed(19680801)
fig, ax = plt.subplots()
people = ('Tom', 'Dick', 'Harry', 'Slim', 'Jim'); y_pos = np.arange(len(people))
ax.barh(y_pos, 3 + 10 * np.random.rand(len(people)), xerr=np.random.rand(len(people)), align='center')
ax.set_yticks(y_pos, labels=people); ax.invert_yaxis(); ax.set_xlabel('Performance')`, "unknown:0"},
	{"histogram", `np.random.seed(19680801)
plt.hist(np.random.randn(1000), bins=20)`, "bar:20"},
	{"pie with autopct", `labels = 'Frogs', 'Hogs', 'Dogs', 'Logs'; sizes = [15, 30, 45, 10]
fig, ax = plt.subplots(); ax.pie(sizes, labels=labels, autopct='%1.1f%%')`, "pie:4"},
	{"pie with explode and shadow", `fig, ax = plt.subplots()
ax.pie([15, 30, 45, 10], explode=(0, 0.1, 0, 0), labels=['Frogs', 'Hogs', 'Dogs', 'Logs'], autopct='%1.1f%%', shadow=True, startangle=90)`, "unknown:0"},
	{"boxplot", `np.random.seed(19680801)
all_data = [np.random.normal(0, std, size=100) for std in range(1, 4)]
fig, ax = plt.subplots(); ax.boxplot(all_data); ax.set_title('Rectangular box plot')`, "box_and_whisker:3"},
	{"boxplot, patch artist", `np.random.seed(19680801)
all_data = [np.random.normal(0, std, size=100) for std in range(1, 4)]
fig, ax = plt.subplots(); ax.boxplot(all_data, patch_artist=True, labels=['x1', 'x2', 'x3'])`, "box_and_whisker:3"},
	{"violin plot", `np.random.seed(19680801)
fig, ax = plt.subplots(); ax.violinplot([np.random.normal(0, std, 100) for std in range(6, 10)])`, "unknown:0"},
	{"fill between", `x = np.arange(0.0, 2, 0.01); y1 = np.sin(2 * np.pi * x)
fig, ax = plt.subplots(); ax.fill_between(x, y1); ax.plot(x, y1, color='black')`, "unknown:0"},
	{"errorbar", `x = np.arange(0.1, 4, 0.5); y = np.exp(-x)
fig, ax = plt.subplots(); ax.errorbar(x, y, xerr=0.2, yerr=0.4)`, "unknown:0"},
	{"stem", `x = np.linspace(0.1, 2 * np.pi, 41); plt.stem(x, np.exp(np.sin(x)))`, "unknown:0"},
	{"line and scatter on one axes", `fig, ax = plt.subplots(); ax.plot([1, 2, 3]); ax.scatter([1, 2, 3], [3, 2, 1])`, "unknown:0"},
	{"imshow with colorbar", `np.random.seed(0)
fig, ax = plt.subplots(); im = ax.imshow(np.random.rand(10, 10)); fig.colorbar(im, ax=ax)`, "superchart[unknown:0,unknown:0]"},
	{"scatter with colorbar", `np.random.seed(0)
fig, ax = plt.subplots(); sc = ax.scatter(np.random.rand(20), np.random.rand(20), c=np.random.rand(20)); fig.colorbar(sc)`, "superchart[scatter:1,unknown:0]"},
	{"two scales (twinx)", `t = np.arange(0.01, 10.0, 0.01)
fig, ax1 = plt.subplots(); ax1.plot(t, np.exp(t), color='tab:red'); ax1.set_ylabel('exp', color='tab:red')
ax2 = ax1.twinx(); ax2.plot(t, np.sin(2 * np.pi * t), color='tab:blue'); fig.tight_layout()`, "superchart[line:1,line:1]"},
	{"subplots of four kinds", `fig, axs = plt.subplots(2, 2)
axs[0, 0].plot([1, 2, 3]); axs[0, 1].scatter([1, 2], [2, 1]); axs[1, 0].bar(['a', 'b'], [1, 2]); axs[1, 1].pie([1, 2])
fig.suptitle('Four kinds')`, "superchart[line:1,scatter:1,bar:2,pie:2]"},
	{"stacked subplots sharing x", `x = np.linspace(0, 2 * np.pi, 400); y = np.sin(x ** 2)
fig, axs = plt.subplots(2, sharex=True); fig.suptitle('Vertically stacked subplots'); axs[0].plot(x, y); axs[1].plot(x, -y)`, "superchart[line:1,line:1]"},
	{"text only", `fig, ax = plt.subplots(); ax.text(0.5, 0.5, 'Hello', ha='center'); ax.axis('off')`, "{}"},
	// pandas: the Visualization chapter of the user guide.
	{"pandas DataFrame.plot", `np.random.seed(123456)
df = pd.DataFrame(np.random.randn(100, 4), index=pd.date_range('1/1/2000', periods=100), columns=list('ABCD')).cumsum()
df.plot()`, "line:4"},
	{"pandas Series.plot over dates", `np.random.seed(123456)
ts = pd.Series(np.random.randn(100), index=pd.date_range('1/1/2000', periods=100)).cumsum(); ts.plot()`, "line:1"},
	{"pandas plot.bar", `np.random.seed(123456)
pd.DataFrame(np.random.rand(4, 2), columns=['a', 'b']).plot.bar()`, "bar:8"},
	{"pandas stacked plot.barh", `np.random.seed(123456)
pd.DataFrame(np.random.rand(4, 3), columns=['a', 'b', 'c']).plot.barh(stacked=True)`, "bar:12"},
	{"pandas plot.hist", `np.random.seed(123456)
pd.DataFrame({'a': np.random.randn(100) + 1, 'b': np.random.randn(100)}).plot.hist(bins=5, alpha=0.5)`, "bar:10"},
	{"pandas plot.pie", `pd.Series([0.1, 0.2, 0.3, 0.4], index=['a', 'b', 'c', 'd'], name='series').plot.pie(figsize=(6, 6))`, "pie:4"},
	{"pandas plot.scatter", `np.random.seed(123456)
pd.DataFrame(np.random.rand(50, 2), columns=['a', 'b']).plot.scatter(x='a', y='b')`, "scatter:1"},
	{"pandas plot.scatter coloured by a column", `np.random.seed(123456)
pd.DataFrame(np.random.rand(50, 3), columns=['a', 'b', 'c']).plot.scatter(x='a', y='b', c='c', s=50)`, "superchart[scatter:1,unknown:0]"},
	{"pandas boxplot", `np.random.seed(123456)
pd.DataFrame(np.random.rand(10, 3), columns=['A', 'B', 'C']).boxplot()`, "box_and_whisker:3"},
	{"pandas plot.area", `np.random.seed(123456)
pd.DataFrame(np.random.rand(10, 2), columns=['a', 'b']).plot.area()`, "unknown:0"},
	{"pandas subplots", `np.random.seed(123456)
pd.DataFrame(np.random.randn(20, 2), columns=['A', 'B']).cumsum().plot(subplots=True)`, "superchart[line:1,line:1]"},
}

// chartSignature is a chart's kind and element count, "{}" for no chart,
// and a superchart's as the list of its charts'.
func chartSignature(c map[string]any) string {
	if len(c) == 0 {
		return "{}"
	}
	elements, _ := c["elements"].([]any)
	if c["type"] == "superchart" {
		parts := make([]string, len(elements))
		for i, e := range elements {
			sub, _ := e.(map[string]any)
			parts[i] = chartSignature(sub)
		}
		return "superchart[" + strings.Join(parts, ",") + "]"
	}
	return fmt.Sprintf("%v:%d", c["type"], len(elements))
}

// kinds is a signature without its element counts.
func kinds(signature string) string {
	var b strings.Builder
	skip := false
	for _, r := range signature {
		switch {
		case r == ':':
			skip = true
		case r == ',' || r == ']':
			skip = false
			b.WriteRune(r)
		case !skip:
			b.WriteRune(r)
		}
	}
	return b.String()
}

func testChartCorpus(t *testing.T, h *hosttest.Host) {
	var kindsMatched, elementsMatched int
	var misses []string
	for _, c := range chartCorpus {
		lines := h.Run(map[string]any{"code": "import numpy as np\nimport pandas as pd\nimport matplotlib.pyplot as plt\n" + c.code + "\nplt.show()"})
		if errs := hosttest.OfType(lines, "error"); len(errs) > 0 {
			misses = append(misses, fmt.Sprintf("%s: error %v", c.name, errs[0]))
			continue
		}
		var got []string
		for _, r := range hosttest.OfType(lines, "result") {
			if chart, ok := r["chart"].(map[string]any); ok {
				got = append(got, chartSignature(chart))
			}
		}
		if len(got) != 1 {
			misses = append(misses, fmt.Sprintf("%s: %d charts %v, want one", c.name, len(got), got))
			continue
		}
		if kinds(got[0]) == kinds(c.want) {
			kindsMatched++
		}
		if got[0] == c.want {
			elementsMatched++
		} else {
			misses = append(misses, fmt.Sprintf("%s: %s, want %s", c.name, got[0], c.want))
		}
	}
	t.Logf("chart corpus: %d figures, kinds matched %d, elements matched %d", len(chartCorpus), kindsMatched, elementsMatched)
	if len(misses) > 0 {
		t.Errorf("%d of %d cells differ:\n%s", len(misses), len(chartCorpus), strings.Join(misses, "\n"))
	}
}
