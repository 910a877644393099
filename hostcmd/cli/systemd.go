package cli

import (
	"fmt"
	"net"
	"os"
)

// systemdNotifier tells systemd about the service's state (sd_notify(3)):
// a unit with Type=notify counts kernelhost started only once it sent
// READY=1, so `systemctl start` returns when /health answers 200, not when
// the process was exec'd. Outside systemd (no NOTIFY_SOCKET) it does
// nothing.
//
// Hand-written rather than go-systemd's daemon.SdNotify, which reads
// NOTIFY_SOCKET on every call: the host takes the variable out of its
// environment before anything starts, so that neither the transport
// plugins nor the interpreters (the code users run) inherit the service
// manager's socket.
type systemdNotifier struct {
	addr *net.UnixAddr // nil: not run by systemd
}

// takeNotifySocket reads NOTIFY_SOCKET and removes it from the environment.
// A socket path starting with "@" is an abstract socket, which Go's net
// package handles as such.
func takeNotifySocket() systemdNotifier {
	path := os.Getenv("NOTIFY_SOCKET")
	os.Unsetenv("NOTIFY_SOCKET")
	if path == "" {
		return systemdNotifier{}
	}
	return systemdNotifier{addr: &net.UnixAddr{Name: path, Net: "unixgram"}}
}

// notify sends state, newline-separated VAR=value assignments (READY=1,
// STOPPING=1, STATUS=text), as one datagram.
func (n systemdNotifier) notify(state string) error {
	if n.addr == nil {
		return nil
	}
	c, err := net.DialUnix("unixgram", nil, n.addr)
	if err != nil {
		return fmt.Errorf("sd_notify %s: %w", n.addr.Name, err)
	}
	defer c.Close()
	if _, err := c.Write([]byte(state)); err != nil {
		return fmt.Errorf("sd_notify %s: %w", n.addr.Name, err)
	}
	return nil
}
