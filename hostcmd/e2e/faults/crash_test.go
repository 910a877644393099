package faults_test

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kernelhost/kernelhost/hostcmd/internal/hosttest"
	"github.com/kernelhost/kernelhost/internal/testkit"
)

// A python kernel that crashes natively (a segfault in C code) on the
// subprocess transport: the stream ends with KernelDied within a second or
// so, saying what died and how and that the context gets a new kernel, and
// no core dump was written. The test raises its own soft RLIMIT_CORE first,
// as a shell with `ulimit -c unlimited` or a systemd unit would: a kernel
// with pandas and matplotlib loaded would then dump ~100 MB, holding the
// death back for minutes on a slow disk (transports/subprocess/coredump.go).
// It allows 3 s: CI runs it beside three other test binaries on two cores
// (1.4 s seen), and a dump is slower by far.
func TestFaultInterpreterCrashesNatively(t *testing.T) {
	hosttest.NoLeftovers(t)
	testkit.NeedPythonModules(t, testkit.DebianPython, "matplotlib", "pandas")
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_CORE, &lim); err != nil {
		t.Fatalf("getrlimit: %v", err)
	}
	saved := lim
	lim.Cur = lim.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_CORE, &lim); err != nil {
		t.Fatalf("setrlimit: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Setrlimit(syscall.RLIMIT_CORE, &saved) })

	h := hosttest.Start(t, hosttest.DefaultNetwork, hosttest.OnDebianPython) // processes left: pasta too
	for _, crash := range []string{"import ctypes; ctypes.string_at(0)", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"} {
		// A kernel of the size a plotting session has (the first execution
		// after a crash also starts the new kernel: not timed).
		hosttest.NoError(t, h.Run(map[string]any{"code": "import ctypes, os, signal, pandas, matplotlib.pyplot"}))
		began := time.Now()
		lines := h.Run(map[string]any{"code": crash})
		took := time.Since(began)
		e := hosttest.OnlyError(t, lines)
		hosttest.Figure(t, "%q: stream ended %s after the request with %s: %q", crash, took.Round(time.Millisecond), e.Str("name"), e.Str("value"))
		v := e.Str("value")
		if e.Str("name") != "KernelDied" || !strings.Contains(v, "python interpreter (pid ") ||
			!strings.Contains(v, "killed by signal 11 (segmentation fault)") || !strings.Contains(v, "replaced by a new one") {
			t.Fatalf("error line %v, want KernelDied saying the python interpreter was killed by signal 11 and is replaced", e)
		}
		// Reported by the interpreter's exit, not by a timeout: within
		// seconds, with room for CI's load.
		if took > 15*time.Second {
			t.Fatalf("the crash was reported %s after the request, want within seconds", took)
		}
		cores, _ := filepath.Glob(filepath.Join(h.Cwd(), "core*"))
		if len(cores) > 0 {
			for _, c := range cores {
				_ = os.Remove(c)
			}
			t.Fatalf("the crash left a core dump: %v", cores)
		}
	}
	if got := hosttest.Stdout(h.Run(map[string]any{"code": "print(1 + 1)"})); !strings.HasSuffix(got, "2\n") {
		t.Fatalf("after the crashes the context runs cells again: stdout %q", got)
	}
}
