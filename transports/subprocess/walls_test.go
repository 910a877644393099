package subprocess

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kernelhost/kernelhost/internal/testkit"
	"github.com/kernelhost/kernelhost/transports/subprocess/internal/sandbox"
	tt "github.com/kernelhost/kernelhost/transports/transporttest"
)

// knobProbe writes back, to each kernel knob, exactly the value it just
// read: it changes nothing even where the write goes through (today's
// main, as root), and the test only asserts that the write fails. The
// SysRq trigger and the others of the second list are only opened for
// writing, without truncating (>>), and closed with nothing written (`:`
// writes nothing).
const knobProbe = `for f in /proc/sys/kernel/core_pattern /proc/sys/kernel/hostname /sys/kernel/mm/ksm/run; do
  if [ ! -e "$f" ]; then echo "$f: absent"; continue; fi
  v=$(cat "$f") || { echo "$f: unreadable"; continue; }
  if err=$( { printf '%s\n' "$v" > "$f"; } 2>&1 ); then echo "$f: WRITTEN"; else echo "$err"; fi
done
for f in /proc/sysrq-trigger /proc/mtrr /proc/acpi/wakeup /proc/irq/default_smp_affinity; do
  if [ ! -e "$f" ]; then echo "$f: absent"; continue; fi
  if err=$( { : >> "$f"; } 2>&1 ); then echo "$f: OPENED"; else echo "$err"; fi
done
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
	pooled := New(Options{Interpreters: map[string]string{"python": testkit.DebianPython}, PoolSizes: map[string]int{"python": 1}, PoolCwd: dir, Sandbox: sandbox})
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

	cold := New(Options{Interpreters: map[string]string{"python": testkit.DebianPython}, PoolCwd: dir, Sandbox: sandbox})
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

// A template replaced after a package change (the user installed a
// package) is started by bwrap as the first was: a context forked
// from the new one finds the knobs read-only too.
func TestKernelKnobsReadOnlyAfterTemplateReplaced(t *testing.T) {
	needSandbox(t)
	userBase := t.TempDir()
	tr, dir := forkTransport(t, forkMode{sandbox: SandboxOn}, []string{"six"}, []string{"PYTHONUSERBASE=" + userBase}, userBase)
	testkit.WriteFile(t, filepath.Join(dir, "knobs.sh"), knobProbe)
	old := readyTemplate(t, tr)
	k := startIn(t, tr, "python", dir)
	site := strings.TrimSpace(stdoutOf(t, k, "import site; print(site.getusersitepackages())"))
	if err := os.MkdirAll(site, 0o755); err != nil {
		t.Fatal(err)
	}
	// pip install --user of another package: the import path changed.
	testkit.WriteFile(t, filepath.Join(site, "kh_other.py"), "KH = 'user'\n")
	startIn(t, tr, "python", dir) // finds the template stale
	next := readyTemplate(t, tr)
	if next == old {
		t.Fatalf("the stale template (pid %d) still serves", old)
	}
	k = startIn(t, tr, "python", dir)
	mustBeForkedFrom(t, k, next)
	wantKnobsReadOnly(t, "python, forked from a replaced template", k, "python")
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

// plantUserSite gives the user (a home of the test's own: HOME is set)
// a usercustomize.py and a .pth file in python's user site, each of which
// leaves a file in every one of dirs it can write: in a sandbox, the
// host's /tmp (where the test's temporary directories are) is hidden,
// its own workspace is not.
func plantUserSite(t *testing.T, dirs ...string) {
	t.Helper()
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("XDG_CACHE_HOME", "") // the driver cache in the new home: compiled anew
	t.Setenv("PYTHONUSERBASE", "")
	out, err := exec.Command(testkit.DebianPython, "-c", "import site; print(site.getusersitepackages())").Output()
	if err != nil {
		t.Fatal(err)
	}
	site := strings.TrimSpace(string(out))
	if !strings.HasPrefix(site, home) {
		t.Fatalf("the user site %s is not in the test's home %s", site, home)
	}
	if err := os.MkdirAll(site, 0o755); err != nil {
		t.Fatal(err)
	}
	var lits []string
	for _, d := range dirs {
		lits = append(lits, pythonLiteral(d))
	}
	plant := "[open(os.path.join(d, '%s-%d' % (NAME, os.getpid())), 'w').close() for d in (" + strings.Join(lits, ", ") + ",) if os.access(d, os.W_OK)]"
	testkit.WriteFile(t, filepath.Join(site, "usercustomize.py"), "import os\n"+strings.ReplaceAll(plant, "NAME", "'usercustomize'")+"\n")
	testkit.WriteFile(t, filepath.Join(site, "kh-planted.pth"), "import os; "+strings.ReplaceAll(plant, "NAME", "'pth'")+"\n")
}

// markers lists the files the planted code left in dir.
func markers(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// Issue 39: a usercustomize.py or a .pth a cell saved in ~/.local ran as
// the host (root) in the host's compile of the python driver, at the
// next start of the transport. Now the compile loads no site and runs in
// a sandbox: the planted code runs in contexts (the user site is theirs,
// as on one machine), never where the host's /tmp is visible: not at the
// first start, not at a recompile after a restart, not in a new
// transport.
func TestHostRunsNoPlantedUserSite(t *testing.T) {
	needSandbox(t)
	hostOnly, ws := t.TempDir(), t.TempDir()
	plantUserSite(t, hostOnly, ws)
	start := func() (*Transport, *Kernel) {
		tr := New(Options{Interpreters: map[string]string{"python": testkit.DebianPython}, PoolCwd: ws, Sandbox: SandboxOptions{Mode: SandboxOn, Writable: []string{ws}}})
		t.Cleanup(func() { _ = tr.Close() })
		return tr, startIn(t, tr, "python", ws)
	}
	tr, k := start()
	if got := markers(t, ws); len(got) < 2 {
		t.Fatalf("the planted user site did not run in the sandboxed context (it left %q): the test plants nothing", got)
	}
	// The compiled driver tampered with: the next start compiles it anew.
	d := tr.langs["python"].drv.(pythonLang).cache
	if err := os.WriteFile(d.file, []byte("tampered"), 0o600); err != nil {
		t.Fatal(err)
	}
	restartKernel(t, k)
	_ = tr.Close()
	start()
	if got := markers(t, hostOnly); len(got) > 0 {
		t.Errorf("code planted in the user site ran outside a sandbox: %q", got)
	}
}

// Without a sandbox (-sandbox=off) the compile still loads no site: the
// host's run of its own is never the one that runs planted code.
func TestPythonDriverCompileLoadsNoSite(t *testing.T) {
	marks := t.TempDir()
	plantUserSite(t, marks)
	d := newPythonDriver(context.Background(), testkit.DebianPython, sandbox.Tools(nil, os.Environ()))
	if args, err := d.prepare(); err != nil || d.file == "" {
		t.Fatalf("prepare: %v %v: the driver was not compiled", args, err)
	}
	if got := markers(t, marks); len(got) > 0 {
		t.Errorf("the host's compile ran code planted in the user site: %q", got)
	}
}

// A bwrap planted in ~/.local/bin (writable in every sandbox, and on many
// users' PATH before /usr/bin) is never the one the host runs.
func TestPlantedBwrapIsNotRun(t *testing.T) {
	needSandbox(t)
	real, _ := sandbox.Works()
	marks := t.TempDir()
	home := t.TempDir()
	t.Setenv("HOME", home)
	bin := filepath.Join(home, ".local", "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, "bwrap"), []byte("#!/bin/sh\ntouch "+filepath.Join(marks, "planted-bwrap")+"\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+string(filepath.ListSeparator)+os.Getenv("PATH"))
	sb, err := sandbox.Probe()
	if err != nil {
		t.Fatal(err)
	}
	if sb.Bwrap() != real.Bwrap() {
		t.Errorf("the host found bwrap at %s, want %s", sb.Bwrap(), real.Bwrap())
	}
	if got := markers(t, marks); len(got) > 0 {
		t.Errorf("the planted bwrap ran: %q", got)
	}
}

// Issue 39: with -access-token-file set, a cell read the token file (the
// host's files are readable, read-only), and CREDENTIALS_DIRECTORY was in
// every interpreter's environment. The host's own files (the token file,
// the config file) and the service's credentials directory are hidden in
// every sandbox (pooled, cold, forked, restarted), even under a writable
// path, and no variable of the service's reaches an interpreter.
func TestSandboxHidesHostPaths(t *testing.T) {
	const secret = "host-secret-39"
	ws := t.TempDir()
	host, creds := filepath.Join(ws, "host"), filepath.Join(ws, "credentials")
	for _, dir := range []string{host, creds} {
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	token, config := filepath.Join(host, "token"), filepath.Join(host, "kernelhost.toml")
	// One outside the writable paths, under the host's /tmp, which a
	// context whose cwd is there sees (read-only).
	outside := t.TempDir()
	other := filepath.Join(outside, "jupyter-token")
	testkit.WriteFile(t, other, secret)
	testkit.WriteFile(t, token, secret)
	testkit.WriteFile(t, config, "access-token = \""+secret+"\"\n")
	testkit.WriteFile(t, filepath.Join(creds, "access-token"), secret)
	t.Setenv("CREDENTIALS_DIRECTORY", creds)
	t.Setenv("INVOCATION_ID", secret)
	t.Setenv("NOTIFY_SOCKET", "/run/systemd/notify-"+secret)
	probe := `import os
