// Package sandbox is the walls an interpreter of the subprocess transport
// runs in, and a command of envd's too: a bubblewrap (bwrap) sandbox of its
// own (Sandbox: its namespaces, mounts, hidden paths, kernel knobs), its
// network (network.go: none, the host's, or a namespace of its own with
// pasta for outbound connections), the host's runs of an interpreter of
// the contexts' (ToolRunner) and the host's own environment variables no
// interpreter gets (WithoutHostVars). docs/RATIONALE.md, "Sandbox", says
// why.
package sandbox

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// Each interpreter runs in a sandbox of its own, made by bubblewrap (bwrap;
// docs/RATIONALE.md says why bwrap): its own PID, IPC, mount and cgroup
// namespaces, its own network namespace unless the setting is the host's
// (network.go), a fresh /proc that shows only its own processes, its own /tmp
// (a tmpfs that ends with it), the host's files read-only except the
// writable paths (the workspace and the places users expect to write:
// Options.Writable, userDirs; the kernel's cwd is writable
// only inside them: cwdArgs), no
// capabilities and no_new_privs. Nothing it does reaches another
// interpreter's /proc entries, pipes or environment, or the host's.
//
// Nor can it make a user namespace (bwrap's --disable-userns, where this
// bwrap has it: sandbox.noUserns): a cell has no use for one, and one would
// give it capabilities over namespaces of its own, the kernel's most
// attacked surface. So the interpreter runs in a user namespace of its
// own, as the host's uid and gid, whose count of user namespaces is used
// up (docs/RATIONALE.md, "Sandbox").
//
// The process tree on the host is bwrap (the host's child, alone in its
// process group, dies with the host) -> bwrap's init (pid 1 in the sandbox,
// leader of a new session and group: --new-session) -> the interpreter (pid
// 2). When the init ends, the kernel kills everything in the namespace,
// whatever sessions, double forks or cgroups it used; it ends when the
// interpreter exits, or when bwrap is killed (--die-with-parent). SIGINT for
// the interpreter goes to the init's process group: the interpreter and its
// children get it, the init ignores it (a namespace's init gets only the
// signals it handles) and bwrap, in a group of its own, never sees it.
//
// A python context forked from the fork server's template (the transport's forkserver.go)
// is not started by bwrap: the template's sandbox has a user namespace of
// its own, and each context forked from it makes the same walls itself
// (its forksandbox.go, drivers/forkserver.py).

// Sandbox modes (Options.Mode, the -sandbox setting).
const (
	Auto = "auto" // a sandbox where the machine allows one, else none with a warning
	On   = "on"   // a sandbox, or no interpreter at all
	Off  = "off"  // no sandbox
)

// Options configures the sandbox of every interpreter.
type Options struct {
	// Mode is Auto (""), On or Off.
	Mode string
	// Writable lists host paths every interpreter may write (the host
	// passes its default cwd, the workspace, and what the operator lists);
	// userDirs are writable too; a kernel's cwd elsewhere is
	// read-only. Paths that do not exist are left out.
	Writable []string
	// ReadOnly lists paths under a writable one that stay read-only (the
	// caller passes the driver cache; this program's directory is always
	// among them).
	ReadOnly []string
	// Hidden lists the host's own files and directories that no sandbox
	// may read (the host passes its token files and config file); the
	// service's credentials and state directories are hidden too
	// (walls.go, hiddenPaths).
	Hidden []string
	// Network is Isolated (""), None or Host (network.go).
	Network string
}

// userDirs are the places, under the user's home, where users expect
// `pip install --user`, npm, caches and configuration (IPython's profile,
// matplotlib's font cache) to write. They are made if missing,
// so the first `pip install --user` in a sandbox finds ~/.local. The
// Jupyter kernels' sandbox has a copy (deploy/jupyter/kernels/python3/
// sandbox.py, USER_DIRS), checked by TestPythonCopiesOfTheWalls.
var userDirs = []string{".local", ".cache", ".npm", ".config", ".ipython"}

// sandbox is how interpreters are wrapped; nil: not at all.
type Sandbox struct {
	bwrap string
	// noUserns says interpreters cannot make user namespaces
	// (--disable-userns). False where this bwrap lacks the option, or
	// where a sandbox cannot have a user namespace at all: a host running
	// as root where user namespaces are refused, whose interpreters can
	// then make none either.
	noUserns bool
	writable []string // absolute, symlinks resolved, existing
	readOnly []string
	hidden   []string // masked, after every other mount (maskArgs)
	notes    []string // why a path to hide is not (hiddenPaths)
	network  string   // Isolated, None or Host
	pasta    string   // pasta's path, under Isolated
}

// ParseMode checks a -sandbox value.
func ParseMode(s string) (string, error) {
	switch s {
	case "", Auto:
		return Auto, nil
	case On, Off:
		return s, nil
	}
	return "", fmt.Errorf("sandbox %q: want auto, on or off", s)
}

