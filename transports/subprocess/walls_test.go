package subprocess

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kernelhost/kernelhost/internal/testkit"
	tt "github.com/kernelhost/kernelhost/transports/transporttest"
)

// knobProbe writes back, to each kernel knob, exactly the value it just
// read: it changes nothing even where the write goes through (today's
// main, as root), and the test only asserts that the write fails. The
// SysRq trigger cannot be read: it is only opened for writing, and closed
// with nothing written (`:` writes nothing).
const knobProbe = `for f in /proc/sys/kernel/core_pattern /proc/sys/kernel/hostname /sys/kernel/mm/ksm/run; do
  if [ ! -e "$f" ]; then echo "$f: absent"; continue; fi
  v=$(cat "$f") || { echo "$f: unreadable"; continue; }
  if err=$( { printf '%s\n' "$v" > "$f"; } 2>&1 ); then echo "$f: WRITTEN"; else echo "$err"; fi
done
if [ -e /proc/sysrq-trigger ]; then
  if err=$( { : > /proc/sysrq-trigger; } 2>&1 ); then echo "/proc/sysrq-trigger: OPENED"; else echo "$err"; fi
fi
echo knob-probe-done
`

// knobCells run the probe (saved as knobs.sh in the cell's cwd) from a
// cell of each language: a child of the interpreter, in its sandbox.
var knobCells = map[string]string{
	"bash":       "bash knobs.sh",
	"python":     "import subprocess\nprint(subprocess.run(['bash', 'knobs.sh'], capture_output=True, text=True).stdout)",
	"javascript": "console.log(require('child_process').execFileSync('bash', ['knobs.sh']).toString())",
	"r":          "cat(system2('bash', 'knobs.sh', stdout = TRUE), sep = '\\n')",
	"java":       "System.out.println(new String(new ProcessBuilder(\"bash\", \"knobs.sh\").redirectErrorStream(true).start().getInputStream().readAllBytes()));",
}

// wantKnobsReadOnly runs the probe in k and fails the test for each knob
// whose write did not fail as a read-only file system's (or, for a host
// that is not root, for lack of permission: the knobs are root's).
func wantKnobsReadOnly(t *testing.T, what string, k *Kernel, lang string) {
	t.Helper()
	out := stdoutOf(t, k, knobCells[lang])
	t.Logf("%s: %s", what, strings.ReplaceAll(strings.TrimSpace(out), "\n", "; "))
	if !strings.Contains(out, "knob-probe-done") {
		t.Fatalf("%s: the probe did not finish: %q", what, out)
	}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if line == "knob-probe-done" || strings.HasSuffix(line, ": absent") {
			continue
		}
		readOnly := strings.Contains(line, "Read-only file system")
		if !readOnly && (os.Getuid() == 0 || !strings.Contains(line, "Permission denied")) {
			t.Errorf("%s: a kernel knob is not read-only: %s", what, line)
		}
	}
}

// A cell writes the kernel's knobs (sysctls as core_pattern, /sys, the
// SysRq trigger) from every kind of sandboxed context: each language
// started by bwrap, python taken from the warm pool, started cold,
// restarted, forked from the template and restarted there. Every write
// fails as read-only.
func TestSandboxKernelKnobsReadOnly(t *testing.T) {
	needSandbox(t)
	dir := t.TempDir()
	testkit.WriteFile(t, filepath.Join(dir, "knobs.sh"), knobProbe)
	sandbox := SandboxOptions{Mode: SandboxOn, Writable: []string{dir}}
	pooled := New(Options{Python: testkit.DebianPython, PoolSizes: map[string]int{"python": 1}, PoolCwd: dir, Sandbox: sandbox})
	t.Cleanup(func() { _ = pooled.Close() })
	ready := readyPid(t, pooled, "python")
	k := startIn(t, pooled, "python", dir)
	if k.Pid() != ready {
		t.Fatalf("the python context (pid %d) is not the warm pool's (pid %d)", k.Pid(), ready)
	}
	wantKnobsReadOnly(t, "python, pooled", k, "python")
	for lang, cmd := range map[string][2]string{"bash": {"bash", "bash"}, "javascript": {"node", "nodejs"}, "r": {"Rscript", "r-base-core"}, "java": {"java", "default-jdk-headless"}} {
		if _, ok := pooled.langs[lang]; !ok {
			testkit.NeedCommand(t, cmd[0], cmd[1])
		}
		wantKnobsReadOnly(t, lang, startIn(t, pooled, lang, dir), lang)
	}

	cold := New(Options{Python: testkit.DebianPython, PoolCwd: dir, Sandbox: sandbox})
	t.Cleanup(func() { _ = cold.Close() })
	k = startIn(t, cold, "python", dir)
	wantKnobsReadOnly(t, "python, cold", k, "python")
	restartKernel(t, k)
	wantKnobsReadOnly(t, "python, cold, restarted", k, "python")

	forked, fdir := sandboxedForkTransport(t, []string{"json"})
	testkit.WriteFile(t, filepath.Join(fdir, "knobs.sh"), knobProbe)
	tmpl := readyTemplate(t, forked)
	k = startIn(t, forked, "python", fdir)
	mustBeForkedFrom(t, k, tmpl)
	wantKnobsReadOnly(t, "python, forked", k, "python")
	restartKernel(t, k)
	wantKnobsReadOnly(t, "python, forked, restarted", k, "python")
}

// restartKernel restarts k (bounded).
func restartKernel(t *testing.T, k *Kernel) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), tt.StartTimeout)
	defer cancel()
	if err := k.Restart(ctx); err != nil {
		t.Fatalf("restart: %v", err)
	}
}
