package pluginrpc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
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

// holdForResult bounds how long the plugin holds back a kernel's messages
// while a call on that kernel is still running: the messages an Execute
// produces at once (busy, execute_input, ...) then share one frame with its
// result instead of going out ahead of it in a frame of their own. Calls
// that run longer (a Restart that starts an interpreter) let their messages
// go after this.
const holdForResult = 500 * time.Microsecond

// closeGrace bounds how long a kernel stream stays open after the kernel's
// message channel closed, for the results of calls still running (the
// Shutdown that closed it).
const closeGrace = time.Second

// NewTransport builds a plugin's transport from the host's settings (see
// ServeConfigured). ctx bounds the building only.
type NewTransport func(ctx context.Context, s Settings) (core.Transport, error)

// server serves one core.Transport over the protocol, inside the plugin. It
// builds the transport at the host's Configure call.
type server struct {
	pb.UnimplementedTransportServer
	newTransport NewTransport
	log          hclog.Logger

	configure sync.Mutex     // held while the transport is built
	t         core.Transport // set once, by Configure; read through transport
	tSet      atomic.Bool

	socket *kernelSocket // nil when the plugin could not open one

	mu      sync.Mutex
	kernels map[*session]struct{}
}

// kernelStream is the plugin's end of a kernel stream: a gRPC Kernel stream
// or a kernel socket connection.
type kernelStream interface {
	Recv() (*pb.KernelCall, error)
	Send(*pb.KernelFrame) error
	Context() context.Context
}

func newServer(newTransport NewTransport, log hclog.Logger) *server {
	return &server{newTransport: newTransport, log: log, kernels: make(map[*session]struct{})}
}

// Configure builds the transport from the host's settings, once.
func (s *server) Configure(ctx context.Context, req *pb.ConfigureRequest) (*pb.ConfigureResponse, error) {
	s.configure.Lock()
	defer s.configure.Unlock()
	if s.tSet.Load() {
		return nil, status.Error(codes.FailedPrecondition, "the transport is configured already")
	}
	settings, err := settingsFromPB(req.Settings)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	t, err := s.newTransport(ctx, settings)
	if err != nil {
		// The host reports it as the plugin's start-up error.
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	}
	s.t = t
	s.tSet.Store(true)
	info := t.Info()
	s.log.Info("serving transport", "name", info.Name, "version", info.Version, "languages", info.Languages, "pid", os.Getpid())
	return &pb.ConfigureResponse{}, nil
}

// transport is the configured transport; an error before Configure.
func (s *server) transport() (core.Transport, error) {
	if !s.tSet.Load() {
		return nil, status.Error(codes.FailedPrecondition, "the transport is not configured: the host calls Configure first")
	}
	return s.t, nil
}

// closeTransport closes the transport, if it was built and has a Close
// method (the jupyter transport's stops its background work).
func (s *server) closeTransport() {
	s.configure.Lock()
	defer s.configure.Unlock()
	if !s.tSet.Load() {
		return
	}
	switch c := s.t.(type) {
	case interface{ Close() error }:
		_ = c.Close()
	case interface{ Close() }:
		c.Close()
	}
}

func (s *server) Describe(context.Context, *pb.DescribeRequest) (*pb.DescribeResponse, error) {
	t, err := s.transport()
	if err != nil {
		return nil, err
	}
	info := t.Info()
	d := &pb.DescribeResponse{
		Name:            info.Name,
		Version:         info.Version,
		Languages:       info.Languages,
		ProtocolVersion: ProtocolVersion,
	}
	if s.socket != nil {
		d.KernelSocket, d.KernelToken = s.socket.path, s.socket.token
	}
	return d, nil
}

// session is one kernel and its stream.
type session struct {
	id     string // the host's name for the kernel (Start.kernel_id), for forks
	k      core.Kernel
	stream kernelStream
	ctx    context.Context // the stream's: ends when the host goes away
	done   chan struct{}   // closed when Kernel returns: call goroutines stop

	results chan callResult
	inline  chan inlineCall // unbuffered: taken only by an idle sender
	// pending counts calls whose result the sender has not taken yet; while
	// it is above zero the sender holds messages back (holdForResult).
	pending atomic.Int32

	mu      sync.Mutex
	cancels map[uint64]context.CancelFunc
}

// inlineCall is an Execute handed to the sender to run.
type inlineCall struct {
	c   *pb.KernelCall
	ctx context.Context
}

type callResult struct {
	pb       *pb.CallResult
	shutdown bool // the result of a Shutdown: the stream ends after it
}

