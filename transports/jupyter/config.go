package jupyter

import (
	"crypto/tls"
	"time"
)

// Protocol selects the websocket protocol offered to the server.
type Protocol int

const (
	// ProtocolAuto offers the binary v1.kernel.websocket.jupyter.org
	// subprotocol and falls back to JSON frames when the server does not pick it.
	ProtocolAuto Protocol = iota
	// ProtocolJSON speaks only the JSON-frame protocol of jupyter-server 1.x.
	ProtocolJSON
)

// Config says which server to talk to and how. The zero value of every field
// but URL is a working default.
type Config struct {
	// URL is the server's base URL, e.g. "http://127.0.0.1:8888/" or
	// "https://gateway.example/prefix/". https gives wss for the websocket.
	URL string
	// Token is sent as "Authorization: token <Token>"; empty sends none.
	Token string
	// TLSClientConfig is used for https and wss; nil uses Go's defaults.
	// CAFile, ClientCertFile/ClientKeyFile and InsecureSkipVerify add to it.
	TLSClientConfig *tls.Config
	// CAFile is a PEM file of CA certificates trusted for the server, in
	// addition to the system's (a gateway with a private CA).
	CAFile string
	// ClientCertFile and ClientKeyFile are a PEM client certificate and its
	// key, presented to servers that require one (mutual TLS).
	ClientCertFile, ClientKeyFile string
	// InsecureSkipVerify accepts any server certificate: anyone on the path
	// can then read the token and the code. For tests of a set-up only.
	InsecureSkipVerify bool
	// Headers are added to every REST request and websocket handshake (an
	// auth proxy in front of the gateway); Authorization here replaces the
	// token's.
	Headers map[string]string
	// KernelEnv is sent as "env" in every kernel-start request (POST
	// api/kernels). Enterprise Gateway reads KERNEL_USERNAME (its
	// authorization), KERNEL_NAMESPACE, KERNEL_LAUNCH_TIMEOUT and other
	// KERNEL_* values from it; Kernel Gateway passes KERNEL_* (and the names
	// its env_whitelist allows) into the kernel's environment; Jupyter Server
	// 1.x ignores it. Nil sends no "env".
	KernelEnv map[string]string
	// KernelNames maps a language to a kernel spec name, overriding the
	// lookup by the specs' language field.
	KernelNames map[string]string
	// Protocol is the websocket protocol; default ProtocolAuto.
	Protocol Protocol
	// MaxMessageSize is the largest websocket message the server accepts;
	// larger requests fail with core.KindTooLarge instead of breaking the
	// connection. Default 10 MiB (tornado's websocket_max_message_size).
	MaxMessageSize int
	// PingInterval is how often the client pings; a connection with no frame
	// for PingInterval+PongTimeout is considered lost. Defaults 15 s and 10 s.
	PingInterval time.Duration
	PongTimeout  time.Duration
	// ReconnectTimeout bounds how long a kernel tries to reconnect after its
	// websocket dropped before it is given up for good. Default 1 minute.
	ReconnectTimeout time.Duration
	// StartTimeout bounds the kernel-start request (POST api/kernels).
	// Enterprise Gateway answers it only once a remote kernel is up (a pod
	// scheduled, its image pulled). A kernel the server creates after the
	// start was abandoned is deleted once it appears. Default 2 minutes.
	StartTimeout time.Duration
	// ConnectTimeout bounds opening the kernel's websocket: the server holds
	// the upgrade until the kernel answers, so a slow kernel start shows here.
	// Default 2 minutes.
	ConnectTimeout time.Duration
	// RestartTimeout bounds a restart: the restart request and the wait for
	// the new kernel's output channel. Default 2 minutes.
	RestartTimeout time.Duration
	// KeepAlive, when positive, sends the kernel a kernel_info_request this
	// often while it is otherwise idle, so that a server that culls idle
	// kernels (cull_idle_timeout, with cull_connected) keeps it for as long
	// as its context exists: the request's status messages count as
	// activity. 0: off, the server's culling applies.
	KeepAlive time.Duration
	// DisableQuickAck turns off re-arming TCP_QUICKACK (Linux) after each
	// read; only useful to measure what it saves.
	DisableQuickAck bool

	// Warn, when set, logs what the transport does on its own that an
	// operator should hear of: a kernel replaced because its websocket did
	// not answer, the kernel of an abandoned start deleted. Its signature is
	// slog.Logger.Warn's and hclog.Logger.Warn's.
	Warn func(msg string, keyvals ...any)

	// answerTimeout is answerTimeout (transport.go) unless a test shortens it.
	answerTimeout time.Duration
	// deleteAnswerTimeout is deleteAnswerTimeout (reap.go) unless a test
	// shortens it.
	deleteAnswerTimeout time.Duration
}

const defaultMaxMessageSize = 10 << 20

// DefaultKernelTimeout is the default of StartTimeout, ConnectTimeout and
// RestartTimeout.
const DefaultKernelTimeout = 2 * time.Minute

func (c Config) withDefaults() Config {
	if c.MaxMessageSize <= 0 {
		c.MaxMessageSize = defaultMaxMessageSize
	}
	if c.PingInterval <= 0 {
		c.PingInterval = 15 * time.Second
	}
	if c.PongTimeout <= 0 {
		c.PongTimeout = 10 * time.Second
	}
	if c.ReconnectTimeout <= 0 {
		c.ReconnectTimeout = time.Minute
	}
	if c.Warn == nil {
		c.Warn = func(string, ...any) {}
	}
	if c.answerTimeout <= 0 {
		c.answerTimeout = answerTimeout
	}
	if c.deleteAnswerTimeout <= 0 {
		c.deleteAnswerTimeout = deleteAnswerTimeout
	}
	for _, d := range []*time.Duration{&c.StartTimeout, &c.ConnectTimeout, &c.RestartTimeout} {
		if *d <= 0 {
			*d = DefaultKernelTimeout
		}
	}
	return c
}
