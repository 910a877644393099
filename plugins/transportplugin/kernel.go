package transportplugin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kernelhost/kernelhost/core"
	pb "github.com/kernelhost/kernelhost/plugins/transportplugin/proto"
)

// messageBuffer is the host-side buffer of a kernel's Messages channel.
const messageBuffer = 256

// StartKernel starts a kernel in the plugin, waiting first if the plugin is
// restarting. It is bounded by ctx and Config.StartKernelTimeout.
func (s *Supervised) StartKernel(ctx context.Context, spec core.KernelSpec) (core.Kernel, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.StartKernelTimeout)
	defer cancel()
	inst, err := s.current(ctx)
	if err != nil {
		return nil, fmt.Errorf("start %s kernel: %w", spec.Language, err)
	}
	resp, err := inst.rpc.StartKernel(ctx, &pb.StartKernelRequest{Language: spec.Language, Cwd: []byte(spec.Cwd)})
	if err != nil {
		return nil, s.callError(inst, "start "+spec.Language+" kernel", s.cfg.StartKernelTimeout, err)
	}
	sctx, scancel := context.WithCancel(inst.ctx)
	stream, err := inst.rpc.Messages(sctx, &pb.MessagesRequest{KernelId: resp.KernelId})
	if err != nil {
		scancel()
		// Do not leave the kernel running in the plugin.
		sd, sdCancel := context.WithTimeout(context.Background(), s.cfg.CallTimeout)
		_, _ = inst.rpc.Shutdown(sd, &pb.ShutdownRequest{KernelId: resp.KernelId})
		sdCancel()
		return nil, s.callError(inst, "open message stream of "+spec.Language+" kernel", 0, err)
	}
	k := &remoteKernel{
		s:        s,
		inst:     inst,
		id:       resp.KernelId,
		lang:     spec.Language,
		msgs:     make(chan core.Message, messageBuffer),
		done:     make(chan struct{}),
		pumpDone: make(chan struct{}),
		cancel:   scancel,
	}
	s.pumps.Add(1)
	go k.pump(stream)
	return k, nil
}

// remoteKernel is a kernel living in a plugin process.
type remoteKernel struct {
	s    *Supervised
	inst *instance
	id   string
	lang string

	msgs     chan core.Message
	done     chan struct{} // closed by Shutdown: stop delivering
	doneOnce sync.Once
	pumpDone chan struct{}
	cancel   context.CancelFunc // ends the stream

	mu        sync.Mutex
	restarted chan struct{} // closed by the pump when the restarting status arrives
}

var _ core.Kernel = (*remoteKernel)(nil)

func (k *remoteKernel) Messages() <-chan core.Message { return k.msgs }

// pump moves the plugin's message stream into msgs, and owns closing it.
func (k *remoteKernel) pump(stream pb.Transport_MessagesClient) {
	defer k.s.pumps.Done()
	defer close(k.pumpDone)
	defer close(k.msgs)
	defer k.cancel()
	for {
		batch, err := stream.Recv()
		if err == io.EOF {
			return // the plugin closed the kernel's channel: shut down or lost
		}
		if err != nil {
			select {
			case <-k.done:
				return
			default:
			}
			// The plugin died or the host is closing: the kernel is gone for good.
			select {
			case <-k.s.stop:
			default:
				k.s.log.Error("kernel lost with its transport plugin", "kernel", k.id, "language", k.lang, "error", status.Convert(err).Message())
			}
			k.deliver(core.Message{Type: core.MsgStatus, State: core.StateDead})
			return
		}
		for _, pm := range batch.Messages {
			m := messageFromPB(pm)
			if m.Type == core.MsgStatus && m.State == core.StateRestarting && m.ParentID == "" {
				k.mu.Lock()
				if k.restarted != nil {
					close(k.restarted)
					k.restarted = nil
				}
				k.mu.Unlock()
			}
			if !k.deliver(m) {
				return
			}
		}
	}
}

