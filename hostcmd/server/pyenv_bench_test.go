package server_test

import (
	"testing"

	"github.com/kernelhost/kernelhost/hostcmd/internal/hosttest"
	"github.com/kernelhost/kernelhost/hostcmd/server"
	"github.com/kernelhost/kernelhost/internal/testkit"
)

// BenchmarkPythonEnvPlainCell measures what the kernel environment costs a
// cell that does not plot: `1+1` over HTTP on a host that applies it and on
// one that does not, both on Debian's python through the subprocess driver,
// alternating in one loop. It reports both medians and their difference.
func BenchmarkPythonEnvPlainCell(b *testing.B) {
	testkit.NeedPythonModules(b, testkit.DebianPython, "IPython", "matplotlib", "pandas", "PIL")
	restore := server.WithoutKernelEnv()
	without := hosttest.Start(b, hosttest.OnDebianPython)
	restore()
	compareRoundTrips(b, "python-env", hosttest.Start(b, hosttest.OnDebianPython), "no-env", without)
}
