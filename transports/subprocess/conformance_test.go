package subprocess

import (
	"context"
	"testing"

	"go.uber.org/goleak"

	"github.com/kernelhost/kernelhost/core"
	"github.com/kernelhost/kernelhost/transports/testkit"
	"github.com/kernelhost/kernelhost/transports/transporttest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newTransport(t *testing.T) core.Transport { return New(Options{}) }

func TestConformancePython(t *testing.T) {
	transporttest.Run(t, newTransport, transporttest.Python)
}

func TestConformanceBash(t *testing.T) {
	transporttest.Run(t, newTransport, transporttest.Bash)
}

func TestConformanceJavaScript(t *testing.T) {
	testkit.NeedCommand(t, "node", "nodejs")
	transporttest.Run(t, newTransport, transporttest.JavaScript)
}

func TestConformanceTypeScript(t *testing.T) {
	testkit.NeedCommand(t, "node", "nodejs")
	transporttest.Run(t, newTransport, transporttest.TypeScript)
}

func TestConformanceR(t *testing.T) {
	testkit.NeedCommand(t, "Rscript", "r-base-core")
	transporttest.Run(t, newTransport, transporttest.R)
}

func TestConformanceJava(t *testing.T) {
	testkit.NeedCommand(t, "java", "default-jdk-headless")
	transporttest.Run(t, newTransport, transporttest.Java)
}

// pooledTransportForSuite is a Transport whose kernels all take pooled
// interpreters: it keeps a pool of one for lang in a directory of the
// test's, and starts every kernel there (the engine cases apply their cwd
// with the engine's snippet, as after any start).
type pooledTransportForSuite struct {
	*Transport
	dir string
}

func (p pooledTransportForSuite) StartKernel(ctx context.Context, spec core.KernelSpec) (core.Kernel, error) {
	spec.Cwd = p.dir
	return p.Transport.StartKernel(ctx, spec)
}

func newPooledTransport(lang string) func(t *testing.T) core.Transport {
	return func(t *testing.T) core.Transport {
		dir := t.TempDir()
		tr := New(Options{PoolSizes: map[string]int{lang: 1}, PoolCwd: dir})
		t.Cleanup(func() { _ = tr.Close() })
		return pooledTransportForSuite{tr, dir}
	}
}

// The conformance suite on kernels that took pooled interpreters.
func TestConformancePythonPooled(t *testing.T) {
	transporttest.Run(t, newPooledTransport("python"), transporttest.Python)
}

func TestConformanceJavaScriptPooled(t *testing.T) {
	testkit.NeedCommand(t, "node", "nodejs")
	transporttest.Run(t, newPooledTransport("javascript"), transporttest.JavaScript)
}
