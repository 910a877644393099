package sandbox

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// A sandboxed interpreter's network (Options.Network, the
// -context-network setting; docs/RATIONALE.md, "Network"):
//
//   - isolated (the default): a network namespace of its own, so its own
//     loopback and its own abstract unix sockets, none shared with another
//     context or the host, and no way to the host's listeners on loopback
//     (the host's API among them). Outbound traffic goes through pasta
//     (Debian's passt), a user-mode network stack the host attaches to the
//     namespace: the namespace gets the host's address and routes on a tap
//     device, and pasta opens an ordinary socket on the host for each of
//     its connections. Nothing is forwarded inward (-t/-u/-T/-U none) and
//     the gateway's address is not the host (--no-map-gw).
//   - none: a namespace of its own with loopback only.
//   - host: the host's network, as an unsandboxed process has.
//
// A bwrap-started interpreter gets its namespace from bwrap (--unshare-net);
// a context forked from a sandboxed template makes its own (forkserver.py,
// B). pasta is the host's child, one per context, and ends with it
// (the transport's proc.wait): the namespace lives as long as pasta holds it, so pasta
// never ends by itself.

// Network settings (Options.Network).
const (
	Isolated = "isolated"
	None     = "none"
	Host     = "host"
)

// ParseNetwork checks a -context-network value.
func ParseNetwork(s string) (string, error) {
	switch s {
	case "", Isolated:
		return Isolated, nil
	case None, Host:
		return s, nil
	}
	return "", fmt.Errorf("context-network %q: want isolated, none or host", s)
}

// netReadyWait bounds pasta's setup of a namespace.
const netReadyWait = 10 * time.Second

// OwnNetns says whether interpreters under sb get a network namespace of
// their own.
func (sb *Sandbox) OwnNetns() bool {
	return sb != nil && sb.network != Host
}

// Stack is pasta attached to one interpreter's network namespace.
type Stack struct {
	cmd    *exec.Cmd
	stderr headBuffer // why it failed, if it did
	ready  *os.File   // read end of the pipe pasta writes its pid to once the namespace is set up
}

// headBuffer keeps the first 4 KiB written to it: what pasta says about
// its start, not what it may log for as long as its context lives.
type headBuffer struct{ bytes.Buffer }

func (h *headBuffer) Write(p []byte) (int, error) {
	if room := 4<<10 - h.Len(); room > 0 {
		h.Buffer.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

// pastaArgs are pasta's arguments for the network namespace at fd 3, which
// it enters from the user namespace at fd 5 (joinUserns; else from its
// own), and says it is ready by writing its pid to fd 4.
func pastaArgs(joinUserns bool) []string {
	args := []string{
		"--config-net", // the host's addresses and routes in the namespace, the tap device up
		"--foreground", "--quiet",
		"--netns", "/proc/self/fd/3",
		"--pid", "/proc/self/fd/4",
		// Nothing from the host into the namespace, nor from the
		// namespace to the host's loopback.
		"-t", "none", "-u", "none", "-T", "none", "-U", "none",
		"--no-map-gw",
	}
	if joinUserns {
		args = append(args, "--userns", "/proc/self/fd/5")
	} else {
		args = append(args, "--netns-only")
	}
	if os.Geteuid() == 0 {
		// As root pasta would switch to nobody, who may not enter the
		// namespace; in the sandbox's user namespace root is root there
		// only, and pasta drops its capabilities and isolates itself.
		args = append(args, "--runas", "0")
	}
	return args
}

// Attach starts pasta on the network namespace of process pid; wait
// waits until it is set up. pasta enters the user namespace that owns the
// network namespace, where the host's uid holds the capabilities to enter
// it (the interpreter's own may be nested below it: --disable-userns),
// unless that is the host's own.
func Attach(pasta string, pid int) (*Stack, error) {
	ns, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", pid))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w (pid %d)", ErrEnded, pid) // exiting: its namespaces are gone
	}
	if err != nil {
		return nil, fmt.Errorf("network: open the namespace of pid %d: %w", pid, err)
	}
	defer ns.Close()
	owner, err := ownerOf(ns)
	if err != nil {
		return nil, fmt.Errorf("network: the owner of pid %d's namespace: %w", pid, err)
	}
	defer owner.Close()
	join := !sameFile(owner, "/proc/self/ns/user")
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("network: %w", err)
	}
	defer w.Close()
	s := &Stack{ready: r}
	s.cmd = exec.Command(pasta, pastaArgs(join)...)
	s.cmd.ExtraFiles = []*os.File{ns, w, owner} // fd 3, 4, 5
	s.cmd.Stderr = &s.stderr
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := s.cmd.Start(); err != nil {
		r.Close()
		return nil, fmt.Errorf("network: start pasta: %w", err)
	}
	return s, nil
}

// ownerOf opens the user namespace that owns namespace ns.
func ownerOf(ns *os.File) (*os.File, error) {
	fd, err := unix.IoctlRetInt(int(ns.Fd()), unix.NS_GET_USERNS)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), "userns"), nil
}