// Kernel starts a kernel with the stream's first call (start, or fork of
// another kernel) and then serves it: a goroutine receives calls and runs
// each in a goroutine of its own, and this one sends the kernel's messages
// and the calls' results.
func (s *server) Kernel(stream pb.Transport_KernelServer) error {
	return s.kernel(stream)
}

func (s *server) kernel(stream kernelStream) error {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	t, err := s.transport()
	if err != nil {
		return err
	}
	ctx := stream.Context()
	// The host bounds the start by ending the stream, which cancels ctx.
	var k core.Kernel
	var id string
	switch call := first.Call.(type) {
	case *pb.KernelCall_Start:
		id = call.Start.KernelId
		k, err = t.StartKernel(ctx, core.KernelSpec{Language: call.Start.Language, Cwd: string(call.Start.Cwd)})
	case *pb.KernelCall_Fork:
		id = call.Fork.KernelId
		k, err = s.fork(ctx, t, call.Fork.Source)
	default:
		return status.Error(codes.InvalidArgument, "the first call on a kernel stream must be start or fork")
	}
	if err != nil {
		return stream.Send(&pb.KernelFrame{Results: []*pb.CallResult{result(first.Id, err)}})
	}
	ss := &session{
		id:      id,
		k:       k,
		stream:  stream,
		ctx:     ctx,
		done:    make(chan struct{}),
		results: make(chan callResult, 16),
		inline:  make(chan inlineCall),
		cancels: make(map[uint64]context.CancelFunc),
	}
	s.mu.Lock()
	s.kernels[ss] = struct{}{}
	s.mu.Unlock()
	defer func() {
		close(ss.done)
		s.mu.Lock()
		_, mine := s.kernels[ss]
		delete(s.kernels, ss)
		s.mu.Unlock()
		if mine {
			// The stream ended without a Shutdown (the host went away or
			// gave up on the start): no kernel may outlive its stream.
			// Shutdown is safe to call again if the kernel already ended.
			sctx, cancel := context.WithTimeout(context.Background(), kernelShutdownTimeout)
			_ = k.Shutdown(sctx)
			cancel()
		}
	}()
	if err := stream.Send(&pb.KernelFrame{Results: []*pb.CallResult{{Id: first.Id, Family: familyOf(k)}}}); err != nil {
		return err
	}
	go ss.receive(s)
	return ss.send()
}

// familyOf is k's family for a start, fork or restart result; nil when k
// reports none (not a core.FamilyKernel).
func familyOf(k core.Kernel) *string {
	fk, ok := k.(core.FamilyKernel)
	if !ok {
		return nil
	}
	f := fk.Family()
	return &f
}

// fork copies the running kernel the host named source (core.Forker).
func (s *server) fork(ctx context.Context, t core.Transport, source string) (core.Kernel, error) {
	f, ok := t.(core.Forker)
	if !ok {
		return nil, &core.Error{Kind: core.KindUnsupported, Msg: fmt.Sprintf("the %s transport cannot fork kernels", t.Info().Name)}
	}
	var src core.Kernel
	s.mu.Lock()
	for ss := range s.kernels {
		if source != "" && ss.id == source {
			src = ss.k
			break
		}
	}
	s.mu.Unlock()
	if src == nil {
		return nil, fmt.Errorf("no running kernel %q to fork in this plugin (it was shut down or lost)", source)
	}
	return f.ForkKernel(ctx, src)
}

// runInline runs an Execute on the sender's goroutine and returns what it
// returned. Why: handing the call to a goroutine of its own and its result
// back costs two more wake-ups of a thread per round trip, about as much as
// the socket round trip itself on a busy two-core machine; this way the
// sender wakes once, for the call, runs it, and sends its messages and
// result in one frame.
//
// The kernel's channel must keep draining even if Execute blocks (a kernel
// whose channel is full blocks in Execute until it is drained): if Execute
// has not returned after holdForResult, a helper goroutine forwards
// messages until it does, and is done with the channel before the sender
// touches it again, so messages keep their order. closed reports that the
// helper found the channel closed; sendErr, that its Send failed.
func (ss *session) runInline(ic inlineCall, ch <-chan core.Message) (callErr error, closed bool, sendErr error) {
	ex := ic.c.GetExecute()
	stop := make(chan struct{})
	helperDone := make(chan struct{})
	t := time.AfterFunc(holdForResult, func() {
		defer close(helperDone)
		var hb batcher
		for {
			hb.reset()
			select {
			case <-stop:
				return
			case m, ok := <-ch:
				if !ok {
					closed = true
					return
				}
				hb.add(m)
			}
			closed = hb.fill(ch)
			if sendErr = ss.stream.Send(hb.frame(nil)); sendErr != nil || closed {
				return
			}
		}
	})
	callErr = ss.k.Execute(ic.ctx, core.ExecuteRequest{MsgID: ex.MsgId, Code: string(ex.Code), Silent: ex.Silent})
	if !t.Stop() {
		close(stop)
		<-helperDone
	}
	ss.mu.Lock()
	cancel := ss.cancels[ic.c.Id]
	delete(ss.cancels, ic.c.Id)
	ss.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	return callErr, closed, sendErr
}

