package pluginrpc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kernelhost/kernelhost/core"
	pb "github.com/kernelhost/kernelhost/plugins/transportplugin/proto"
)

// messageBuffer is the host-side buffer of a kernel's Messages channel.
const messageBuffer = 256

// StartKernel opens a kernel stream in the plugin (waiting first if the
// plugin is restarting) and starts the kernel on it. It is bounded by ctx and
// Config.StartKernelTimeout.
func (s *Supervised) StartKernel(ctx context.Context, spec core.KernelSpec) (core.Kernel, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.StartKernelTimeout)
	defer cancel()
	what := "start " + core.Clip(spec.Language) + " kernel"
	for {
		inst, err := s.current(ctx)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		k, connLost, err := s.startOn(ctx, inst, spec, what)
		if err == nil {
			return k, nil
		}
		// A plugin that was killed closes its sockets a moment before it is
		// seen to exit: a start in between picks the dying instance, whose
		// kernel socket refuses or drops it. If that is what happened, start
		// on the next instance instead of failing.
		if !connLost || !diedUnder(ctx, inst) {
			return nil, err
		}
	}
}

// dyingWait bounds how long a start that lost its connection waits to learn
// whether the plugin died under it; a killed process is seen to exit
// within milliseconds of closing its sockets.
const dyingWait = 250 * time.Millisecond

// diedUnder reports whether inst's process has died (waiting up to
// dyingWait for it to be seen exiting).
func diedUnder(ctx context.Context, inst *instance) bool {
	t := time.NewTimer(dyingWait)
	defer t.Stop()
	select {
	case <-inst.proc.exited:
		return true
	case <-t.C:
	case <-ctx.Done():
	}
	return inst.proc.gone()
}

// startOn starts a kernel on inst; connLost says the connection to the
// plugin failed (rather than the transport refusing the start).
func (s *Supervised) startOn(ctx context.Context, inst *instance, spec core.KernelSpec, what string) (_ core.Kernel, connLost bool, _ error) {
	id := s.newKernelID()
	first := &pb.KernelCall{Call: &pb.KernelCall_Start{Start: &pb.Start{Language: spec.Language, Cwd: []byte(spec.Cwd), KernelId: id}}}
	return s.open(ctx, inst, id, core.Clip(spec.Language), what, first)
}

// ForkKernel asks the plugin to copy src (core.Forker): the copy is a kernel
// of its own stream, on the plugin process that runs src. Whether the
// plugin's transport can fork src is the plugin's answer: KindUnsupported
// when it cannot (the jupyter plugin, a bash kernel, a sandboxed
// interpreter). It is bounded by ctx and Config.StartKernelTimeout.
func (s *Supervised) ForkKernel(ctx context.Context, src core.Kernel) (core.Kernel, error) {
	rk, ok := src.(*remoteKernel)
	if !ok || rk.s != s {
		return nil, &core.Error{Kind: core.KindInvalid, Msg: fmt.Sprintf("fork: not a kernel of transport plugin %s", s.cfg.Name)}
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.StartKernelTimeout)
	defer cancel()
	id := s.newKernelID()
	first := &pb.KernelCall{Call: &pb.KernelCall_Fork{Fork: &pb.Fork{KernelId: id, Source: rk.id}}}
	// On src's plugin process, not the current one: a plugin that restarted
	// since has no src, which then reads as lost.
	k, _, err := s.open(ctx, rk.inst, id, rk.lang, "fork "+rk.lang+" kernel", first)
	return k, err
}

// newKernelID names a kernel for the plugin (Start.kernel_id), uniquely
// among all this host starts.
func (s *Supervised) newKernelID() string {
	return "k" + strconv.FormatUint(s.kernelIDs.Add(1), 10)
}

// open opens a kernel stream on inst and makes its kernel with first (a
// start or a fork); connLost says the connection to the plugin failed.
func (s *Supervised) open(ctx context.Context, inst *instance, id, lang, what string, first *pb.KernelCall) (_ core.Kernel, connLost bool, _ error) {
	// The stream outlives ctx: it is the kernel's whole life.
	sctx, scancel := context.WithCancel(inst.ctx)
	var stream kernelClientStream
	var err error
	if inst.kernelSocket != "" && !s.cfg.GRPCKernelStreams {
		stream, err = dialKernelSocket(sctx, ctx, inst.kernelSocket, inst.kernelToken)
		if err != nil {
			scancel()
			return nil, true, fmt.Errorf("%s: connect to the kernel socket of transport plugin %s: %w", what, s.cfg.Name, err)
		}
	} else {
		stream, err = inst.rpc.Kernel(sctx)
		if err != nil {
			scancel()
			err = s.callError(inst, what, 0, err)
			return nil, errors.Is(err, errPluginGone), err
		}
	}
	k := &remoteKernel{
		s:        s,
		inst:     inst,
		id:       id,
		lang:     lang, // for logs
		stream:   stream,
		msgs:     make(chan core.Message, messageBuffer),
		done:     make(chan struct{}),
		pumpDone: make(chan struct{}),
		cancel:   scancel,
		waiting:  make(map[uint64]chan *pb.CallResult),
	}
	s.pumps.Add(1)
	go k.pump()
	err = k.call(ctx, what, s.cfg.StartKernelTimeout, first)
	if err != nil {
		// Ending the stream makes the plugin stop the kernel if it started.
		k.end()
		return nil, errors.Is(err, errPluginGone), err
	}
	return k, false, nil
}

