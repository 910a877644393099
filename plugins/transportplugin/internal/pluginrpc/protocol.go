package pluginrpc

import (
	"context"
	"encoding/json"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/kernelhost/kernelhost/core"
	pb "github.com/kernelhost/kernelhost/plugins/transportplugin/proto"
)

// ProtocolVersion is the transport plugin protocol version this package
// speaks. go-plugin negotiates it in the handshake: a host and a plugin that
// share no version refuse each other at start-up with a clear error.
//
// Version 2 carries each kernel on one bidirectional stream (an execution is
// one frame each way); version 1 (a unary call per operation and a server
// stream of messages) is gone: host and plugins are built from one tree.
const ProtocolVersion = 2

// MaxMessageBytes bounds one gRPC message in both directions, on both sides.
// gRPC's default receive limit is 4 MiB, far below a rich result such as a
// 20 MB PNG (27 MB as base64 JSON); each side must raise its own limit.
const MaxMessageBytes = 256 << 20

// windowSize is the HTTP/2 flow-control window of each stream and of the
// connection, on both sides. Setting it switches off gRPC's BDP estimator,
// which otherwise answers incoming data with PING frames to size the window
// dynamically: on a round trip of a few small frames that is one more write
// and one more wake-up of each process per frame, for nothing on a unix
// socket. 4 MiB keeps a fast stream (200,000 lines) from stalling on window
// updates.
const windowSize = 4 << 20

// pluginName is the key of the one plugin in the go-plugin plugin set.
const pluginName = "transport"

// handshake makes sure a binary is meant to be a kernelhost transport plugin.
// It is a UX check, not a security measure (see go-plugin's HandshakeConfig).
var handshake = plugin.HandshakeConfig{
	MagicCookieKey:   "KERNELHOST_TRANSPORT_PLUGIN",
	MagicCookieValue: "d1f0c5a4-kernelhost-transport",
}

// hostPlugins maps each protocol version the host speaks to its plugin set.
func hostPlugins() map[int]plugin.PluginSet {
	return map[int]plugin.PluginSet{
		ProtocolVersion: {pluginName: &grpcPlugin{}},
	}
}

// grpcPlugin is the go-plugin glue: it registers the server in the plugin and
// wraps the connection on the host.
type grpcPlugin struct {
	plugin.NetRPCUnsupportedPlugin
	srv *server // nil on the host side
}

func (p *grpcPlugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	pb.RegisterTransportServer(s, p.srv)
	return nil
}

func (p *grpcPlugin) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return pb.NewTransportClient(c), nil
}

func messageToPB(m core.Message) *pb.Message {
	out := &pb.Message{
		ParentId:       m.ParentID,
		Type:           string(m.Type),
		Timestamp:      m.Timestamp,
		ExecutionCount: int64(m.ExecutionCount),
		Name:           m.Name,
		Text:           []byte(m.Text),
		Ename:          []byte(m.EName),
		Evalue:         []byte(m.EValue),
		Status:         m.Status,
		State:          m.State,
		Lost:           int64(m.Lost),
	}
	if m.Data != nil {
		out.Data = make(map[string][]byte, len(m.Data))
		for k, v := range m.Data {
			out.Data[k] = []byte(v)
		}
	}
	if m.Traceback != nil {
		out.Traceback = make([][]byte, len(m.Traceback))
		for i, l := range m.Traceback {
			out.Traceback[i] = []byte(l)
		}
	}
	return out
}

func messageFromPB(m *pb.Message) core.Message {
	out := core.Message{
		ParentID:       m.ParentId,
		Type:           core.MessageType(m.Type),
		Timestamp:      m.Timestamp,
		ExecutionCount: int(m.ExecutionCount),
		Name:           m.Name,
		Text:           string(m.Text),
		EName:          string(m.Ename),
		EValue:         string(m.Evalue),
		Status:         m.Status,
		State:          m.State,
		Lost:           int(m.Lost),
	}
	if m.Data != nil {
		out.Data = make(map[string]json.RawMessage, len(m.Data))
		for k, v := range m.Data {
			out.Data[k] = json.RawMessage(v)
		}
	}
	if m.Traceback != nil {
		out.Traceback = make([]string, len(m.Traceback))
		for i, l := range m.Traceback {
			out.Traceback[i] = string(l)
		}
	}
	return out
}
