package pluginrpc

import (
	"context"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/kernelhost/kernelhost/core"
)

// kernelShutdownTimeout bounds how long a plugin on its way out waits for its
// kernels to stop. It is below go-plugin's 2 s grace period, after which the
// host kills the plugin outright.
const kernelShutdownTimeout = 1500 * time.Millisecond

// Serve is transportplugin.Serve: the plugin describes no settings.
func Serve(t core.Transport) {
	describeIfAsked(Description{})
	serve(func(context.Context, Settings) (core.Transport, error) { return t, nil }, ProtocolVersion)
}

// logOutput is the plugin's stderr as the process started with it, which
// the host's go-plugin client reads as the plugin's log. Serve points
// os.Stderr elsewhere (go-plugin's stdio stream, which the host logs as
// plain text lines): a logger made after Serve on os.Stderr would reach the
// host as raw JSON at INFO, a warning included.
var logOutput = os.Stderr

// Logger returns the logger a plugin should use, made before or after Serve:
// hclog JSON on the plugin's log output, which the host parses and re-logs
// under the plugin's name at the same level.
func Logger() hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{
		Name:       "transport",
		Level:      hclog.Debug,
		Output:     logOutput,
		JSONFormat: true,
	})
}

// streamWorkers is the number of goroutines serving calls; calls beyond it
// get a goroutine of their own, as by default.
const streamWorkers = 4

// pluginMaxProcs is the plugin's GOMAXPROCS unless its environment sets one.
//
// Why 1: a plugin shuttles frames between the host and its kernels, and each
// round trip hands work from one goroutine to another (socket reader, then
// the kernel's sender). With a second P idle, every such hand-off makes the
// Go scheduler wake another thread to spin and steal the goroutine, and the
// sysmon thread takes the P away in the socket write. With one P there are
// fewer context switches and less CPU per round trip, and the round trip and
// a fast stream are quicker (docs/benchmarks-plugins.md, "Round 2"), on a
// machine where the host and the interpreters need the cores. Interpreters
// are processes of their own and keep every core.
const pluginMaxProcs = 1

// serve is ServeConfigured with the protocol version as a parameter, so
// tests can build a plugin that speaks a version the host does not.
func serve(newTransport NewTransport, version int) {
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(pluginMaxProcs)
	}
	log := Logger()
	srv := newServer(newTransport, log)
	keepStdoutForHandshake(log)

	done := make(chan struct{})
	defer close(done)
	becomeSubreaper(log, done)
	go stopWhenTold(srv, log, done)

	restoreHandshakeEnv() // for plugin.Serve to read; see env.go
	// The kernel socket goes in go-plugin's private socket directory.
	if ks, err := listenKernelSocket(os.Getenv("PLUGIN_UNIX_SOCKET_DIR")); err != nil {
		log.Warn("no kernel socket; kernels go over gRPC streams (slower)", "error", err)
	} else {
		srv.socket = ks
		defer ks.close()
		go ks.serve(srv, log)
	}
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig: handshake,
		VersionedPlugins: map[int]plugin.PluginSet{
			version: {pluginName: &grpcPlugin{srv: srv}},
		},
		GRPCServer: newGRPCServer,
		Logger:     log,
	})
	// The host closed the plugin (client.Kill): stop what is left.
	srv.stop()
	srv.closeTransport()
}

// stopWhenTold stops the plugin's kernels and exits the process when the host
// dies (the plugin's parent changes) or sends SIGTERM, until done closes.
func stopWhenTold(srv *server, log hclog.Logger, done <-chan struct{}) {
	exit := func(why string) {
		log.Info("stopping kernels and exiting", "reason", why)
		srv.stop()
		srv.closeTransport() // its own processes: the subprocess transport's pooled interpreters
		os.Exit(0)
	}
	go watchParent(done, exit)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM)
	defer signal.Stop(sig)
	select {
	case <-sig:
		exit("SIGTERM")
	case <-done:
	}
}

// stop ends the plugin's kernels and the processes it adopted as a
// subreaper.
func (s *server) stop() {
	s.shutdownAll(kernelShutdownTimeout)
	killAdopted()
}

// newGRPCServer is the plugin's gRPC server, with the protocol's message and
// window sizes.
func newGRPCServer(opts []grpc.ServerOption) *grpc.Server {
	opts = append(opts, grpc.MaxRecvMsgSize(MaxMessageBytes), grpc.MaxSendMsgSize(MaxMessageBytes),
		grpc.InitialWindowSize(windowSize), grpc.InitialConnWindowSize(windowSize),
		// Serve unary calls on long-lived workers: a fresh goroutine per
		// call (gRPC's default) grows its stack on every Execute.
		grpc.NumStreamWorkers(streamWorkers),
		// The host's first call means go-plugin is done with its
		// environment variables: take them out before any call can start
		// an interpreter that would inherit them.
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			scrubHandshakeEnv()
			return h(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			scrubHandshakeEnv()
			return h(srv, ss)
		}))
	return grpc.NewServer(opts...)
}