// remoteKernel is a kernel living in a plugin process, behind its stream.
type remoteKernel struct {
	s    *Supervised
	inst *instance
	id   string // the plugin's name for it (Start.kernel_id)
	lang string

	stream kernelClientStream
	sendMu sync.Mutex // one sender at a time

	msgs     chan core.Message
	done     chan struct{} // closed by Shutdown: stop delivering
	doneOnce sync.Once
	pumpDone chan struct{}
	cancel   context.CancelFunc // ends the stream

	nextID  atomic.Uint64
	mu      sync.Mutex
	waiting map[uint64]chan *pb.CallResult // calls waiting for their result
	ended   error                          // why the stream ended; set by the pump

	family atomic.Pointer[string] // the last start, fork or restart result's (FamilyKernel)
}

var (
	_ core.Kernel       = (*remoteKernel)(nil)
	_ core.FamilyKernel = (*remoteKernel)(nil)
)

// Family implements core.FamilyKernel: what the plugin said with the
// kernel's last start, fork or restart.
func (k *remoteKernel) Family() string {
	if f := k.family.Load(); f != nil {
		return *f
	}
	return ""
}

// kernelClientStream is the host's end of a kernel stream: a gRPC Kernel
// stream or a kernel socket connection. Recv returns io.EOF when the plugin
// ended the stream.
type kernelClientStream interface {
	Send(*pb.KernelCall) error
	Recv() (*pb.KernelFrame, error)
}

func (k *remoteKernel) Messages() <-chan core.Message { return k.msgs }

// errKernelEnded: the plugin ended the kernel's stream (its kernel was shut
// down or lost for good).
var errKernelEnded = errors.New("the kernel's stream ended")

// pump moves the plugin's frames into msgs and hands each call its result,
// after the messages before it. It owns closing msgs.
func (k *remoteKernel) pump() {
	defer k.s.pumps.Done()
	defer close(k.pumpDone)
	defer close(k.msgs)
	defer k.cancel()
	for {
		f, err := k.stream.Recv()
		if err != nil {
			k.mu.Lock()
			k.ended = errKernelEnded
			if err != io.EOF {
				k.ended = err
			}
			k.mu.Unlock()
			if err == io.EOF {
				return // the plugin closed the kernel's channel: shut down or lost
			}
			select {
			case <-k.done:
				return
			default:
			}
			// The plugin died or the host is closing: the kernel is gone for good.
			select {
			case <-k.s.stop:
			default:
				k.s.log.Error("kernel lost with its transport plugin", "language", k.lang, "error", status.Convert(err).Message())
			}
			k.deliver(core.Message{Type: core.MsgStatus, State: core.StateDead})
			return
		}
		for _, pm := range f.Messages {
			if !k.deliver(messageFromPB(pm)) {
				return
			}
		}
		for _, r := range f.Results {
			if r.Family != nil {
				k.family.Store(r.Family)
			}
			k.mu.Lock()
			ch := k.waiting[r.Id]
			delete(k.waiting, r.Id)
			k.mu.Unlock()
			if ch != nil {
				ch <- r // buffered
			}
		}
	}
}

// deliver hands m to the engine; after Shutdown began it drops m (the pump
// must keep reading, for Shutdown's result). It reports false once the
// supervisor closed, so the pump can never block forever.
func (k *remoteKernel) deliver(m core.Message) bool {
	select {
	case k.msgs <- m:
	case <-k.done:
	case <-k.s.stop:
		return false
	}
	return true
}

func (k *remoteKernel) send(c *pb.KernelCall) error {
	k.sendMu.Lock()
	defer k.sendMu.Unlock()
	return k.stream.Send(c)
}

