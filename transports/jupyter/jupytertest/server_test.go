package jupytertest

import (
	"net"
	"os/exec"
	"testing"

	"github.com/kernelhost/kernelhost/internal/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m, nil) }

// A server whose port another process took before it bound it fails with
// an error portTaken knows, and onAFreePort starts it again on another
// port: the tests start servers side by side, each on a port freePort
// found free a moment before.
func TestATakenPortIsStartedAgain(t *testing.T) {
	bin, pre, err := Binary()
	if err != nil {
		testkit.Missing(t, err)
	}
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	port := taken.Addr().(*net.TCPAddr).Port
	onTakenPort := func() (*Server, func(), error) {
		s, _, err := newServer()
		if err != nil {
			return nil, nil, err
		}
		return s.launch("jupyter server", exec.Command(bin, append(pre, Args(port, s.Token, s.RootDir)...)...), "is running at")
	}
	if _, stop, err := onTakenPort(); err == nil || !portTaken(err) {
		if stop != nil {
			stop()
		}
		t.Fatalf("a server on a taken port: %v, want an error portTaken knows", err)
	}
	attempts := 0
	s, stop, err := onAFreePort(func() (*Server, func(), error) {
		attempts++
		if attempts == 1 {
			return onTakenPort()
		}
		return start()
	})
	if err != nil {
		t.Fatalf("after a taken port: %v", err)
	}
	defer stop()
	if attempts != 2 || s.URL == "" {
		t.Errorf("%d attempts, server %q: want the second to start it", attempts, s.URL)
	}
}
