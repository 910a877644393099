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

	"github.com/kernelhost/kernelhost/core"
	pb "github.com/kernelhost/kernelhost/plugins/transportplugin/proto"
)

// Batching limits for the Messages stream: a batch holds what the kernel has
// ready, up to these bounds, so a fast stream costs few gRPC frames while a
// slow one still gets each message out at once.
const (
	maxBatchMessages = 512
	maxBatchBytes    = 1 << 20
	// streamLinger bounds how long stream output waits for more output to
	// share its frame; see batcher.linger.
	streamLinger = 500 * time.Microsecond
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
	var b batcher
	linger := time.NewTimer(time.Hour)
	linger.Stop()
	for {
		b.reset()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case m, ok := <-ch:
			if !ok {
				s.forget(req.KernelId)
				return nil
			}
			b.add(m)
		}
		closed := b.fill(ch)
		if !closed && b.streaming() {
			closed = b.linger(ch, linger)
		}
		if err := stream.Send(b.batch()); err != nil {
			return err
		}
		if closed {
			s.forget(req.KernelId)
			return nil
		}
	}
}

// batcher builds one MessageBatch from what the kernel has ready. It never
// waits for more: a slow kernel's messages go out one by one, at once.
//
// Consecutive stream messages of the same request and stream are merged
// into one, as a Jupyter kernel merges writes that come faster than they
// are read; the merged message keeps the first one's timestamp, when its
// output began. A kernel that streams one message per line (200,000 lines)
// otherwise pays the per-message cost of protobuf, the gRPC frame share and
// the host's channel hand-off 200,000 times; merged it pays it per batch.
type batcher struct {
	msgs []core.Message
	text [][]byte // merged stream text of msgs[i], nil when msgs[i].Text is used as is
	size int
	pb   pb.MessageBatch
}

func (b *batcher) reset() {
	b.msgs = b.msgs[:0]
	b.text = b.text[:0]
	b.size = 0
}

func (b *batcher) add(m core.Message) {
	if n := len(b.msgs); n > 0 && m.Type == core.MsgStream {
		last := &b.msgs[n-1]
		if last.Type == core.MsgStream && last.ParentID == m.ParentID && last.Name == m.Name {
			if b.text[n-1] == nil {
				b.text[n-1] = append(make([]byte, 0, 2*(len(last.Text)+len(m.Text))), last.Text...)
			}
			b.text[n-1] = append(b.text[n-1], m.Text...)
			b.size += len(m.Text)
			return
		}
	}
	b.msgs = append(b.msgs, m)
	b.text = append(b.text, nil)
	b.size += approxSize(m)
}

// approxSize is a cheap upper-bound-ish size of m on the wire, for the
// batch byte limit (proto.Size would encode every message twice).
func approxSize(m core.Message) int {
	n := 64 + len(m.ParentID) + len(m.Text) + len(m.EName) + len(m.EValue)
	for k, v := range m.Data {
		n += len(k) + len(v) + 8
	}
	for _, l := range m.Traceback {
		n += len(l) + 4
	}
	return n
}

// fill adds the messages that are ready without waiting, within the batch
// limits. It reports whether the channel was found closed.
func (b *batcher) fill(ch <-chan core.Message) (closed bool) {
	for len(b.msgs) < maxBatchMessages && b.size < maxBatchBytes {
		select {
		case m, ok := <-ch:
			if !ok {
				return true
			}
			b.add(m)
		default:
			return false
		}
	}
	return false
}

// streaming says the batch ends in stream output and has room: more output
// is likely to follow within moments.
func (b *batcher) streaming() bool {
	return len(b.msgs) < maxBatchMessages && b.size < maxBatchBytes &&
		b.msgs[len(b.msgs)-1].Type == core.MsgStream
}

// linger waits up to streamLinger for more messages while the batch ends in
// stream output, and returns at once when anything else arrives (a reply,
// an idle: the end of a request is never held back) or the batch is full.
//
// Why: a kernel streaming a line at a time produces messages a little slower
// than this loop forwards them, so without waiting every line would cost a
// gRPC frame, two wake-ups and the protobuf work on both sides, on the same
// two cores the interpreter needs. Waiting a fraction of a millisecond while
// output flows turns thousands of frames into a few, merged.
func (b *batcher) linger(ch <-chan core.Message, t *time.Timer) (closed bool) {
	t.Reset(streamLinger)
	defer t.Stop()
	for b.streaming() {
		select {
		case m, ok := <-ch:
			if !ok {
				return true
			}
			b.add(m)
			if b.fill(ch) {
				return true
			}
		case <-t.C:
			return false
		}
	}
	return false
}

// batch returns the protobuf form of the batch, reusing its slice.
func (b *batcher) batch() *pb.MessageBatch {
	b.pb.Messages = b.pb.Messages[:0]
	for i, m := range b.msgs {
		pm := messageToPB(m)
		if b.text[i] != nil {
			pm.Text = b.text[i]
		}
		b.pb.Messages = append(b.pb.Messages, pm)
	}
	return &b.pb
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
	case core.KindOf(err) == core.KindInvalid:
		// The request was wrong (a cwd that does not exist): the host turns
		// this back into a KindInvalid error, a client error, not ours.
		return status.Error(codes.InvalidArgument, err.Error())
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	return status.Error(codes.Unknown, fmt.Sprint(err))
}
