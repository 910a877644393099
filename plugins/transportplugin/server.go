package transportplugin

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/kernelhost/kernelhost/core"
	pb "github.com/kernelhost/kernelhost/plugins/transportplugin/proto"
)

// Batching limits for the Messages stream: a batch holds what the kernel has
// ready, up to these bounds, so a fast stream costs few gRPC frames while a
// slow one still gets each message out at once.
const (
	maxBatchMessages = 512
	maxBatchBytes    = 1 << 20
)

// server serves one core.Transport over the protocol, inside the plugin.
type server struct {
	pb.UnimplementedTransportServer
	t core.Transport

	mu      sync.Mutex
	next    uint64
	kernels map[string]*serverKernel
}

type serverKernel struct {
	k          core.Kernel
	subscribed bool // a Messages stream is (or was) open; only one is allowed
}

func newServer(t core.Transport) *server {
	return &server{t: t, kernels: make(map[string]*serverKernel)}
}

func (s *server) kernel(id string) (*serverKernel, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k, ok := s.kernels[id]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "no kernel %q in this plugin (shut down, lost, or started by an earlier plugin process)", id)
	}
	return k, nil
}

func (s *server) forget(id string) {
	s.mu.Lock()
	delete(s.kernels, id)
	s.mu.Unlock()
}

func (s *server) Describe(context.Context, *pb.DescribeRequest) (*pb.DescribeResponse, error) {
	info := s.t.Info()
	return &pb.DescribeResponse{
		Name:            info.Name,
		Version:         info.Version,
		Languages:       info.Languages,
		ProtocolVersion: ProtocolVersion,
	}, nil
}

func (s *server) StartKernel(ctx context.Context, req *pb.StartKernelRequest) (*pb.StartKernelResponse, error) {
	k, err := s.t.StartKernel(ctx, core.KernelSpec{Language: req.Language, Cwd: string(req.Cwd)})
	if err != nil {
		return nil, toStatus(err)
	}
	s.mu.Lock()
	s.next++
	id := strconv.FormatUint(s.next, 10)
	s.kernels[id] = &serverKernel{k: k}
	s.mu.Unlock()
	return &pb.StartKernelResponse{KernelId: id}, nil
}

func (s *server) Execute(ctx context.Context, req *pb.ExecuteRequest) (*pb.ExecuteResponse, error) {
	k, err := s.kernel(req.KernelId)
	if err != nil {
		return nil, err
	}
	err = k.k.Execute(ctx, core.ExecuteRequest{MsgID: req.MsgId, Code: string(req.Code), Silent: req.Silent})
	if err != nil {
		return nil, toStatus(err)
	}
	return &pb.ExecuteResponse{}, nil
}

// Messages forwards the kernel's messages until its channel closes. Messages
// stay in the kernel's channel until the host subscribes, so none is lost
// between StartKernel and this call.
func (s *server) Messages(req *pb.MessagesRequest, stream pb.Transport_MessagesServer) error {
	s.mu.Lock()
	k, ok := s.kernels[req.KernelId]
	if ok && k.subscribed {
		s.mu.Unlock()
		return status.Errorf(codes.FailedPrecondition, "kernel %q already has a Messages stream", req.KernelId)
	}
	if ok {
		k.subscribed = true
	}
	s.mu.Unlock()
	if !ok {
		return status.Errorf(codes.NotFound, "no kernel %q in this plugin", req.KernelId)
	}
	ch := k.k.Messages()
	ctx := stream.Context()
	batch := &pb.MessageBatch{}
	for {
		batch.Messages = batch.Messages[:0]
		select {
		case <-ctx.Done():
			return ctx.Err()
		case m, ok := <-ch:
			if !ok {
				s.forget(req.KernelId)
				return nil
			}
			batch.Messages = append(batch.Messages, messageToPB(m))
		}
		closed := fill(batch, ch)
		if err := stream.Send(batch); err != nil {
			return err
		}
		if closed {
			s.forget(req.KernelId)
			return nil
		}
	}
}

// fill adds the messages that are ready without waiting, within the batch
// limits. It reports whether the channel was found closed.
func fill(batch *pb.MessageBatch, ch <-chan core.Message) (closed bool) {
	size := proto.Size(batch.Messages[0])
	for len(batch.Messages) < maxBatchMessages && size < maxBatchBytes {
		select {
		case m, ok := <-ch:
			if !ok {
				return true
			}
			pm := messageToPB(m)
			size += proto.Size(pm)
			batch.Messages = append(batch.Messages, pm)
		default:
			return false
		}
	}
	return false
}

func (s *server) Interrupt(ctx context.Context, req *pb.InterruptRequest) (*pb.InterruptResponse, error) {
	k, err := s.kernel(req.KernelId)
	if err != nil {
		return nil, err
	}
	if err := k.k.Interrupt(ctx); err != nil {
		return nil, toStatus(err)
	}
	return &pb.InterruptResponse{}, nil
}

func (s *server) Restart(ctx context.Context, req *pb.RestartRequest) (*pb.RestartResponse, error) {
	k, err := s.kernel(req.KernelId)
	if err != nil {
		return nil, err
	}
	if err := k.k.Restart(ctx); err != nil {
		return nil, toStatus(err)
	}
	return &pb.RestartResponse{}, nil
}

func (s *server) Shutdown(ctx context.Context, req *pb.ShutdownRequest) (*pb.ShutdownResponse, error) {
	k, err := s.kernel(req.KernelId)
	if err != nil {
		// Shutdown is safe to call more than once.
		if status.Code(err) == codes.NotFound {
			return &pb.ShutdownResponse{}, nil
		}
		return nil, err
	}
	err = k.k.Shutdown(ctx)
	s.forget(req.KernelId)
	if err != nil {
		return nil, toStatus(err)
	}
	return &pb.ShutdownResponse{}, nil
}

// shutdownAll stops every kernel the plugin still holds; the plugin calls it
// on its way out so that no interpreter outlives it.
func (s *server) shutdownAll(timeout time.Duration) {
	s.mu.Lock()
	ks := make([]core.Kernel, 0, len(s.kernels))
	for id, k := range s.kernels {
		ks = append(ks, k.k)
		delete(s.kernels, id)
	}
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var wg sync.WaitGroup
	for _, k := range ks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = k.Shutdown(ctx)
		}()
	}
	wg.Wait()
}

// toStatus turns a transport error into a gRPC status that keeps its text, so
// the host can show the author's message unchanged.
func toStatus(err error) error {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	return status.Error(codes.Unknown, fmt.Sprint(err))
}
