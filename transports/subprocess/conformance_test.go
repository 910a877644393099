package subprocess

import (
	"flag"
	"testing"

	"go.uber.org/goleak"

	"github.com/kernelhost/kernelhost/core"
	"github.com/kernelhost/kernelhost/internal/testkit"
	"github.com/kernelhost/kernelhost/transports/transporttest"
)

// TestMain: the parallel tests spend their time waiting on interpreters
// (starts, sleeps in cells, bounds that must expire), so more of them run at
// once than go test's default of one per core. python3 is reached without
// pyenv's shim (testkit.SkipPythonShim). Their sandboxes have no
// network stack unless a test names one (unsetNetwork): the network's
// tests (network_test.go, family_test.go) do. Benchmarks keep the
// default, isolated, which is what they measure.
func TestMain(m *testing.M) {
	testkit.WaitingParallel(parallelTests)
	testkit.SkipPythonShim()
	if flag.Lookup("test.bench").Value.String() == "" {
		unsetNetwork = NetworkNone
	}
	goleak.VerifyTestMain(m)
}

// parallelTests is how many parallel tests run at once, unless -parallel says.
const parallelTests = 4

func newTransport(t *testing.T) core.Transport { return New(Options{}) }

// TestConformance runs the conformance suite on each language a driver
// registers (register), fresh and, where its driver can move a pooled
// interpreter into another cwd, pooled: a new language runs it as it is
// registered, with its snippets from transporttest.Snippets. Each suite is
// a parallel subtest: its cases run beside the other suites' cases (go
// test's -parallel bounds how many at once), not after them.
// The cases that need no kernel of their own share one
// (transporttest.RunSharing): a JVM with jshell costs about a CPU-second to
// start, and the suite runs for six languages, five of them twice.
func TestConformance(t *testing.T) {
	t.Parallel()
	probe := New(Options{})
	t.Cleanup(func() { _ = probe.Close() })
	for _, def := range languages {
		t.Run(def.name, func(t *testing.T) {
			t.Parallel()
			transporttest.RunSharing(t, newTransport, conformanceSnippets(t, def))
		})
		if lang, ok := probe.langs[def.name]; !ok || lang.drv.cwdRecord("/") == nil {
			continue // its pool serves only the pool's cwd: the suite's kernels start elsewhere
		}
		t.Run(def.name+"-pooled", func(t *testing.T) {
			t.Parallel()
			transporttest.RunSharing(t, newPooledTransport(def.name), conformanceSnippets(t, def))
		})
	}
}

// conformanceSnippets are the suite's snippets for def, whose interpreter
// must be installed (testkit.Missingf says so otherwise).
func conformanceSnippets(t *testing.T, def langDef) transporttest.LanguageSnippets {
	t.Helper()
	snippets, ok := transporttest.Snippets(def.name)
	if !ok {
		t.Fatalf("transporttest has no snippets for %s: add them (transports/transporttest/snippets.go)", def.name)
	}
	testkit.NeedCommand(t, def.interpreter.Default, def.interpreter.DebianPackage)
	return snippets
}

// newPooledTransport returns Transports that keep a pool of one for lang,
// started in a directory of the test's: every kernel of the suite starts in
// a temporary directory of its own, so each takes a pooled interpreter moved
// there on hand-out (when the pool has refilled by then; else it starts
// cold, as a host's would).
func newPooledTransport(lang string) func(t *testing.T) core.Transport {
	return func(t *testing.T) core.Transport {
		tr := New(Options{PoolSizes: map[string]int{lang: 1}, PoolCwd: t.TempDir()})
		t.Cleanup(func() { _ = tr.Close() })
		return tr
	}
}
