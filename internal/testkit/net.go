package testkit

import (
	"net"
	"testing"
)

// FreeAddr returns a loopback address (127.0.0.1:port) that nothing listens
// on at the moment: a free port for a server the test starts, or a closed
// one to connect to.
func FreeAddr(tb testing.TB) string {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("find a free port: %v", err)
	}
	defer l.Close()
	return l.Addr().String()
}

// FreePort is FreeAddr's port.
func FreePort(tb testing.TB) int {
	tb.Helper()
	_, port, _ := net.SplitHostPort(FreeAddr(tb))
	n, err := net.LookupPort("tcp", port)
	if err != nil {
		tb.Fatal(err)
	}
	return n
}
