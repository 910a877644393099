// Package jupyterdeploy holds the kernel specs kernelhost recommends for the
// Jupyter servers it talks to (docs/jupyter.md): kernels/python3 is
// ipykernel with unbounded ZeroMQ send queues, so that a server that falls
// behind the kernel loses no IOPub message. `make run-jupyter` installs it
// into the server it starts, jupytertest into every test server, and
// operators copy it into their own (jupyter kernelspec install).
package jupyterdeploy

import (
	"embed"
	"io/fs"
	"os"
	"path/filepath"
)

//go:embed kernels
var kernels embed.FS

// WriteKernelSpecs writes every kernel spec of kernels/ into dataDir/kernels
// (a JUPYTER_DATA_DIR, which the server searches before the system's, so
// python3 there shadows the system's spec).
func WriteKernelSpecs(dataDir string) error {
	return fs.WalkDir(kernels, "kernels", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
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