// receive reads the host's calls until the stream ends.
func (ss *session) receive(s *server) {
	for {
		c, err := ss.stream.Recv()
		if err != nil {
			return // the stream is over; ctx is cancelled with it
		}
		if c.GetCancel() != nil {
			ss.mu.Lock()
			cancel := ss.cancels[c.Id]
			ss.mu.Unlock()
			if cancel != nil {
				cancel()
			}
			continue
		}
		ctx, cancel := context.WithCancel(ss.ctx)
		ss.mu.Lock()
		ss.cancels[c.Id] = cancel
		ss.mu.Unlock()
		if c.GetExecute() != nil {
			// The sender runs an Execute itself if it is idle (see
			// inlineCall); if it is busy, a goroutine runs it as below.
			select {
			case ss.inline <- inlineCall{c: c, ctx: ctx}:
				continue
			default:
			}
		}
		ss.pending.Add(1)
		go func() {
			err, shutdown := ss.run(ctx, s, c)
			ss.mu.Lock()
			delete(ss.cancels, c.Id)
			ss.mu.Unlock()
			cancel()
			r := result(c.Id, err)
			if _, ok := c.Call.(*pb.KernelCall_Restart); ok {
				r.Family = familyOf(ss.k)
			}
			select {
			case ss.results <- callResult{pb: r, shutdown: shutdown}:
			case <-ss.done:
			}
		}()
	}
}

// run runs one call on the kernel.
func (ss *session) run(ctx context.Context, s *server, c *pb.KernelCall) (err error, shutdown bool) {
	switch call := c.Call.(type) {
	case *pb.KernelCall_Execute:
		return ss.k.Execute(ctx, core.ExecuteRequest{MsgID: call.Execute.MsgId, Code: string(call.Execute.Code), Silent: call.Execute.Silent}), false
	case *pb.KernelCall_Interrupt:
		return ss.k.Interrupt(ctx), false
	case *pb.KernelCall_Restart:
		return ss.k.Restart(ctx), false
	case *pb.KernelCall_Shutdown:
		s.mu.Lock()
		delete(s.kernels, ss)
		s.mu.Unlock()
		return ss.k.Shutdown(ctx), true
	case *pb.KernelCall_Start, *pb.KernelCall_Fork:
		return errors.New("the kernel of this stream is already started"), false
	default:
		return fmt.Errorf("unknown call %T (a newer host?)", c.Call), false
	}
}

// send forwards the kernel's messages and the calls' results, merged and
// batched, until the kernel is shut down, its channel closes or the stream
// ends. Each frame holds what was ready at once; messages come before
// results, and every message the kernel emitted before a call returned goes
// out no later than that call's result.
//
// While a call runs, send waits for its result rather than for the kernel's
// messages (for up to holdForResult): an Execute emits busy and
// execute_input (an echo kernel, its whole reply) before it returns, and
// each message would otherwise wake this goroutine and could go out in a
// frame of its own. Waking once, for the result, and sending one frame is
// most of what a round trip costs on a busy two-core machine.
func (ss *session) send() error {
	sn := &sender{ss: ss, ch: ss.k.Messages(), timer: time.NewTimer(time.Hour)}
	sn.timer.Stop()
	for {
		sn.b.reset()
		sn.res = sn.res[:0]
		if done, err := sn.wait(); done {
			return err
		}
		if err := sn.gather(); err != nil {
			return err
		}
		if err := sn.flush(); err != nil {
			return err
		}
		if sn.last {
			return nil
		}
	}
}

// sender is the state of session.send between its frames.
type sender struct {
	ss      *session
	ch      <-chan core.Message
	b       batcher
	res     []*pb.CallResult
	closed  bool // the kernel's channel closed
	last    bool // a Shutdown's result is in res
	held    bool // the current hold ran out: let messages flow
	timer   *time.Timer
	graceAt time.Time
}

// take adds a call's result to the frame.
func (sn *sender) take(r callResult) {
	sn.ss.pending.Add(-1)
	sn.res = append(sn.res, r.pb)
	sn.last = sn.last || r.shutdown
	sn.held = false
}

