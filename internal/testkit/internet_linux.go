package testkit

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// Internet stands up, for one test, what a context reaches as "the
// internet": a network namespace of its own (ip netns), joined to this one
// by a veth pair with addresses in 10.213.n.0/30 (the host's end .1, the
// namespace's .2), and an HTTP server listening inside it, at the base URL
// returned: GET /bytes/N answers N bytes. Everything is removed when the
// test ends. Needs root (to make namespaces and links) and iproute2's ip:
// Missing otherwise.
func Internet(tb testing.TB) string {
	tb.Helper()
	if os.Geteuid() != 0 {
		Missingf(tb, "the test's internet (a network namespace and a veth pair) needs root")
	}
	ip := NeedCommand(tb, "ip", "iproute2")
	n := os.Getpid() % 250 // apart from another test binary's
	name := fmt.Sprintf("khnet%d", os.Getpid())
	hostIf, nsIf := fmt.Sprintf("khh%d", os.Getpid()), fmt.Sprintf("khn%d", os.Getpid())
	hostAddr, nsAddr := fmt.Sprintf("10.213.%d.1", n), fmt.Sprintf("10.213.%d.2", n)
	run := func(args ...string) {
		tb.Helper()
		if out, err := exec.Command(ip, args...).CombinedOutput(); err != nil {
			tb.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	run("netns", "add", name)
	tb.Cleanup(func() { _ = exec.Command(ip, "netns", "delete", name).Run() }) // takes the veth pair with it
	run("link", "add", hostIf, "type", "veth", "peer", "name", nsIf, "netns", name)
	run("addr", "add", hostAddr+"/30", "dev", hostIf)
	run("link", "set", hostIf, "up")
	run("-n", name, "addr", "add", nsAddr+"/30", "dev", nsIf)
	run("-n", name, "link", "set", nsIf, "up")
	ln, err := listenIn("/run/netns/"+name, nsAddr+":0")
	if err != nil {
		tb.Fatalf("listen in the test's internet: %v", err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(serveBytes)}
	go srv.Serve(ln)
	tb.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String()
}

// listenIn listens on addr in the network namespace at path: a socket
// belongs to the namespace it was made in, whichever thread uses it later.
func listenIn(path, addr string) (net.Listener, error) {
	ns, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer ns.Close()
	own, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
	if err != nil {
		return nil, err
	}
	defer own.Close()
	runtime.LockOSThread()
	if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if errBack := unix.Setns(int(own.Fd()), unix.CLONE_NEWNET); errBack != nil {
		// The thread stays locked, so it ends with this goroutine
		// rather than serve others in the wrong namespace.
		return nil, errors.Join(err, errBack)
	}
	runtime.UnlockOSThread()
	return ln, err
}

// serveBytes answers GET /bytes/N with N bytes.
func serveBytes(w http.ResponseWriter, r *http.Request) {
	n, err := strconv.ParseInt(strings.TrimPrefix(r.URL.Path, "/bytes/"), 10, 64)
	if err != nil || n < 0 {
		http.Error(w, "want /bytes/N", http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
	_, _ = io.CopyN(w, zeros{}, n)
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}
