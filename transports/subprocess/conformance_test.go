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
	if _, err := exec.LookPath("node"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("node is not on PATH: %v", err)
		}
		t.Skip("node is not on PATH")
	}
}