// sameFile says whether f is the file at path (a namespace's, here).
func sameFile(f *os.File, path string) bool {
	a, errA := f.Stat()
	b, errB := os.Stat(path)
	return errA == nil && errB == nil && os.SameFile(a, b)
}

// Wait waits (bounded) until pasta set the namespace up; on failure it is
// ended.
func (s *Stack) Wait() error {
	_ = s.ready.SetReadDeadline(time.Now().Add(netReadyWait))
	buf := make([]byte, 32)
	n, err := s.ready.Read(buf)
	s.ready.Close()
	if _, convErr := strconv.Atoi(strings.TrimSpace(string(buf[:n]))); err == nil && convErr == nil {
		return nil
	}
	s.Stop()
	var lines []string
	for _, l := range strings.Split(s.stderr.String(), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.Contains(l, "syslog") {
			lines = append(lines, l) // not its complaints that there is no syslog
		}
	}
	why := strings.Join(lines, "; ")
	if why == "" && err != nil {
		why = err.Error()
	}
	return fmt.Errorf("network: pasta did not set up the namespace: %s", why)
}

// Stop ends pasta and reaps it; nil does nothing.
func (s *Stack) Stop() {
	if s == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
}

// findPasta finds pasta, for the isolated setting.
func findPasta() (string, error) {
	path, err := exec.LookPath("pasta")
	if err != nil {
		return "", errors.New("context-network=isolated needs pasta (Debian: apt-get install passt), or choose -context-network=none or host")
	}
	return path, nil
}

// pastaWorks is probeStack's outcome, found once: pasta's path, or why it
// cannot give sandboxes their network here.
var pastaWorks = sync.OnceValues(probeStack)

// probeStack attaches pasta once to a bare sandbox's namespace, so a
// machine where it cannot (no /dev/net/tun, a host whose pasta cannot
// enter its sandboxes' namespaces) is found at start, not at every
// context's.
func probeStack() (string, error) {
	pasta, err := findPasta()
	if err != nil {
		return "", err
	}
	bare, err := Works()
	if err != nil {
		return "", err
	}
	cmd := exec.Command(bare.bwrap, append(bare.Args("/", false), "sh", "-c", "echo; exec cat")...)
	cmd.Dir = "/"
	stdin, err := cmd.StdinPipe()
	if err == nil {
		defer stdin.Close() // cat, and so the sandbox, ends
	}
	stdout, err2 := cmd.StdoutPipe()
	if err = errors.Join(err, err2); err == nil {
		err = cmd.Start()
	}
	if err != nil {
		return "", fmt.Errorf("context-network=isolated: start a sandbox to try pasta in: %w", err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	_, _ = stdout.Read(make([]byte, 1)) // the sandbox's init is there
	init := childrenOf(cmd.Process.Pid)
	if len(init) != 1 {
		return "", errors.New("context-network=isolated: the sandbox made to try pasta in has no init")
	}
	s, err := Attach(pasta, init[0])
	if err == nil {
		err = s.Wait()
	}
	if err != nil {
		return "", fmt.Errorf("context-network=isolated cannot work here (choose -context-network=none or host): %w", err)
	}
	s.Stop()
	return pasta, nil
}

// InitPidFrom reads, from the pipe bwrap was given as --info-fd, its
// sandbox's init's pid (bounded by netReadyWait), and closes it. It
// returns once the init has started the command (setUp): bwrap writes the
// pid before its init sets the namespace's loopback up, and pasta's own
// setup of the namespace racing it failed the start under load ("bwrap:
// loopback: Failed RTM_NEWADDR").
func InitPidFrom(r *os.File) (int, error) {
	defer r.Close()
	deadline := time.Now().Add(netReadyWait)
	_ = r.SetReadDeadline(deadline)
	var info struct {
		ChildPid int `json:"child-pid"`
	}
	if err := json.NewDecoder(r).Decode(&info); err != nil || info.ChildPid <= 0 {
		return 0, fmt.Errorf("network: bwrap did not say its init's pid: %v", err)
	}
	return info.ChildPid, setUp(info.ChildPid, deadline)
}

// ErrEnded: the sandbox ended before its network was attached (its
// command ran to its end already, or failed to start).
var ErrEnded = errors.New("network: the sandbox ended before its network was set up")

// setUp waits until the sandbox init init has a child, the command it
// starts once the sandbox is set up, or until deadline. Nothing signals
// that moment to the host, so it looks every 200 µs (bwrap's setup takes
// a few milliseconds).
func setUp(init int, deadline time.Time) error {
	for len(childrenOf(init)) == 0 {
		if Ended(init) {
			return ErrEnded
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("network: the sandbox (init pid %d) did not start its command within %v", init, netReadyWait)
		}
		time.Sleep(200 * time.Microsecond)
	}
	return nil
}

// Ended says whether process pid is gone or a zombie.
func Ended(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	// The state follows the command name's closing parenthesis.
	i := bytes.LastIndexByte(b, ')')
	return i < 0 || i+2 >= len(b) || b[i+2] == 'Z' || b[i+2] == 'X'
}

// PastaWorks says where pasta is, or why it cannot give sandboxes their
// network here (found once per process).
func PastaWorks() (string, error) { return pastaWorks() }
