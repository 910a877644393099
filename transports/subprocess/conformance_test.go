package subprocess

import (
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
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("node is not on PATH")
	}
	transporttest.Run(t, newTransport, transporttest.JavaScript)
}
