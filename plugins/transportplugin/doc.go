// Package transportplugin runs a core.Transport in a separate process with
// hashicorp/go-plugin over gRPC, and is the one package both sides import.
//
// A transport author writes a core.Transport and a main of a few lines:
//
//	func main() { transportplugin.Serve(mytransport.New()) }
//
// The host starts the binary with Launch and gets back a *Supervised, which is
// itself a core.Transport: the engine cannot tell it from an in-process one.
// The supervisor notices at once when the plugin process exits, ends that
// plugin's kernels (a kernel-wide dead status, then their Messages channels
// close), starts the plugin again with bounded backoff, and kills it on Close.
//
// The wire protocol is the gRPC service in proto/transport.proto, version
// ProtocolVersion, negotiated in the go-plugin handshake; authors never see
// its types. Each kernel is one bidirectional stream: calls one way, frames
// of messages and call results the other (server.go is the plugin's end,
// kernel.go the host's), carried on the plugin's kernel socket (socket.go:
// length-prefixed frames on a unix socket, the fast path) or on a gRPC
// stream (Config.GRPCKernelStreams, or a plugin without the socket). A
// transport's error crosses as its text and its core.ErrorKind (errors.go),
// so the host's caller sees the same kind as with the transport linked in.
package transportplugin
