package testkit

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
)

// Module is the module path; packages are built by import path so the tests'
// working directory does not matter.
const Module = "github.com/kernelhost/kernelhost"

// Root is the repository's root directory (for the .wat sources).
func Root() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// Plugins builds every transport plugin (plugins/cmd and the examples) into
// dir, as `make plugins` does into bin/plugins.
func Plugins(dir string) error {
	return Build(dir, "plugins/cmd/...", "plugins/examples/cmd/...")
}

// Build builds the commands pkgs (paths inside the module, such as
// "plugins/cmd/kernelhost-transport-subprocess") into the directory dir.
func Build(dir string, pkgs ...string) error {
	args := []string{"-o", dir + string(filepath.Separator)}
	for _, p := range pkgs {
		args = append(args, Module+"/"+p)
	}
	return goBuild(nil, args...)
}

// Kernelhost builds the kernelhost command to out; buildArgs go to go build
// (e.g. "-ldflags", "-X ...", as make build stamps the version).
func Kernelhost(out string, buildArgs ...string) error {
	return goBuild(nil, append(append([]string{"-o", out}, buildArgs...), Module+"/hostcmd")...)
}

// Denylist builds the example Go policy module to out, as `make policies`.
func Denylist(out string) error { return GoPolicy("denylist", out) }

// GoPolicy builds the Go policy module plugins/policy/examples/NAME to out,
// as `make policies` does.
func GoPolicy(name, out string) error {
	return goBuild([]string{"GOOS=wasip1", "GOARCH=wasm"}, "-buildmode=c-shared", "-trimpath", "-o", out, Module+"/plugins/policy/examples/"+name)
}

// ErrNoWat2wasm: wabt is not installed.
var ErrNoWat2wasm = errors.New("wat2wasm is not installed (apt-get install wabt; `make test` installs it)")

// Wat compiles src (relative to the repository root) to out with wat2wasm.
func Wat(src, out string) error {
	bin, err := exec.LookPath("wat2wasm")
	if err != nil {
		return ErrNoWat2wasm
	}
	if b, err := exec.Command(bin, filepath.Join(Root(), src), "-o", out).CombinedOutput(); err != nil {
		return fmt.Errorf("wat2wasm %s: %v\n%s", src, err, b)
	}
	return nil
}

func goBuild(env []string, args ...string) error {
	gocmd, err := exec.LookPath("go")
	if err != nil {
		gocmd = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	cmd := exec.Command(gocmd, append([]string{"build"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %v: %v\n%s", args, err, b)
	}
	return nil
}