// New returns the sandbox for opts: nil when off, or when it cannot be
// had here in auto mode (why says so); an error when it cannot be had and
// opts.Mode is on.
func New(opts Options, probe func() (*Sandbox, error)) (sb *Sandbox, why string, err error) {
	mode, err := ParseMode(opts.Mode)
	if err != nil {
		return nil, "", err
	}
	network, err := ParseNetwork(opts.Network)
	if err != nil {
		return nil, "", err
	}
	if mode == Off {
		return nil, "turned off (-sandbox=off)", nil
	}
	sb, err = Build(opts, probe)
	if err != nil {
		if mode == On {
			return nil, "", fmt.Errorf("subprocess: -sandbox=on, but interpreters cannot be sandboxed here: %w", err)
		}
		return nil, err.Error(), nil
	}
	if err := sb.setNetwork(network); err != nil {
		return nil, "", fmt.Errorf("subprocess: %w", err)
	}
	return sb, "", nil
}

// ForCommands builds the sandbox of commands other than interpreters
// (envd's) for opts. Unlike New in auto mode, it never falls back to none:
// without bwrap it fails, unless opts.Mode is Off, where it returns nil.
func ForCommands(opts Options) (*Sandbox, error) {
	mode, err := ParseMode(opts.Mode)
	if err != nil || mode == Off {
		return nil, err
	}
	network, err := ParseNetwork(opts.Network)
	if err != nil {
		return nil, err
	}
	sb, err := Build(opts, Works)
	if err != nil {
		return nil, err
	}
	if err := sb.setNetwork(network); err != nil {
		return nil, err
	}
	return sb, nil
}

// setNetwork gives sb its network: under Isolated pasta, which must work
// here. Not a fallback to the host's network, nor to no sandbox: the
// operator chooses (network.go).
func (sb *Sandbox) setNetwork(network string) (err error) {
	sb.network = network
	if network == Isolated {
		sb.pasta, err = pastaWorks()
	}
	return err
}

// Build builds the sandbox once bwrap was found to work (probe), so a
// machine that refuses it (no user namespaces for an unprivileged host, a
// seccomp filter in a container) is found at start, not at the first
// context. Its network is none of its own yet (New, ForCommands).
func Build(opts Options, probe func() (*Sandbox, error)) (*Sandbox, error) {
	found, err := probe()
	if err != nil {
		return nil, err
	}
	sb := &Sandbox{bwrap: found.bwrap, noUserns: found.noUserns}
	home, _ := os.UserHomeDir()
	var writable []string
	for _, d := range userDirs {
		if home != "" && home != "/" {
			dir := filepath.Join(home, d)
			_ = os.MkdirAll(dir, 0o700)
			writable = append(writable, dir)
		}
	}
	sb.writable = ExistingDirs(append(writable, opts.Writable...))
	if inWritable(sb.bwrap, sb.writable) {
		return nil, fmt.Errorf("bwrap (%s) is in a place sandboxed code can write: install it elsewhere, or take its directory off PATH", sb.bwrap)
	}
	readOnly := slices.Clone(opts.ReadOnly)
	if exe, err := os.Executable(); err == nil {
		readOnly = append(readOnly, filepath.Dir(exe))
	}
	sb.readOnly = ExistingDirs(readOnly)
	sb.hidden, sb.notes = hiddenPaths(opts.Hidden, append(slices.Clone(sb.writable), sb.readOnly...))
	return sb, nil
}

// works is Probe's outcome, found once.
var works = sync.OnceValues(Probe)

// Works is Probe's outcome, found once per process.
func Works() (*Sandbox, error) { return works() }

// Probe finds bwrap and runs it once with the namespaces interpreters
// get, with no user namespace for them to make where it can: the bare
// sandbox (bwrap's path, noUserns), or why it cannot sandbox here.
func Probe() (*Sandbox, error) {
	path, err := lookPathOutside("bwrap", userWritableDirs()) // not one a context planted (walls.go)
	if err != nil {
		return nil, errors.New("bwrap is not installed (Debian: apt-get install bubblewrap)")
	}
	var out []byte
	for _, sb := range []*Sandbox{{bwrap: path, noUserns: true}, {bwrap: path}} {
		cmd := exec.Command(path, sb.Args("/", false)...)
		cmd.Args = append(cmd.Args, "true")
		cmd.Dir = "/"
		if out, err = cmd.CombinedOutput(); err == nil {
			return sb, nil
		}
	}
	return nil, fmt.Errorf("bwrap (%s) fails here: %v: %s", path, err, strings.TrimSpace(string(out)))
}

