package subprocess

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/kernelhost/kernelhost/core"
	"github.com/kernelhost/kernelhost/internal/testkit"
	"github.com/kernelhost/kernelhost/transports/transporttest"
)

// TestMain: the parallel tests spend their time waiting on interpreters
// (starts, sleeps in cells, bounds that must expire), so more of them run at
// once than go test's default of one per core.
func TestMain(m *testing.M) {
	testkit.WaitingParallel(parallelTests)
	goleak.VerifyTestMain(m)
}

// parallelTests is how many parallel tests run at once, unless -parallel says.
const parallelTests = 4

func newTransport(t *testing.T) core.Transport { return New(Options{}) }

// Each conformance suite is a parallel test: its cases run beside the other
// suites' cases (go test's -parallel bounds how many at once), not after them.
func TestConformancePython(t *testing.T) {
	t.Parallel()
	transporttest.Run(t, newTransport, transporttest.Python())
}

func TestConformanceBash(t *testing.T) {
	t.Parallel()
	transporttest.Run(t, newTransport, transporttest.Bash())
}

func TestConformanceJavaScript(t *testing.T) {
	t.Parallel()
	testkit.NeedCommand(t, "node", "nodejs")
	transporttest.Run(t, newTransport, transporttest.JavaScript())
}

func TestConformanceTypeScript(t *testing.T) {
	t.Parallel()
	testkit.NeedCommand(t, "node", "nodejs")
	transporttest.Run(t, newTransport, transporttest.TypeScript())
}

func TestConformanceR(t *testing.T) {
	t.Parallel()
	testkit.NeedCommand(t, "Rscript", "r-base-core")
	transporttest.Run(t, newTransport, transporttest.R())
}

func TestConformanceJava(t *testing.T) {
	t.Parallel()
	testkit.NeedCommand(t, "java", "default-jdk-headless")
	transporttest.Run(t, newTransport, transporttest.Java())
}

// newPooledTransport returns Transports that keep a pool of one for lang,
// started in a directory of the test's: every kernel of the suite starts in
// a temporary directory of its own, so each takes a pooled interpreter moved
// there on hand-out (when the pool has refilled by then; else it starts
// cold, as a host's would).
func newPooledTransport(lang string) func(t *testing.T) core.Transport {
	return func(t *testing.T) core.Transport {
		tr := New(Options{PoolSizes: map[string]int{lang: 1}, PoolCwd: t.TempDir()})
		t.Cleanup(func() { _ = tr.Close() })
		return tr
	}
}

// The conformance suite on kernels that took pooled interpreters.
func TestConformancePythonPooled(t *testing.T) {
	t.Parallel()
	transporttest.Run(t, newPooledTransport("python"), transporttest.Python())
}

func TestConformanceJavaScriptPooled(t *testing.T) {
	t.Parallel()
	testkit.NeedCommand(t, "node", "nodejs")
	transporttest.Run(t, newPooledTransport("javascript"), transporttest.JavaScript())
}

func TestConformanceTypeScriptPooled(t *testing.T) {
	t.Parallel()
	testkit.NeedCommand(t, "node", "nodejs")
	transporttest.Run(t, newPooledTransport("typescript"), transporttest.TypeScript())
}
