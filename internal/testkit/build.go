package testkit

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
)

// Module is the module path; packages are built by import path so the tests'
// working directory does not matter.
const Module = "github.com/kernelhost/kernelhost"

// Root is the repository's root directory (for the .wat sources).
func Root() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// Plugins builds every transport plugin (plugins/cmd and the examples), as
// `make plugins` does into bin/plugins (those of plugins/cmd with
// RuntimeLDFlags), into a directory the test binaries of this checkout
// share, and returns that directory. Several test binaries
// run the plugins and `make test` starts them side by side; go build
// relinks a plugin only when the one already in the directory was built
// from other sources, so each is linked once rather than once per test
// binary (each link is seconds of CPU). Builders take turns under a lock
// file beside the directory, so the second finds the first's plugins up to
// date. The directory is keyed by the checkout's root: checkouts tested at
// once do not replace each other's plugins. Tests must not write into it
// (hard-link the plugins into a directory of their own to add files).
func Plugins() (string, error) {
	sum := sha256.Sum256([]byte(Root()))
	dir := filepath.Join(os.TempDir(), fmt.Sprintf("kernelhost-test-plugins-%d-%x", os.Getuid(), sum[:6]))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	lock, err := os.OpenFile(dir+".lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return "", err
	}
	defer lock.Close() // releases the lock
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", fmt.Errorf("lock %s: %w", dir, err)
	}
	if err := goBuild(nil, "-ldflags", RuntimeLDFlags, "-o", dir+string(filepath.Separator), Module+"/plugins/cmd/..."); err != nil {
		return dir, err
	}
	return dir, Build(dir, "plugins/examples/cmd/...")
}

// RuntimeLDFlags are the Makefile's RUNTIME_LDFLAGS, which make gives the
// host and the transport plugins: the Go runtime's default GODEBUG (the
// Makefile says why). Kernelhost and Plugins build with them too, as a
// user's make does; TestInstall checks that make's binaries carry the same.
const RuntimeLDFlags = "-X=runtime.godebugDefault=schedtrace=2147483647"

// Build builds the commands pkgs (paths inside the module, such as
// "plugins/cmd/kernelhost-transport-subprocess") into the directory dir.
func Build(dir string, pkgs ...string) error {
	args := []string{"-o", dir + string(filepath.Separator)}
	for _, p := range pkgs {
		args = append(args, Module+"/"+p)
	}
	return goBuild(nil, args...)
}

// Kernelhost builds the kernelhost command to out with RuntimeLDFlags and
// the linker flags ldflags (e.g. "-X ...", as make build stamps the version).
func Kernelhost(out string, ldflags ...string) error {
	flags := strings.Join(append([]string{RuntimeLDFlags}, ldflags...), " ")
	return goBuild(nil, "-ldflags", flags, "-o", out, Module+"/hostcmd")
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

// PluginsIn hard-links the plugins Plugins built into dir (made if missing),
// for a layout that needs them in a directory of its own: bin/plugins beside
// a kernelhost binary, which finds its plugins there.
func PluginsIn(dir string) error {
	built, err := Plugins()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	entries, err := os.ReadDir(built)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if err := os.Link(filepath.Join(built, e.Name()), filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return nil
}
