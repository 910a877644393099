//go:build linux

package jupyter

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// quickAckConn re-arms TCP_QUICKACK after every read.
//
// Why: jupyter-server does not set TCP_NODELAY on the kernel websocket, so
// Nagle holds its second small write (e.g. the status idle after an
// execute_reply) until the client ACKs the first; Linux clears QUICKACK by
// itself and then delays that ACK by up to 40 ms. Re-arming it after each read
// makes the client ACK at once, which takes ~40 ms off every round trip.
type quickAckConn struct {
	*net.TCPConn
	raw syscall.RawConn
}

func withQuickAck(c net.Conn) net.Conn {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return c
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return c
	}
	q := &quickAckConn{TCPConn: tc, raw: raw}
	q.arm()
	return q
}

func (c *quickAckConn) Read(p []byte) (int, error) {
	n, err := c.TCPConn.Read(p)
	c.arm()
	return n, err
}

func (c *quickAckConn) arm() {
	// Best effort: a failure only costs latency, never correctness.
	_ = c.raw.Control(func(fd uintptr) {
		_ = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_QUICKACK, 1)
	})
}
