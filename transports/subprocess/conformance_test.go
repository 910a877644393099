package subprocess

import (
	"context"
	"os"
	"os/exec"
	"testing"

	"go.uber.org/goleak"

	"github.com/kernelhost/kernelhost/core"
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
	needNode(t)
	transporttest.Run(t, newTransport, transporttest.JavaScript)
}

func TestConformanceTypeScript(t *testing.T) {
	needNode(t)
	transporttest.Run(t, newTransport, transporttest.TypeScript)
}

// needNode skips a test without node, except under CI, where it fails.
func needNode(t *testing.T) {
	t.Helper()
	needInterpreter(t, "node", "nodejs")
}

// needInterpreter skips t when the interpreter is not installed, or fails it
// under CI, where `make test` installs it (from debianPackage).
func needInterpreter(t testing.TB, name, debianPackage string) {
	t.Helper()
	if _, err := exec.LookPath(name); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s is not installed (Debian package %s; make deps installs it)", name, debianPackage)
		}
		t.Skipf("%s is not installed (Debian package %s)", name, debianPackage)
	}
}

func TestConformanceR(t *testing.T) {
	needInterpreter(t, "Rscript", "r-base-core")
	transporttest.Run(t, newTransport, transporttest.R)
}

func TestConformanceJava(t *testing.T) {
	needInterpreter(t, "java", "default-jdk-headless")
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
	needNode(t)
	transporttest.Run(t, newPooledTransport("javascript"), transporttest.JavaScript)
}
