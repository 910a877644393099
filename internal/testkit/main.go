package testkit

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"

	"go.uber.org/goleak"
)

// Main is a package's TestMain: it takes python3 on PATH without a launcher
// (SkipPythonShim), makes a temporary directory, calls setup
// with it to build what the tests run (setup may be nil), runs the tests,
// runs the AfterTests functions, removes the directory, and fails a passing
// run that left goroutines running. A setup error fails the run before any test runs. Main does not
// return.
func Main(m *testing.M, setup func(dir string) error) {
	os.Exit(run(m, setup))
}

func run(m *testing.M, setup func(dir string) error) int {
	SkipPythonShim()
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
		code := m.Run()
		runAfterTests()
		return code
	}()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak: leaked goroutines after the tests:", err)
			code = 1
		}
	}
	return code
}

var afterTests struct {
	mu  sync.Mutex
	fns []func()
}

// AfterTests registers f to run once all of the package's tests are done
// (Main runs it, before its goroutine-leak check; the last registered runs
// first). Fixtures that tests share, such as jupytertest.Shared's server,
// stop there.
func AfterTests(f func()) {
	afterTests.mu.Lock()
	defer afterTests.mu.Unlock()
	afterTests.fns = append(afterTests.fns, f)
}

func runAfterTests() {
	afterTests.mu.Lock()
	fns := afterTests.fns
	afterTests.fns = nil
	afterTests.mu.Unlock()
	for i := len(fns) - 1; i >= 0; i-- {
		fns[i]()
	}
}

// WaitingParallel makes n the number of parallel tests the package's test
// binary runs at once, unless go test's -parallel was given. Call it from
// TestMain, before Main. go test's default is GOMAXPROCS, which suits tests
// that compute; it leaves most of a machine idle for a package whose
// parallel tests spend their time waiting on interpreters, kernels and
// servers (a kernel's start, a sleep in a cell, a bound that must expire).
func WaitingParallel(n int) {
	if !flag.Parsed() {
		flag.Parse()
	}
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given {
		if err := flag.Set("test.parallel", strconv.Itoa(n)); err != nil {
			panic(err)
		}
	}
}