// waitResult waits up to d for a result; ok is false if the stream ended.
func (sn *sender) waitResult(d time.Duration) (timedOut, ok bool) {
	sn.timer.Reset(d)
	select {
	case r := <-sn.ss.results:
		sn.timer.Stop()
		sn.take(r)
		return false, true
	case <-sn.timer.C:
		return true, true
	case <-sn.ss.ctx.Done():
		sn.timer.Stop()
		return false, false
	}
}

// hold waits up to holdForResult for the result of a running call; after a
// hold that ran out, messages flow until the next result.
func (sn *sender) hold() error {
	timedOut, ok := sn.waitResult(holdForResult)
	if !ok {
		return sn.ss.ctx.Err()
	}
	sn.held = timedOut
	return nil
}

// wait waits for the first thing of the next frame: a result, an inline
// Execute (which it runs), or a message. done reports that send is over,
// with err (nil when the kernel's channel closed and the results due are in
// or overdue).
func (sn *sender) wait() (done bool, err error) {
	ss := sn.ss
	switch {
	case sn.closed:
		// Only results can still come: wait for the pending ones, a little.
		if ss.pending.Load() == 0 {
			return true, nil
		}
		if sn.graceAt.IsZero() {
			sn.graceAt = time.Now().Add(closeGrace)
		}
		timedOut, ok := sn.waitResult(time.Until(sn.graceAt))
		if !ok {
			return true, ss.ctx.Err()
		}
		return timedOut, nil
	case ss.pending.Load() > 0 && !sn.held:
		err := sn.hold()
		return err != nil, err
	}
	select {
	case <-ss.ctx.Done():
		return true, ss.ctx.Err()
	case r := <-ss.results:
		sn.take(r)
	case ic := <-ss.inline:
		callErr, chClosed, err := ss.runInline(ic, sn.ch)
		if err != nil {
			return true, err
		}
		sn.closed = chClosed
		sn.res = append(sn.res, result(ic.c.Id, callErr))
	case m, ok := <-sn.ch:
		if !ok {
			sn.closed = true
		} else {
			sn.b.add(m)
		}
	}
	return false, nil
}

// gather adds to the frame what is ready besides the first thing: the
// kernel's messages, a little more of a stream, and the results that are
// ready, each after the messages its call emitted (they are in ch by then).
func (sn *sender) gather() error {
	if !sn.closed {
		sn.closed = sn.b.fill(sn.ch)
	}
	if len(sn.res) == 0 && !sn.closed && len(sn.b.msgs) > 0 {
		if sn.ss.pending.Load() > 0 && !sn.held {
			// A call came in after this message: its result is due.
			if err := sn.hold(); err != nil {
				return err
			}
			if !sn.closed {
				sn.closed = sn.b.fill(sn.ch)
			}
		} else if sn.b.streaming() {
			sn.closed = sn.b.linger(sn.ch, sn.timer)
		}
	}
	for {
		select {
		case r := <-sn.ss.results:
			sn.take(r)
			if !sn.closed {
				sn.closed = sn.b.fill(sn.ch)
			}
		default:
			return nil
		}
	}
}

// flush sends the frame. A full batch goes out first, so the results follow
// every message their calls emitted.
func (sn *sender) flush() error {
	for len(sn.res) > 0 && !sn.closed && !sn.b.room() {
		if err := sn.ss.stream.Send(sn.b.frame(nil)); err != nil {
			return err
		}
		sn.b.reset()
		sn.closed = sn.b.fill(sn.ch)
	}
	if len(sn.b.msgs) > 0 || len(sn.res) > 0 {
		return sn.ss.stream.Send(sn.b.frame(sn.res))
	}
	return nil
}

// batcher builds the messages of one KernelFrame from what the kernel has ready. It never
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
	pb   pb.KernelFrame
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

// room says the batch can take more messages.
func (b *batcher) room() bool {
	return len(b.msgs) < maxBatchMessages && b.size < maxBatchBytes
}

// streaming says the batch ends in stream output and has room: more output
// is likely to follow within moments.
func (b *batcher) streaming() bool {
	return b.room() && len(b.msgs) > 0 && b.msgs[len(b.msgs)-1].Type == core.MsgStream
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

// frame returns the batch as a frame with results, reusing its slice.
func (b *batcher) frame(results []*pb.CallResult) *pb.KernelFrame {
	b.pb.Results = results
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

// shutdownAll stops every kernel the plugin still holds; the plugin calls it
// on its way out so that no interpreter outlives it.
func (s *server) shutdownAll(timeout time.Duration) {
	s.mu.Lock()
	ks := make([]core.Kernel, 0, len(s.kernels))
	for ss := range s.kernels {
		ks = append(ks, ss.k)
		delete(s.kernels, ss)
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