// ExistingDirs returns the paths that exist, absolute with symlinks
// resolved (bwrap mounts on the real path), without duplicates.
func ExistingDirs(paths []string) []string {
	var out []string
	for _, p := range paths {
		if p == "" {
			continue
		}
		abs, err := filepath.Abs(p)
		if err != nil {
			continue
		}
		real, err := filepath.EvalSymlinks(abs)
		if err != nil {
			continue
		}
		if !slices.Contains(out, real) {
			out = append(out, real)
		}
	}
	return out
}

// Args are bwrap's arguments for an interpreter in cwd, up to the command.
// Mounts are made in order, later ones over earlier ones: the host's
// files read-only, then a fresh /dev, /proc (its kernel knobs covered
// read-only: knobCovers) and /tmp, then the writable
// paths (parents before children), then the read-only ones under them.
func (sb *Sandbox) Args(cwd string, template bool) []string {
	args := []string{
		"--ro-bind", "/", "/",
		"--dev", "/dev",
		"--proc", "/proc",
		"--tmpfs", "/tmp",
		"--unshare-pid", "--unshare-ipc", "--unshare-cgroup-try",
		"--new-session", "--die-with-parent",
		"--cap-drop", "ALL",
	}
	args = append(args, knobCovers()...) // after --proc (walls.go)
	if sb.OwnNetns() {
		// Its own loopback and abstract unix sockets (network.go).
		args = append(args, "--unshare-net")
	}
	if sb.noUserns || template {
		// Its uid and gid in its user namespace are the host's.
		args = append(args, "--unshare-user",
			"--uid", strconv.Itoa(os.Getuid()), "--gid", strconv.Itoa(os.Getgid()))
	}
	if template {
		// A fork template (the transport's forkserver.go) gives each context namespaces,
		// a /proc and a /tmp of its own, for which it needs CAP_SYS_ADMIN
		// (and CAP_SETPCAP, for the context to drop its bounding set): in
		// a user namespace of its own, so they are nothing on the host.
		// Not --disable-userns, whose nested namespace would lock the
		// mounts under /proc and so forbid the contexts' own /proc: with
		// CAP_SYS_RESOURCE, each context sets its namespace's limit of
		// user namespaces to 0 instead (drivers/forkserver.py, B).
		args = append(args, "--cap-add", "CAP_SYS_ADMIN", "--cap-add", "CAP_SETPCAP", "--cap-add", "CAP_SYS_RESOURCE")
		if sb.OwnNetns() {
			// Each context brings up the loopback of its own network
			// namespace (forkserver.py, B).
			args = append(args, "--cap-add", "CAP_NET_ADMIN")
		}
	} else if sb.noUserns {
		args = append(args, "--disable-userns")
	}
	for _, w := range byDepth(sb.writable) {
		args = append(args, "--bind", w, w)
	}
	// The read-only paths are mounted even where / shows them already (the
	// driver cache may be under /tmp, which the sandbox's own /tmp hides),
	// but never over a writable path or /tmp.
	for _, r := range byDepth(sb.readOnly) {
		if !covers(r, append([]string{"/tmp"}, sb.writable...)) {
			args = append(args, "--ro-bind", r, r)
		}
	}
	args = append(args, sb.cwdArgs(cwd)...)
	// The host's own files over everything, the cwd's bind included
	// (bwrap's --chdir acts after every mount, wherever it stands).
	return append(append(args, maskArgs(sb.hidden)...), "--") // walls.go
}

// cwdArgs put the interpreter in cwd, which the sandbox shows as it shows
// any path: writable only inside the writable set, else read-only, so a
// client's cwd ("/etc", "/../../etc", a symlink to /etc in the workspace)
// never makes a host directory writable (docs/api-contract.md). The
// decision is made on the real path (symlinks and ".." resolved); nothing
// is mounted writable for a cwd. A cwd under the host's /tmp, which the
// sandbox's own /tmp hides, is shown read-only at its real path; /tmp
// itself is the sandbox's own.
func (sb *Sandbox) cwdArgs(cwd string) []string {
	if cwd == "" {
		return nil
	}
	real := ExistingDirs([]string{cwd})
	if len(real) == 0 {
		if abs, err := filepath.Abs(cwd); err == nil {
			return []string{"--chdir", abs} // gone: bwrap fails as a start there should
		}
		return nil
	}
	dir := real[0]
	if dir != "/tmp" && UnderAny(dir, []string{"/tmp"}) && !UnderAny(dir, sb.writable) {
		return []string{"--ro-bind", dir, dir, "--chdir", dir}
	}
	return []string{"--chdir", dir}
}

// byDepth sorts paths so that a directory comes before those under it.
func byDepth(paths []string) []string {
	out := slices.Clone(paths)
	slices.SortStableFunc(out, func(a, b string) int {
		return strings.Count(a, "/") - strings.Count(b, "/")
	})
	return slices.Compact(out)
}

