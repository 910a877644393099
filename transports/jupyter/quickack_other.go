//go:build !linux

package jupyter

import "net"

// withQuickAck is a no-op where TCP_QUICKACK does not exist.
func withQuickAck(c net.Conn) net.Conn { return c }