// call sends c and waits for its result, at most timeout (on top of ctx): a
// hanging plugin cannot hang the host. A caller that gives up sends cancel,
// which cancels the call's context in the plugin.
func (k *remoteKernel) call(ctx context.Context, what string, timeout time.Duration, c *pb.KernelCall) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	c.Id = k.nextID.Add(1)
	ch := make(chan *pb.CallResult, 1)
	k.mu.Lock()
	if k.ended != nil {
		k.mu.Unlock()
		return k.endedError(what)
	}
	k.waiting[c.Id] = ch
	k.mu.Unlock()
	// A failed Send means the stream is broken: the pump's Recv gets the
	// reason and ends, which the select below notices.
	_ = k.send(c)
	select {
	case r := <-ch:
		return k.resultError(what, timeout, r)
	case <-k.pumpDone:
		select {
		case r := <-ch:
			return k.resultError(what, timeout, r)
		default:
		}
		return k.endedError(what)
	case <-ctx.Done():
		k.forget(c.Id)
		_ = k.send(&pb.KernelCall{Id: c.Id, Call: &pb.KernelCall_Cancel{Cancel: &pb.Cancel{}}})
		return k.s.callError(k.inst, what, timeout, status.FromContextError(ctx.Err()).Err())
	}
}

func (k *remoteKernel) forget(id uint64) {
	k.mu.Lock()
	delete(k.waiting, id)
	k.mu.Unlock()
}

var errPluginGone = errors.New("transport plugin process exited")

// endedError explains a call on a kernel whose stream is over.
func (k *remoteKernel) endedError(what string) error {
	k.mu.Lock()
	ended := k.ended
	k.mu.Unlock()
	if ended == errKernelEnded && k.inst.ctx.Err() == nil && !k.inst.proc.gone() {
		return fmt.Errorf("%s: %w: it was shut down or lost; start a new one (transport plugin %s)",
			what, errKernelEnded, k.s.cfg.Name)
	}
	return fmt.Errorf("%s: %w: the kernel is lost; start a new one (transport plugin %s)",
		what, errPluginGone, k.s.cfg.Name)
}

// what names a call on this kernel in errors.
func (k *remoteKernel) what(call string) string { return call + " on " + k.lang + " kernel" }

func (k *remoteKernel) Execute(ctx context.Context, req core.ExecuteRequest) error {
	return k.call(ctx, k.what("execute"), k.s.cfg.CallTimeout, &pb.KernelCall{Call: &pb.KernelCall_Execute{
		Execute: &pb.Execute{MsgId: req.MsgID, Code: []byte(req.Code), Silent: req.Silent}}})
}

func (k *remoteKernel) Interrupt(ctx context.Context) error {
	return k.call(ctx, k.what("interrupt"), k.s.cfg.CallTimeout, &pb.KernelCall{Call: &pb.KernelCall_Interrupt{Interrupt: &pb.Interrupt{}}})
}

// Restart returns after the kernel's restarting status has been delivered:
// the plugin sends a call's result after the messages the call emitted, and
// the pump delivers a frame's messages before its results.
func (k *remoteKernel) Restart(ctx context.Context) error {
	return k.call(ctx, k.what("restart"), k.s.cfg.CallTimeout, &pb.KernelCall{Call: &pb.KernelCall_Restart{Restart: &pb.Restart{}}})
}

// Shutdown stops the kernel in the plugin and closes Messages before it
// returns. If the kernel's stream is already over there is nothing left to
// stop.
func (k *remoteKernel) Shutdown(ctx context.Context) error {
	k.doneOnce.Do(func() { close(k.done) })
	err := k.call(ctx, k.what("shut down"), k.s.cfg.CallTimeout, &pb.KernelCall{Call: &pb.KernelCall_Shutdown{Shutdown: &pb.Shutdown{}}})
	if errors.Is(err, errKernelEnded) || errors.Is(err, errPluginGone) {
		err = nil
	}
	k.end()
	return err
}

// end stops delivering, ends the stream and waits for the pump.
func (k *remoteKernel) end() {
	k.doneOnce.Do(func() { close(k.done) })
	k.cancel()
	<-k.pumpDone
}

// callError turns a failed gRPC call into one clear error: a deadline message
// for a hanging plugin, "process exited" when the plugin died under the
// call, and gRPC's message otherwise. (The transport's own errors come in
// call results: resultError.)
func (s *Supervised) callError(inst *instance, what string, timeout time.Duration, err error) error {
	if errors.Is(err, errPluginGone) {
		return fmt.Errorf("%s: %w (transport plugin %s)", what, err, s.cfg.Name)
	}
	st := status.Convert(err)
	switch {
	case inst.ctx.Err() != nil || st.Code() == codes.Unavailable:
		return fmt.Errorf("%s: %w (transport plugin %s): %s", what, errPluginGone, s.cfg.Name, st.Message())
	case st.Code() == codes.DeadlineExceeded:
		return fmt.Errorf("%s: transport plugin %s did not answer in time (call deadline %v): %w", what, s.cfg.Name, timeout, context.DeadlineExceeded)
	case st.Code() == codes.Canceled:
		return fmt.Errorf("%s: %w", what, context.Canceled)
	}
	return fmt.Errorf("%s: %s", what, st.Message())
}
