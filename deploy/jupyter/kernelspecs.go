// Package jupyterdeploy holds the kernel specs kernelhost recommends for the
// Jupyter servers it talks to (docs/jupyter.md): kernels/python3 is
// ipykernel with unbounded ZeroMQ send queues, and kernels/ir IRkernel, each
// kernel in a bwrap sandbox (kernels/python3/sandbox.py, which both use).
// `make run-jupyter` installs them into the server it starts, jupytertest
// into every test server, and operators copy them into their own (jupyter
// kernelspec install).
package jupyterdeploy

import (
	"embed"
	"io/fs"
	"os"
	"path/filepath"
)

//go:embed kernels
var kernels embed.FS

// WriteKernelSpecs writes the kernel specs of kernels/ into dataDir/kernels
// (a JUPYTER_DATA_DIR, which the server searches before the system's, so
// python3 and ir there shadow the system's specs). ir is written only where
// the system has an ir spec (IRkernel is installed): it sandboxes that
// kernel, and offers no R where there is none.
func WriteKernelSpecs(dataDir string) error {
	return fs.WalkDir(kernels, "kernels", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path == "kernels/ir" && !systemHasSpec("ir") {
			return fs.SkipDir
		}
		dst := filepath.Join(dataDir, filepath.FromSlash(path))
		if d.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		b, err := kernels.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(dst, b, 0o644)
	})
}

// systemHasSpec says whether the system has a kernel spec called name, in
// jupyter's system data dirs, where Debian's packages (and pip as root)
// install them.
func systemHasSpec(name string) bool {
	for _, d := range []string{"/usr/share/jupyter/kernels", "/usr/local/share/jupyter/kernels"} {
		if _, err := os.Stat(filepath.Join(d, name, "kernel.json")); err == nil {
			return true
		}
	}
	return false
}
