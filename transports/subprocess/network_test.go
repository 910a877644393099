package subprocess

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kernelhost/kernelhost/internal/testkit"
	"github.com/kernelhost/kernelhost/transports/subprocess/internal/sandbox"
)

// Issue 39, findings 3 and 4: a sandboxed context has a network namespace
// of its own (internal/sandbox's network.go). Each test runs for a bwrap-started context and
// one forked from the sandboxed template.

// netKinds are the ways a python context starts in a sandbox, each with a
// transport under network (SandboxOptions.Network) and the context.
var netKinds = []struct {
	name string
	fork bool
}{{"bwrap", false}, {"forked", true}}

// netContext starts a sandboxed python context of the kind fork says, on a
// transport whose network setting is network.
func netContext(t *testing.T, fork bool, network string) (*Transport, *Kernel, string) {
	t.Helper()
	needSandbox(t)
	if network == NetworkIsolated {
		if _, err := sandbox.PastaWorks(); err != nil {
			testkit.Missingf(t, "%v", err)
		}
	}
	dir := t.TempDir()
	opts := Options{Interpreters: map[string]string{"python": testkit.DebianPython}, PoolCwd: dir, Sandbox: SandboxOptions{Mode: SandboxOn, Writable: []string{dir}, Network: network}}
	if fork {
		opts.Preload = []string{"json"}
	}
	tr := New(opts)
	t.Cleanup(func() { _ = tr.Close() })
	if fork {
		tmpl := readyTemplate(t, tr)
		k := startIn(t, tr, "python", dir)
		mustBeForkedFrom(t, k, tmpl)
		return tr, k, dir
	}
	return tr, startIn(t, tr, "python", dir), dir
}

// connectCode prints what a TCP connect to addr (host, port) did.
const connectCode = `import socket
s = socket.socket(socket.AF_INET6 if ':' in %[1]q else socket.AF_INET)
s.settimeout(5)
try:
    s.connect((%[1]q, %[2]d))
    print('connected')
except OSError as e:
    print(type(e).__name__)
`

// A cell reaches no listener on the host's loopback (the host's API on
// 127.0.0.1:49999 is one), under isolated and none; under host it does.
func TestNetworkHostLoopbackUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var accepted atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			c.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	for _, kind := range netKinds {
		for _, network := range []string{NetworkIsolated, NetworkNone, NetworkHost} {
			t.Run(kind.name+"/"+network, func(t *testing.T) {
				_, k, _ := netContext(t, kind.fork, network)
				for _, addr := range []string{"127.0.0.1", "::1"} {
					got := strings.TrimSpace(stdoutOf(t, k, fmt.Sprintf(connectCode, addr, port)))
					want := addr != "::1" && network == NetworkHost
					if (got == "connected") != want {
						t.Errorf("connect to the host's listener on %s:%d: %s (network %s)", addr, port, got, network)
					}
				}
			})
		}
	}
	if accepted.Load() != 2 {
		t.Errorf("the host's listener accepted %d connections, want 2 (the host setting's)", accepted.Load())
	}
}

// A cell cannot connect to an abstract unix socket of the host or of
// another context: each context has its own.
func TestNetworkAbstractSocketsApart(t *testing.T) {
	name := fmt.Sprintf("kernelhost-test-%d", os.Getpid())
	host, err := net.Listen("unix", "@"+name+"-host")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { host.Close() })
	const listen = `import socket
srv = socket.socket(socket.AF_UNIX)
srv.bind('\0%s')
srv.listen()
print('listening')
`
	const connect = `import socket
out = []
for name in %q.split():
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect('\0' + name)
        out.append('connected ' + name)
    except OSError as e:
        out.append(type(e).__name__)
print(' '.join(out))
`
	for _, kind := range netKinds {
		t.Run(kind.name, func(t *testing.T) {
			tr, victim, dir := netContext(t, kind.fork, NetworkIsolated)
			attacker := startIn(t, tr, "python", dir)
			if got := stdoutOf(t, victim, fmt.Sprintf(listen, name+"-victim")); got != "listening\n" {
				t.Fatalf("the victim's listen: %q", got)
			}
			got := stdoutOf(t, attacker, fmt.Sprintf(connect, name+"-victim "+name+"-host"))
			if got != "ConnectionRefusedError ConnectionRefusedError\n" {
				t.Errorf("another context's and the host's abstract sockets, from a cell: %q", got)
			}
		})
	}
}

