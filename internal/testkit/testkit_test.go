package testkit_test

import (
	"bufio"
	"net"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/kernelhost/kernelhost/internal/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m, nil) }

func TestQuantile(t *testing.T) {
	d := []time.Duration{5, 1, 4, 2, 3, 9, 8, 7, 6, 10}
	for q, want := range map[float64]time.Duration{0: 1, 0.5: 6, 0.9: 10} {
		if got := testkit.Quantile(d, q); got != want {
			t.Errorf("Quantile(%v) = %v, want %v", q, got, want)
		}
	}
	if d[0] != 5 {
		t.Error("Quantile sorted its argument in place")
	}
}

func TestConcurrently(t *testing.T) {
	seen := make([]bool, 8)
	err := testkit.Concurrently(len(seen), func(i int) error {
		seen[i] = true
		if i == 3 {
			return os.ErrNotExist
		}
		return nil
	})
	if err == nil || err.Error() != os.ErrNotExist.Error() {
		t.Errorf("error %v, want the one failure", err)
	}
	for i, ok := range seen {
		if !ok {
			t.Errorf("f(%d) did not run", i)
		}
	}
}

// A process that exited is gone (as a zombie, before it is reaped, too).
func TestAliveAndAwaitGone(t *testing.T) {
	cmd := exec.Command("sleep", "0.2")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	if !testkit.Alive(pid) {
		t.Fatalf("sleep (pid %d) is not alive", pid)
	}
	if _, ppid := testkit.ProcState(pid); ppid != os.Getpid() {
		t.Errorf("parent %d, want the test %d", ppid, os.Getpid())
	}
	testkit.AwaitGone(t, "sleep 0.2", 10*time.Second, pid) // a zombie: not reaped yet
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	if testkit.Alive(pid) {
		t.Errorf("pid %d alive after Wait", pid)
	}
}

// A process that spins for 300 ms of its own CPU shows at least that much,
// and not far more; a gone process is an error.
func TestCPUTime(t *testing.T) {
	cmd := exec.Command("sh", "-c", `while :; do :; done`)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	pid := cmd.Process.Pid
	deadline := time.Now().Add(30 * time.Second)
	for {
		used, err := testkit.CPUTime(pid)
		if err != nil {
			t.Fatal(err)
		}
		if used >= 300*time.Millisecond {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the spinning shell used %s of CPU in 30 s", used)
		}
		time.Sleep(20 * time.Millisecond)
	}
	cmd.Process.Kill()
	cmd.Wait()
	if _, err := testkit.CPUTime(pid); err == nil {
		t.Errorf("CPUTime of the reaped pid %d: no error", pid)
	}
}

// Through the proxy a line comes back; after Stall nothing passes and the
// connection stays open; after Cut it is closed; new connections pass.
func TestProxy(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() { // echo
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 1024)
				for {
					n, err := c.Read(buf)
					if err != nil {
						return
					}
					c.Write(buf[:n])
				}
			}()
		}
	}()
	p := testkit.StartProxy(t, l.Addr().String())
	addr := p.URL()[len("http://") : len(p.URL())-1]
	dial := func() (net.Conn, *bufio.Reader) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c, bufio.NewReader(c)
	}
	// echo sends a line and waits up to wait for it to come back.
	echo := func(c net.Conn, r *bufio.Reader, wait time.Duration) (string, error) {
		if _, err := c.Write([]byte("ping\n")); err != nil {
			return "", err
		}
		c.SetReadDeadline(time.Now().Add(wait))
		return r.ReadString('\n')
	}
	c, r := dial()
	if got, err := echo(c, r, 10*time.Second); got != "ping\n" {
		t.Fatalf("echo %q %v", got, err)
	}
	p.Stall()
	if got, err := echo(c, r, 300*time.Millisecond); !os.IsTimeout(err) {
		t.Fatalf("after Stall: %q %v, want a timeout", got, err)
	}
	p.Cut()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := r.ReadString('\n'); err == nil || os.IsTimeout(err) {
		t.Fatalf("after Cut: read %v, want the connection closed", err)
	}
	c2, r2 := dial()
	if got, err := echo(c2, r2, 10*time.Second); got != "ping\n" {
		t.Fatalf("a new connection after Cut: %q %v", got, err)
	}
}
