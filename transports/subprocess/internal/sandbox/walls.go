package sandbox

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
)

// kernelKnobs are the system-wide files a fresh /proc holds: sysctls, the
// magic SysRq key, IRQ affinities, bus, filesystem, ACPI, sound, SCSI and
// driver settings, memory type ranges, latency and timer statistics (the
// read-only set of Docker's default and the writable ones of its masked
// set). They are root's, mode 0644 or 0200, and most are checked by owner
// only: an interpreter of a root host is uid 0 in its sandbox, and would
// write core_pattern (a command the kernel runs as root at the next crash)
// or the host's hostname, whatever capabilities it was left without. bwrap covers some
// of them read-only by itself, depending on its version and on whether it
// is privileged (0.8.0 as root covered /proc/irq and /proc/bus but left
// /proc/sys writable); the sandbox covers each one that exists, always,
// read-only. /sys needs nothing more: `--ro-bind / /` shows it and every
// mount under it (the cgroup tree) read-only. A context forked from the
// fork template makes its own /proc and covers the same list itself
// (drivers/forkserver.py, _own_proc), and the Jupyter kernels' sandbox
// (deploy/jupyter/kernels/python3/sandbox.py) has its own copy:
// TestPythonCopiesOfTheWalls fails if either differs.
var kernelKnobs = []string{"/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus", "/proc/fs",
	"/proc/acpi", "/proc/asound", "/proc/scsi", "/proc/driver", "/proc/mtrr", "/proc/latency_stats", "/proc/timer_stats"}

// knobCovers are bwrap's arguments, after its --proc, that show each of
// kernelKnobs read-only: the host's own entry bound over the fresh one (a
// sysctl reads and writes the same through either; bwrap takes a bind's
// source from the host's tree). An entry this kernel lacks (no SysRq
// built in) is left out, as bwrap fails on a missing source.
var knobCovers = sync.OnceValue(func() []string {
	var args []string
	for _, p := range kernelKnobs {
		if _, err := os.Lstat(p); err == nil {
			args = append(args, "--ro-bind", p, p)
		}
	}
	return args
})

// Outside the sandboxes the host (this plugin) runs nothing a context can
// write, and no interpreter that could load what a context wrote: each
// run of its own is a ToolRunner's. They are the python driver's compile
// (the transport's pycache.go) and javac compiling the java driver
// (java.go); the interpreters themselves, pooled, cold, forked or
// restarted, and the fork template, always start in a sandbox where there
// is one (sandbox.go, the transport's forkserver.go), and bwrap is looked up outside the writable paths
// (lookPathOutside). docs/RATIONALE.md ("The host runs no code a context
// can write") lists every process the host and its plugins start.

// ToolRunner prepares a run of the host's own that starts an interpreter
// of the contexts' (python, javac): in a sandbox as a context's
// interpreter, where there is one, with only its output directory
// writable, since the interpreter itself may be one a context can replace
// (a venv in the workspace, a python3 in ~/.local/bin on PATH); in "/",
// and with the interpreters' environment (none of the host's own
// variables: hostOnlyVar) without PYTHON* variables, where there is none.
type ToolRunner struct {
	sb  *Sandbox // nil: interpreters run unsandboxed
	env []string // the interpreters' environment
}

// Tools is the ToolRunner of interpreters sandboxed in sb (nil: none) with
// the environment env.
func Tools(sb *Sandbox, env []string) ToolRunner { return ToolRunner{sb: sb, env: env} }

// Prepare makes cmd a tool run that may write out (a directory; "" none).
func (r ToolRunner) Prepare(cmd *exec.Cmd, out string) {
	cmd.Dir = "/" // nothing of a working directory is loaded
	cmd.Env = make([]string, 0, len(r.env))
	for _, kv := range r.env {
		if !strings.HasPrefix(kv, "PYTHON") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	if r.sb == nil {
		return
	}
	r.sb.Wrap(cmd, "", false, 0) // no network stack: a tool needs none
	if out == "" {
		return
	}
	// Its output directory, writable, among the mounts (before the "--"
	// that ends bwrap's arguments): after the read-only ones, as the
	// driver cache is one of those.
	end := slices.Index(cmd.Args, "--")
	cmd.Args = slices.Insert(cmd.Args, end, "--bind", out, out)
}

// lookPathOutside is exec.LookPath for a command that must not be one a
// context can write: PATH's directories at or under dirs are skipped (a
// bwrap planted in ~/.local/bin, which a user's PATH often holds, would
// otherwise run as the host at its next start), and so are relative ones.
func lookPathOutside(name string, dirs []string) (string, error) {
	for _, dir := range filepath.SplitList(os.Getenv("PATH")) {
		if !filepath.IsAbs(dir) || UnderAny(filepath.Clean(dir), dirs) {
			continue
		}
		if real, err := filepath.EvalSymlinks(dir); err == nil && UnderAny(real, dirs) {
			continue
		}
		path := filepath.Join(dir, name)
		if fi, err := os.Stat(path); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			return path, nil
		}
	}
	return "", fmt.Errorf("%s: %w", name, exec.ErrNotFound)
}