// downloadCode prints how many bytes a GET of url brought, or why none.
const downloadCode = `import urllib.request
try:
    with urllib.request.urlopen(%q, timeout=30) as r:
        print(len(r.read()))
except OSError as e:
    print(type(e).__name__)
`

// A cell downloads over HTTP from the internet (here, a server in a
// network namespace the test makes) under isolated and host; under none it
// cannot.
func TestNetworkOutbound(t *testing.T) {
	url := testkit.Internet(t) + "/bytes/100000"
	for _, kind := range netKinds {
		for _, network := range []string{NetworkIsolated, NetworkNone, NetworkHost} {
			t.Run(kind.name+"/"+network, func(t *testing.T) {
				_, k, _ := netContext(t, kind.fork, network)
				got := strings.TrimSpace(stdoutOf(t, k, fmt.Sprintf(downloadCode, url)))
				if want := "100000"; (got == want) != (network != NetworkNone) {
					t.Errorf("download from the internet under %s: %s", network, got)
				}
			})
		}
	}
}

// The network stack (pasta, the host's child) ends with its context: none
// is left once the context is shut down.
func TestNetworkStackEndsWithContext(t *testing.T) {
	for _, kind := range netKinds {
		t.Run(kind.name, func(t *testing.T) {
			_, k, _ := netContext(t, kind.fork, NetworkIsolated)
			stacks := pastaChildren()
			if len(stacks) != 1 {
				t.Fatalf("%d pasta processes run for one context, want 1: %v", len(stacks), stacks)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := k.Shutdown(ctx); err != nil {
				t.Fatal(err)
			}
			testkit.AwaitGone(t, "the context's pasta after its shutdown", 30*time.Second, stacks...)
		})
	}
}

// pastaChildren are this process's children that run pasta.
func pastaChildren() []int {
	var out []int
	tasks, _ := os.ReadDir("/proc/self/task")
	for _, task := range tasks {
		tid, _ := strconv.Atoi(task.Name())
		for _, pid := range childrenOfTask(tid) {
			cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
			if strings.HasPrefix(string(cmdline), "pasta\x00") || strings.Contains(string(cmdline), "/pasta\x00") {
				out = append(out, pid)
			}
		}
	}
	return out
}

// childrenOfTask lists the children of thread tid of this process.
func childrenOfTask(tid int) []int {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/self/task/%d/children", tid))
	var out []int
	for _, f := range strings.Fields(string(b)) {
		if n, err := strconv.Atoi(f); err == nil {
			out = append(out, n)
		}
	}
	return out
}

// A bad network setting is refused with the values it may take; ""
// is the default, isolated.
func TestParseNetwork(t *testing.T) {
	for in, want := range map[string]string{"": NetworkIsolated, "isolated": NetworkIsolated, "none": NetworkNone, "host": NetworkHost} {
		if got, err := ParseNetwork(in); got != want || err != nil {
			t.Errorf("ParseNetwork(%q) = %q, %v, want %q", in, got, err, want)
		}
	}
	if _, err := ParseNetwork("open"); err == nil || err.Error() != `context-network "open": want isolated, none or host` {
		t.Errorf("ParseNetwork(open): %v", err)
	}
	tr := New(Options{Sandbox: SandboxOptions{Network: "open"}})
	defer tr.Close()
	if _, _, err := tr.Sandboxed(); err == nil || !strings.Contains(err.Error(), "want isolated, none or host") {
		t.Errorf("a transport with context-network=open: %v", err)
	}
}
