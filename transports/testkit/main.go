package testkit

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// Main is a package's TestMain: it makes a temporary directory, calls setup
// with it to build what the tests run (setup may be nil), runs the tests,
// removes the directory, and fails a passing run that left goroutines
// running. A setup error fails the run before any test runs. Main does not
// return.
func Main(m *testing.M, setup func(dir string) error) {
	os.Exit(run(m, setup))
}

func run(m *testing.M, setup func(dir string) error) int {
	dir, err := os.MkdirTemp("", "kernelhost-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	code := func() int {
		defer os.RemoveAll(dir)
		if setup != nil {
			if err := setup(dir); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
		}
		return m.Run()
	}()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak: leaked goroutines after the tests:", err)
			code = 1
		}
	}
	return code
}
