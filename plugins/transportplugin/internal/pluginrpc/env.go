package pluginrpc

import (
	"os"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// go-plugin hands a plugin its start-up parameters in environment variables:
// the magic cookie, PLUGIN_PROTOCOL_VERSIONS, PLUGIN_UNIX_SOCKET_DIR,
// PLUGIN_MIN_PORT/MAX_PORT and, with AutoMTLS, PLUGIN_CLIENT_CERT (the
// host's certificate). Interpreters started by the plugin would inherit them
// and user code would see them in os.environ. go-plugin reads them only in
// plugin.Serve, before it writes the handshake line to stdout (server.go,
// v1.8.0: every os.Getenv precedes the protocol line); the host cannot call
// the plugin before it has read that line, so from the plugin's first call
// on they are no longer needed.
//
// So: a plugin process takes them out of its environment in init, before
// main runs, because a transport may copy os.Environ() when it is built
// (transports/subprocess does, in New, which a plugin's main calls before
// Serve); Serve puts them back just for plugin.Serve to read; the first call
// from the host removes them for good (scrubHandshakeEnv).
//
// /proc/<plugin pid>/environ still shows the environment the process started
// with; that is the kernel's copy, out of Go's reach.

// handshakeEnv holds the "KEY=value" pairs taken out in init.
var handshakeEnv []string

// isHandshakeVar says whether the environment variable key belongs to
// go-plugin's handshake: every PLUGIN_* variable and the magic cookie.
func isHandshakeVar(key string) bool {
	return strings.HasPrefix(key, "PLUGIN_") || key == handshake.MagicCookieKey
}

// hostEnvPrefix starts the host's own environment variables (its settings,
// the access token among them). The host leaves them out of a plugin's
// environment, and the subprocess transport out of its interpreters'.
const hostEnvPrefix = "KERNELHOST_"

func init() {
	// Only in a process started as a transport plugin: the host imports this
	// package too and must keep its own environment.
	if os.Getenv(handshake.MagicCookieKey) != handshake.MagicCookieValue {
		return
	}
	// The plugin holds the host's settings in memory (a Jupyter token):
	// not dumpable, its /proc/<pid>/mem, environ and the like are closed to
	// other processes of the same user, its interpreters included (root
	// keeps access). Interpreters are dumpable again: exec resets it.
	_ = unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); isHandshakeVar(k) {
			handshakeEnv = append(handshakeEnv, kv)
			os.Unsetenv(k)
		}
	}
}

// restoreHandshakeEnv puts the variables init took back, for plugin.Serve.
func restoreHandshakeEnv() {
	for _, kv := range handshakeEnv {
		k, v, _ := strings.Cut(kv, "=")
		os.Setenv(k, v)
	}
}

var scrubOnce sync.Once

// scrubHandshakeEnv removes go-plugin's variables from the environment, once
// go-plugin has read them. Every call handler runs it first.
func scrubHandshakeEnv() {
	scrubOnce.Do(func() {
		for _, kv := range os.Environ() {
			if k, _, _ := strings.Cut(kv, "="); isHandshakeVar(k) {
				os.Unsetenv(k)
			}
		}
		handshakeEnv = nil
	})
}
