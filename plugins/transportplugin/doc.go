// Package transportplugin is what a transport plugin's author uses: Serve (or
// ServeConfigured, for a transport built from settings the plugin declares,
// Setting, which the host merges into its own), and Logger. A transport author writes a core.Transport and a main of a few
// lines:
//
//	func main() { transportplugin.Serve(mytransport.New()) }
//
// Nothing of the host is here: the host launches and supervises plugins with
// package pluginhost. Both ends of the protocol live in internal/pluginrpc,
// which these two small packages expose to their two audiences, so the
// protocol can change without either of them changing.
//
// The wire protocol is the gRPC service in proto/transport.proto, version
// ProtocolVersion, negotiated in the go-plugin handshake; authors never see
// its types. Each kernel is one bidirectional stream: calls one way, frames
// of messages and call results the other, carried on the plugin's kernel
// socket (length-prefixed frames on a unix socket, the fast path) or on a
// gRPC stream. A transport's error crosses as its text and its
// core.ErrorKind, so the host's caller sees the same kind as with the
// transport linked in.
package transportplugin