found = [k for k, v in os.environ.items() if ` + pythonLiteral(secret) + ` in v or k in ('CREDENTIALS_DIRECTORY', 'INVOCATION_ID', 'NOTIFY_SOCKET')]
for path in (` + pythonLiteral(token) + `, ` + pythonLiteral(config) + `, ` + pythonLiteral(filepath.Join(creds, "access-token")) + `):
    try:
        if ` + pythonLiteral(secret) + ` in open(path).read():
            found.append(path)
    except OSError:
        pass
for root, dirs, files in os.walk(` + pythonLiteral(ws) + `):
    for f in files:
        try:
            if ` + pythonLiteral(secret) + ` in open(os.path.join(root, f)).read():
                found.append(os.path.join(root, f))
        except OSError:
            pass
print(sorted(set(found)))`
	sandbox := SandboxOptions{Mode: SandboxOn, Writable: []string{ws}, Hidden: []string{token, config, other}}
	check := func(what string, k *Kernel) {
		t.Helper()
		if got := stdoutOf(t, k, probe); got != "[]\n" {
			t.Errorf("%s: the host's secret is readable at %s", what, got)
		}
	}
	pooled := New(Options{Interpreters: map[string]string{"python": testkit.DebianPython}, PoolSizes: map[string]int{"python": 1}, PoolCwd: ws, Sandbox: sandbox})
	t.Cleanup(func() { _ = pooled.Close() })
	ready := readyPid(t, pooled, "python")
	k := startIn(t, pooled, "python", ws)
	if k.Pid() != ready {
		t.Fatalf("the python context (pid %d) is not the warm pool's (pid %d)", k.Pid(), ready)
	}
	check("python, pooled", k)
	restartKernel(t, k)
	check("python, restarted", k)
	if got := stdoutOf(t, startIn(t, pooled, "bash", ws), "cat "+token+" "+config+" "+creds+"/* 2>&1; env | grep -c -e CREDENTIALS_DIRECTORY -e INVOCATION_ID -e NOTIFY_SOCKET || true"); strings.Contains(got, secret) || !strings.HasSuffix(got, "0\n") {
		t.Errorf("bash: the host's secret or a service variable is readable: %q", got)
	}
	if got := stdoutOf(t, startIn(t, pooled, "bash", outside), "ls; cat jupyter-token 2>&1 || true"); strings.Contains(got, secret) || !strings.Contains(got, "jupyter-token") {
		t.Errorf("bash in the hidden file's directory: %q, want it listed and unreadable", got)
	}

	testkit.NeedPythonModules(t, testkit.DebianPython, "json")
	forked := New(Options{Interpreters: map[string]string{"python": testkit.DebianPython}, Preload: []string{"json"}, PoolCwd: ws, Sandbox: sandbox})
	t.Cleanup(func() { _ = forked.Close() })
	tmpl := readyTemplate(t, forked)
	k = startIn(t, forked, "python", ws)
	mustBeForkedFrom(t, k, tmpl)
	check("python, forked", k)

	if got, err := os.ReadFile(token); err != nil || string(got) != secret {
		t.Errorf("the token file on the host reads %q, %v after the contexts", got, err)
	}
}

// javac's default class path is its cwd, where it also looks for
// annotation processors: one a context saved in the host's cwd would have
// run in javac, as the host, when the java driver was compiled. javac runs
// without processors, in "/", in a sandbox.
func TestJavacRunsNoProcessorFromTheCwd(t *testing.T) {
	needSandbox(t)
	javac := testkit.NeedCommand(t, "javac", "default-jdk-headless")
	marks, cwd := t.TempDir(), t.TempDir()
	mark := filepath.Join(marks, "processor-ran")
	src := filepath.Join(cwd, "P.java")
	testkit.WriteFile(t, src, `import java.util.Set;
