package pluginrpc

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/kernelhost/kernelhost/core"
	"github.com/kernelhost/kernelhost/internal/testkit"
	pb "github.com/kernelhost/kernelhost/plugins/transportplugin/proto"
)

// The floor of a round trip between two processes on this machine, to set
// BenchmarkRoundTrip's figures against: what the plugin boundary could cost
// at best with each layer it uses.
//
//   - unix: a 64-byte ping-pong on a bare unix socket between two Go
//     processes (two wake-ups, four syscalls; no gRPC, no TLS), trips back
//     to back.
//   - unix-after-idle: the same with both processes idle for about a
//     millisecond before each trip, as a plugin is while its interpreter
//     runs a `1+1`: on a virtual machine a wake-up after an idle stretch
//     costs far more than one in a tight loop, and that is what an
//     execution's hops through a plugin pay.
//   - grpc-bidi and grpc-bidi-tls: one KernelCall out and one KernelFrame
//     holding the five messages of a `1+1` back, on one long-lived gRPC
//     bidirectional stream set up by go-plugin exactly as Launch does
//     (unix socket, our window and message-size options), with AutoMTLS off
//     and on. This is protocol v2's round trip minus the kernel, the
//     batcher and the host's message channel.
func BenchmarkFloor(b *testing.B) {
	b.Run("unix", func(b *testing.B) { benchFloorUnix(b, 0) })
	b.Run("unix-after-idle", func(b *testing.B) { benchFloorUnix(b, time.Millisecond) })
	b.Run("grpc-bidi", func(b *testing.B) { benchFloorGRPC(b, false) })
	b.Run("grpc-bidi-tls", func(b *testing.B) { benchFloorGRPC(b, true) })
}

func reportRoundTrips(b *testing.B, d []time.Duration) {
	b.ReportMetric(float64(testkit.Quantile(d, 0.5).Microseconds()), "p50-µs")
	b.ReportMetric(float64(testkit.Quantile(d, 0.9).Microseconds()), "p90-µs")
}

// benchFloorUnix times ping-pongs with the peer process, each after idle
// (time.Sleep: both processes sleep, nothing spins).
func benchFloorUnix(b *testing.B, idle time.Duration) {
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	sock := filepath.Join(b.TempDir(), "floor.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	peer := exec.Command(exe)
	peer.Env = append(os.Environ(), helperEnv+"=floor-unix", "FLOOR_SOCK="+sock)
	peer.Stderr = os.Stderr
	if err := peer.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { peer.Process.Kill(); peer.Wait() }()
	ln.(*net.UnixListener).SetDeadline(time.Now().Add(30 * time.Second))
	c, err := ln.Accept()
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	buf := make([]byte, 64)
	trip := func() {
		if _, err := c.Write(buf); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(c, buf); err != nil {
			b.Fatal(err)
		}
	}
	for range 200 {
		trip()
	}
	var d []time.Duration
	for b.Loop() {
		if idle > 0 {
			time.Sleep(idle)
		}
		t0 := time.Now()
		trip()
		d = append(d, time.Since(t0))
	}
	reportRoundTrips(b, d)
}

// floorUnixPeer echoes 64-byte pings on FLOOR_SOCK until it closes.
func floorUnixPeer() {
	c, err := net.Dial("unix", os.Getenv("FLOOR_SOCK"))
	if err != nil {
		os.Exit(1)
	}
	buf := make([]byte, 64)
	for {
		if _, err := io.ReadFull(c, buf); err != nil {
			return
		}
		if _, err := c.Write(buf); err != nil {
			return
		}
	}
}

// floorPlugin serves (plugin side) or dials (host side) the bare echo stream.
type floorPlugin struct {
	plugin.NetRPCUnsupportedPlugin
}

var floorDesc = grpc.ServiceDesc{
	ServiceName: "kernelhost.floor.Echo",
	HandlerType: (*any)(nil),
	Streams: []grpc.StreamDesc{{
		StreamName:    "Echo",
		ServerStreams: true,
		ClientStreams: true,
		Handler: func(_ any, stream grpc.ServerStream) error {
			frame := floorFrame()
			for {
				var c pb.KernelCall
				if err := stream.RecvMsg(&c); err != nil {
					return nil
				}
				frame.Results[0].Id = c.Id
				if err := stream.SendMsg(frame); err != nil {
					return err
				}
			}
		},
	}},
}

// floorFrame is what the echo kernel's round trip sends back: five
// messages and a result.
func floorFrame() *pb.KernelFrame {
	id := "rt"
	ms := []core.Message{
		{ParentID: id, Type: core.MsgStatus, State: core.StateBusy},
		{ParentID: id, Type: core.MsgExecuteInput, ExecutionCount: 1},
		{ParentID: id, Type: core.MsgExecuteResult, ExecutionCount: 1, Data: map[string]json.RawMessage{"text/plain": json.RawMessage(`"2"`)}},
		{ParentID: id, Type: core.MsgExecuteReply, ExecutionCount: 1, Status: core.ReplyOK},
		{ParentID: id, Type: core.MsgStatus, State: core.StateIdle},
	}
	f := &pb.KernelFrame{Results: []*pb.CallResult{{}}}
	for _, m := range ms {
		f.Messages = append(f.Messages, messageToPB(m))
	}
	return f
}

func (floorPlugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	s.RegisterService(&floorDesc, nil)
	return nil
}

func (floorPlugin) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return c, nil
}