// deliver hands m to the engine unless the kernel was shut down or the
// supervisor closed, so the pump can never block forever.
func (k *remoteKernel) deliver(m core.Message) bool {
	select {
	case k.msgs <- m:
		return true
	case <-k.done:
		return false
	case <-k.s.stop:
		return false
	}
}

// call runs one unary call with the call deadline, and fails at once if the
// plugin process the kernel lives in is gone.
func (k *remoteKernel) call(ctx context.Context, what string, f func(context.Context) error) error {
	if k.inst.ctx.Err() != nil {
		return k.lost(what)
	}
	ctx, cancel := context.WithTimeout(ctx, k.s.cfg.CallTimeout)
	defer cancel()
	if err := f(ctx); err != nil {
		if k.inst.ctx.Err() != nil || status.Code(err) == codes.Unavailable {
			return k.lost(what)
		}
		return k.s.callError(k.inst, fmt.Sprintf("%s on %s kernel %s", what, k.lang, k.id), k.s.cfg.CallTimeout, err)
	}
	return nil
}

var errPluginGone = errors.New("transport plugin process exited")

func (k *remoteKernel) lost(what string) error {
	return fmt.Errorf("%s on %s kernel %s: %w: the kernel is lost; start a new one (transport plugin %s)",
		what, k.lang, k.id, errPluginGone, k.s.cfg.Name)
}

func (k *remoteKernel) Execute(ctx context.Context, req core.ExecuteRequest) error {
	return k.call(ctx, "execute", func(ctx context.Context) error {
		_, err := k.inst.rpc.Execute(ctx, &pb.ExecuteRequest{KernelId: k.id, MsgId: req.MsgID, Code: []byte(req.Code), Silent: req.Silent})
		return err
	})
}

func (k *remoteKernel) Interrupt(ctx context.Context) error {
	return k.call(ctx, "interrupt", func(ctx context.Context) error {
		_, err := k.inst.rpc.Interrupt(ctx, &pb.InterruptRequest{KernelId: k.id})
		return err
	})
}

// Restart returns only after the kernel's restarting status has come through
// the stream, so that, as in process, no message the engine reads after
// Restart returns can be that status.
func (k *remoteKernel) Restart(ctx context.Context) error {
	seen := make(chan struct{})
	k.mu.Lock()
	k.restarted = seen
	k.mu.Unlock()
	return k.call(ctx, "restart", func(ctx context.Context) error {
		if _, err := k.inst.rpc.Restart(ctx, &pb.RestartRequest{KernelId: k.id}); err != nil {
			return err
		}
		select {
		case <-seen:
			return nil
		case <-k.pumpDone:
			return errPluginGone
		case <-ctx.Done():
			return fmt.Errorf("kernel restarted but its restarting status did not arrive: %w", ctx.Err())
		}
	})
}

// Shutdown stops the kernel in the plugin and closes Messages before it
// returns. If the plugin is gone there is nothing left to stop.
func (k *remoteKernel) Shutdown(ctx context.Context) error {
	var err error
	if k.inst.ctx.Err() == nil {
		err = k.call(ctx, "shut down", func(ctx context.Context) error {
			_, err := k.inst.rpc.Shutdown(ctx, &pb.ShutdownRequest{KernelId: k.id})
			return err
		})
	}
	k.doneOnce.Do(func() { close(k.done) })
	k.cancel()
	<-k.pumpDone
	return err
}

// callError turns a failed gRPC call into one clear error: the plugin's own
// message for transport errors, a deadline message for a hanging plugin, and
// "process exited" when the plugin died under the call.
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
	case st.Code() == codes.InvalidArgument:
		// The transport said the request was wrong (core.KindInvalid).
		return &core.Error{Kind: core.KindInvalid, Msg: fmt.Sprintf("%s: %s", what, st.Message()), Err: err}
	}
	return fmt.Errorf("%s: %s", what, st.Message())
}
