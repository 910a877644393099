package sandbox_test

import (
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/kernelhost/kernelhost/hostcmd/internal/hosttest"
	"github.com/kernelhost/kernelhost/hostcmd/settings"
)

// Issue 39, finding 3: a cell drove other contexts through the host's own
// API on its loopback. Under -context-network=isolated (the default) the
// host's port is not reachable from a cell, linked in (the default) and
// through the plugin; under host it is (the setting works, and it is how a
// cell reached the API before).
func TestCellCannotReachTheHostAPI(t *testing.T) {
	hosttest.NeedSandbox(t)
	const probe = `import socket, urllib.request
s = socket.socket()
s.settimeout(5)
try:
    s.connect(('127.0.0.1', %d))
    print('connected')
except OSError as e:
    print(type(e).__name__)
try:
    urllib.request.urlopen(%q, timeout=5)
    print('listed')
except OSError as e:
    print('refused')
`
	for _, tc := range []struct {
		name, network string
		transport     func(*settings.Config)
	}{
		{"in-process", "", hosttest.InProcess},
		{"plugin", "isolated", hosttest.ViaPlugin},
		{"plugin", "host", hosttest.ViaPlugin},
	} {
		t.Run(tc.name+"/"+tc.network, func(t *testing.T) {
			t.Parallel()
			h := hosttest.Start(t, hosttest.DefaultNetwork, tc.transport, func(c *settings.Config) {
				if tc.network != "" {
					c.SetTransportSetting("context-network", tc.network)
				}
			})
			_, port, _ := net.SplitHostPort(strings.TrimPrefix(h.URL(), "http://"))
			lines := h.Run(map[string]any{"code": fmt.Sprintf(probe, mustAtoi(t, port), h.URL()+"/contexts")})
			hosttest.NoError(t, lines)
			want := "ConnectionRefusedError\nrefused\n"
			if tc.network == "host" {
				want = "connected\nlisted\n"
			}
			if got := hosttest.Stdout(lines); got != want {
				t.Errorf("a cell under context-network=%s against the host's API: %q, want %q", tc.network, got, want)
			}
		})
	}
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	var n int
	if _, err := fmt.Sscan(s, &n); err != nil {
		t.Fatalf("port %q: %v", s, err)
	}
	return n
}