const floorVersion = 99

func floorGRPCPeer() {
	restoreHandshakeEnv()
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig:  handshake,
		VersionedPlugins: map[int]plugin.PluginSet{floorVersion: {"floor": floorPlugin{}}},
		GRPCServer: func(opts []grpc.ServerOption) *grpc.Server {
			return grpc.NewServer(append(opts, grpc.MaxRecvMsgSize(MaxMessageBytes), grpc.MaxSendMsgSize(MaxMessageBytes),
				grpc.InitialWindowSize(windowSize), grpc.InitialConnWindowSize(windowSize))...)
		},
		Logger: Logger(),
	})
}

func benchFloorGRPC(b *testing.B, tls bool) {
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), helperEnv+"=floor-grpc")
	client := plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:  handshake,
		VersionedPlugins: map[int]plugin.PluginSet{floorVersion: {"floor": floorPlugin{}}},
		Cmd:              cmd,
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		AutoMTLS:         tls,
		Logger:           newSlogAdapter(discardLogger(), "", hclogLevel(0)),
		GRPCDialOptions: []grpc.DialOption{
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxMessageBytes), grpc.MaxCallSendMsgSize(MaxMessageBytes)),
			grpc.WithInitialWindowSize(windowSize), grpc.WithInitialConnWindowSize(windowSize),
		},
	})
	defer client.Kill()
	rpc, err := client.Client()
	if err != nil {
		b.Fatal(err)
	}
	raw, err := rpc.Dispense("floor")
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := raw.(*grpc.ClientConn).NewStream(ctx, &floorDesc.Streams[0], "/kernelhost.floor.Echo/Echo")
	if err != nil {
		b.Fatal(err)
	}
	call := &pb.KernelCall{Call: &pb.KernelCall_Execute{Execute: &pb.Execute{MsgId: "rt", Code: []byte("1+1")}}}
	trip := func() {
		call.Id++
		if err := stream.SendMsg(call); err != nil {
			b.Fatal(err)
		}
		var f pb.KernelFrame
		if err := stream.RecvMsg(&f); err != nil {
			b.Fatal(err)
		}
		if len(f.Messages) != 5 || f.Results[0].Id != call.Id {
			b.Fatalf("echo frame: %d messages, result %d, want 5 and %d", len(f.Messages), f.Results[0].Id, call.Id)
		}
		for _, m := range f.Messages {
			_ = messageFromPB(m) // as the host's pump does
		}
	}
	for range 200 {
		trip()
	}
	var d []time.Duration
	for b.Loop() {
		t0 := time.Now()
		trip()
		d = append(d, time.Since(t0))
	}
	reportRoundTrips(b, d)
}
