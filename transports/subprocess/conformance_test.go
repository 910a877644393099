package subprocess

import (
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