import javax.annotation.processing.*;
import javax.lang.model.element.TypeElement;
@SupportedAnnotationTypes("*")
public class P extends AbstractProcessor {
    static {
        try { java.nio.file.Files.writeString(java.nio.file.Path.of(`+pythonLiteral(mark)+`), "ran"); } catch (Exception e) {}
    }
    public boolean process(Set<? extends TypeElement> annotations, RoundEnvironment env) { return false; }
}
`)
	if out, err := exec.Command(javac, "-d", cwd, src).CombinedOutput(); err != nil {
		t.Fatalf("javac P.java: %v: %s", err, out)
	}
	if err := os.MkdirAll(filepath.Join(cwd, "META-INF", "services"), 0o755); err != nil {
		t.Fatal(err)
	}
	testkit.WriteFile(t, filepath.Join(cwd, "META-INF", "services", "javax.annotation.processing.Processor"), "P\n")
	t.Setenv("HOME", t.TempDir()) // a cache of its own: the driver is compiled
	t.Setenv("XDG_CACHE_HOME", "")
	t.Chdir(cwd)
	ws := t.TempDir()
	tr := New(Options{PoolCwd: ws, Sandbox: SandboxOptions{Mode: SandboxOn, Writable: []string{ws}}})
	t.Cleanup(func() { _ = tr.Close() })
	if got := stdoutOf(t, startIn(t, tr, "java", ws), `System.out.println(6 * 7);`); got != "42\n" {
		t.Fatalf("the java context prints %q", got)
	}
	if _, err := os.Stat(mark); err == nil {
		t.Error("an annotation processor in the host's cwd ran in javac, as the host")
	}
}
