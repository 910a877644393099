// Package pluginrpc is both ends of the transport plugin protocol: the
// plugin's (Serve, ServeConfigured, server.go, socket.go's listener) and the
// host's (Launch, Supervised, kernel.go, runner.go), over the wire code they
// share (protocol.go, errors.go, settings.go, socket.go's frames). Plugin
// authors reach it through package transportplugin, the host through
// package pluginhost; its tests drive both ends together, with real plugin
// processes.
//
// The host starts the binary with Launch and gets back a *Supervised, which is
// itself a core.Transport. The wire protocol is the gRPC service in
// ../../proto/transport.proto. Each kernel is one bidirectional stream
// (server.go is the plugin's end, kernel.go the host's), carried on the
// plugin's kernel socket (socket.go) or on a gRPC stream
// (Config.GRPCKernelStreams, or a plugin without the socket).
package pluginrpc