// inWritable says whether path, as given or with symlinks resolved, is
// in one of the writable paths: a context could replace it.
func inWritable(path string, writable []string) bool {
	return UnderAny(filepath.Clean(path), writable) || slices.ContainsFunc(ExistingDirs([]string{path}), func(real string) bool {
		return UnderAny(real, writable)
	})
}

// userWritableDirs are the userDirs of the user's home, which every
// sandbox may write ("" home or "/": none).
func userWritableDirs() []string {
	home, _ := os.UserHomeDir()
	if home == "" || home == "/" {
		return nil
	}
	var dirs []string
	for _, d := range userDirs {
		dirs = append(dirs, filepath.Join(home, d))
	}
	return append(dirs, ExistingDirs(dirs)...) // as written and as resolved
}

// hostEnvPrefix starts kernelhost's own environment variables: its settings
// and secrets (KERNELHOST_ACCESS_TOKEN, KERNELHOST_JUPYTER_TOKEN, policy
// configs). Interpreters run user code, which must not read them
// (hostOnlyVar).
const hostEnvPrefix = "KERNELHOST_"

// hostOnlyVar says whether the environment variable key is the host's
// own, which no interpreter gets: kernelhost's settings and secrets
// (KERNELHOST_*), and what the service manager passes to the service
// itself (systemd.exec(5)): its credentials and state directories, its
// notify and listening sockets, its invocation and watchdog. These name
// things of the host's, or let their holder speak for the service; a
// user's variables (HOME, PATH, LANG, ...) pass.
func hostOnlyVar(key string) bool {
	if strings.HasPrefix(key, hostEnvPrefix) || strings.HasPrefix(key, "LISTEN_") ||
		strings.HasPrefix(key, "WATCHDOG_") || strings.HasPrefix(key, "MONITOR_") ||
		strings.HasPrefix(key, "TRIGGER_") || strings.HasPrefix(key, "MEMORY_PRESSURE_") {
		return true
	}
	return slices.Contains(serviceVars, key) || slices.Contains(serviceDirVars, key)
}

// serviceVars are systemd's variables for the service that hostOnlyVar's
// prefixes do not cover.
var serviceVars = []string{"NOTIFY_SOCKET", "INVOCATION_ID", "JOURNAL_STREAM", "MAINPID", "MANAGERPID",
	"SYSTEMD_EXEC_PID", "SERVICE_RESULT", "EXIT_CODE", "EXIT_STATUS", "PIDFILE", "FDSTORE",
	"REMOTE_ADDR", "REMOTE_PORT"}

// serviceDirVars name the service's own directories (each a list separated
// by colons): its credentials (LoadCredential=) and what RuntimeDirectory=,
// StateDirectory= and the like made for it. Each is hidden in every
// sandbox (hiddenPaths), and the variables are the host's (hostOnlyVar).
var serviceDirVars = []string{"CREDENTIALS_DIRECTORY", "RUNTIME_DIRECTORY", "STATE_DIRECTORY",
	"CACHE_DIRECTORY", "LOGS_DIRECTORY", "CONFIGURATION_DIRECTORY"}

// WithoutHostVars returns env without the host's own variables.
func WithoutHostVars(env []string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		if k, _, _ := strings.Cut(kv, "="); !hostOnlyVar(k) {
			out = append(out, kv)
		}
	}
	return out
}

// hiddenPaths are the host's own files and directories no sandbox may
// read (the access token file, the config file: Options.Hidden,
// and the service's directories: serviceDirVars), absolute with symlinks
// resolved, those that exist, under the host's /tmp too (a cwd there is
// shown: cwdArgs); notes say why each path left out is: one that holds a
// path the sandbox shows (keep: the writable paths, the drivers' cache)
// cannot be hidden without it.
func hiddenPaths(listed, keep []string) (hidden, notes []string) {
	paths := slices.Clone(listed)
	for _, v := range serviceDirVars {
		if val := os.Getenv(v); val != "" {
			paths = append(paths, filepath.SplitList(val)...)
		}
	}
	for _, p := range ExistingDirs(paths) {
		if covers(p, keep) {
			notes = append(notes, fmt.Sprintf("%s holds a path every sandbox needs (a writable one, or the drivers' cache), so it is not hidden from them", p))
		} else {
			hidden = append(hidden, p)
		}
	}
	return hidden, notes
}

// maskArgs are bwrap's arguments, after every other mount, that hide the
// hidden paths: an empty read-only tmpfs over a directory, the null
// device over a file.
func maskArgs(hidden []string) []string {
	var args []string
	for _, p := range hidden {
		if fi, err := os.Stat(p); err == nil && fi.IsDir() {
			args = append(args, "--tmpfs", p, "--remount-ro", p)
		} else {
			args = append(args, "--ro-bind", "/dev/null", p)
		}
	}
	return args
}