// covers says whether dir is one of paths or above one.
func covers(dir string, paths []string) bool {
	for _, p := range paths {
		if UnderAny(p, []string{dir}) {
			return true
		}
	}
	return false
}

// UnderAny says whether path is one of dirs or below one.
func UnderAny(path string, dirs []string) bool {
	for _, d := range dirs {
		if path == d || strings.HasPrefix(path, strings.TrimSuffix(d, "/")+"/") {
			return true
		}
	}
	return false
}

// Wrap makes cmd run in a sandbox: bwrap with the command after its
// arguments; a fork template's (template) when it is one. infoFd, when
// above 0, is cmd's descriptor bwrap writes its init's pid to (network.go).
func (sb *Sandbox) Wrap(cmd *exec.Cmd, cwd string, template bool, infoFd int) {
	args := append([]string{sb.bwrap}, sb.Args(cwd, template)...)
	if infoFd > 0 {
		args = append(args[:len(args)-1], "--info-fd", strconv.Itoa(infoFd), "--")
	}
	if dir := filepath.Dir(cmd.Path); UnderAny(dir, []string{"/tmp"}) && !UnderAny(dir, sb.writable) {
		// An interpreter under /tmp (a test's, a venv made there) is
		// hidden by the sandbox's own /tmp: it is shown read-only.
		args = append(args[:len(args)-1], "--ro-bind", dir, dir, "--")
	}
	cmd.Args = append(args, append([]string{cmd.Path}, cmd.Args[1:]...)...)
	cmd.Path = sb.bwrap
}

// Reaches says whether an interpreter sandboxed for poolCwd sees dir as a
// cold start in dir would (cwdArgs): inside the writable set, writable in
// both, or inside poolCwd, shown the same way in both. Elsewhere (a
// read-only cwd under /tmp, shown only to a cold start) a pooled or forked
// interpreter is not moved there: the kernel starts cold.
func (sb *Sandbox) Reaches(poolCwd, dir string) bool {
	if sb == nil {
		return true
	}
	path := filepath.Clean(dir)
	if real := ExistingDirs([]string{dir}); len(real) > 0 {
		path = real[0]
	} else if abs, err := filepath.Abs(dir); err == nil {
		path = abs // gone: the move fails as a cold start there would
	}
	return UnderAny(path, append(ExistingDirs([]string{poolCwd}), sb.writable...))
}

// Pids finds, once the interpreter is running, the sandbox's init
// (bwrap's only child; its pid is the process group that gets SIGINT) and
// the interpreter (the init's child that is pid 2 in the namespace), as the
// host numbers them.
func Pids(bwrapPid int) (init, interp int, err error) {
	kids := childrenOf(bwrapPid)
	if len(kids) != 1 {
		return 0, 0, fmt.Errorf("bwrap (pid %d) has %d children, want its init", bwrapPid, len(kids))
	}
	init = kids[0]
	for _, c := range childrenOf(init) {
		if NsPid(c) == 2 {
			return init, c, nil
		}
	}
	return 0, 0, fmt.Errorf("the sandbox's init (pid %d) has no child that is pid 2 in it", init)
}

// childrenOf lists the children of pid's main thread.
func childrenOf(pid int) []int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	if err != nil {
		return nil
	}
	var out []int
	for _, f := range strings.Fields(string(b)) {
		if n, err := strconv.Atoi(f); err == nil {
			out = append(out, n)
		}
	}
	return out
}

// NsPid is pid's number in its innermost PID namespace (the last of
// /proc/pid/status's NSpid); 0 if unknown.
func NsPid(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "NSpid:"); ok {
			f := strings.Fields(rest)
			if len(f) == 0 {
				return 0
			}
			n, _ := strconv.Atoi(f[len(f)-1])
			return n
		}
	}
	return 0
}

// Writable is the writable set: absolute, symlinks resolved, existing.
func (sb *Sandbox) Writable() []string { return slices.Clone(sb.writable) }

// Hidden is what the sandbox hides: Options.Hidden and the service's own
// directories, less those holding a path every sandbox shows (walls.go,
// hiddenPaths).
func (sb *Sandbox) Hidden() []string { return slices.Clone(sb.hidden) }

// Notes say why each path to hide is not hidden (hiddenPaths).
func (sb *Sandbox) Notes() []string { return slices.Clone(sb.notes) }

// Network is Isolated, None or Host; Pasta is pasta's path under Isolated.
func (sb *Sandbox) Network() string { return sb.network }

// Pasta is pasta's path, under Isolated.
func (sb *Sandbox) Pasta() string { return sb.pasta }

// Bwrap is bwrap's path.
func (sb *Sandbox) Bwrap() string { return sb.bwrap }

// NoUserns says the sandboxed cannot make user namespaces
// (--disable-userns).
func (sb *Sandbox) NoUserns() bool { return sb.noUserns }
