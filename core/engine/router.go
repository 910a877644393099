package engine

import (
	"context"
	"fmt"
	"sync"

	"github.com/kernelhost/kernelhost/core"
)

// router reads one kernel's messages and hands each to the request whose msg_id
// is its parent, and to no other (invariant 4). Messages of unknown or
// abandoned requests are dropped; the router never blocks on a request that is
// gone. Kernel-wide status messages (ParentID "") go to every registered
// request, so whatever is in flight learns that the kernel restarted, died or
// lost its connection.
//
// The router is the one layer that owns restart fencing: the guarantee that a
// request sent after a restart never sees a message of the interpreter the
// restart replaced. Messages of that interpreter's requests cannot reach it:
// they carry other msg_ids, unregistered when those requests ended. Its
// kernel-wide events (a late "dead" would end the new request for nothing)
// cannot either: the router counts the restarting events it passes, under the
// lock with which requests register, and Context.restartKernel sends nothing
// after Kernel.Restart returns until the router has passed the restarting
// event of that restart (awaitRestart); every event before it has gone to the
// requests of the old interpreter by then. All it asks of a transport is the
// order the Kernel contract writes: messages in kernel order, restarting after
// the replaced interpreter's last message. The plugin client and the
// transports keep that order; they need not fence restarts otherwise.
type router struct {
	mu     sync.Mutex
	routes map[string]*route
	// gone is closed when the kernel's Messages channel closed: the kernel is
	// lost for good.
	gone chan struct{}
	// onKernelEvent records kernel-wide states on the context even when no
	// request is in flight. It runs with mu held (see broadcast).
	onKernelEvent func(state string)
	// restarts counts the restarting events passed; restarted is closed and
	// replaced at each. Both under mu.
	restarts  int
	restarted chan struct{}
}

type route struct {
	ch   chan core.Message
	done chan struct{} // closed by unregister: the router stops delivering
}

func newRouter(msgs <-chan core.Message, onKernelEvent func(state string)) *router {
	r := &router{routes: make(map[string]*route), gone: make(chan struct{}), onKernelEvent: onKernelEvent, restarted: make(chan struct{})}
	go r.run(msgs)
	return r
}

func (r *router) run(msgs <-chan core.Message) {
	defer close(r.gone)
	for m := range msgs {
		if m.ParentID == "" {
			if m.Type == core.MsgStatus {
				r.broadcast(m)
			}
			continue
		}
		r.mu.Lock()
		rt := r.routes[m.ParentID]
		r.mu.Unlock()
		if rt != nil {
			rt.deliver(m)
		}
	}
}

// broadcast records a kernel-wide status on the context and hands it to
// every request registered at that moment. Both happen under mu, so a
// request registers either before (and gets the event) or after the context
// has recorded it: the setup request sent once a restart has been seen must
// not be told of that same restart.
func (r *router) broadcast(m core.Message) {
	r.mu.Lock()
	if m.State == core.StateRestarting {
		r.restarts++
		close(r.restarted)
		r.restarted = make(chan struct{})
	}
	r.onKernelEvent(m.State)
	routes := make([]*route, 0, len(r.routes))
	for _, rt := range r.routes {
		routes = append(routes, rt)
	}
	r.mu.Unlock()
	for _, rt := range routes {
		rt.deliver(m)
	}
}

func (rt *route) deliver(m core.Message) {
	select {
	case rt.ch <- m:
	case <-rt.done:
	}
}

// register starts routing the messages of msgID. The caller must read the
// route's channel until it calls unregister.
func (r *router) register(msgID string) *route {
	rt := &route{ch: make(chan core.Message, 256), done: make(chan struct{})}
	r.mu.Lock()
	r.routes[msgID] = rt
	r.mu.Unlock()
	return rt
}

func (r *router) unregister(msgID string) {
	r.mu.Lock()
	rt := r.routes[msgID]
	delete(r.routes, msgID)
	r.mu.Unlock()
	if rt != nil {
		close(rt.done)
	}
}

// restartsPassed is the number of restarting events the router has passed.
func (r *router) restartsPassed() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.restarts
}

// awaitRestart waits until the router has passed more than before restarting
// events: from then on no event of the interpreter a restart replaced reaches
// a request registered.
func (r *router) awaitRestart(ctx context.Context, before int) error {
	for {
		r.mu.Lock()
		seen, restarted := r.restarts > before, r.restarted
		r.mu.Unlock()
		if seen {
			return nil
		}
		select {
		case <-restarted:
		case <-ctx.Done():
			return fmt.Errorf("the kernel did not report that it restarted: %w", ctx.Err())
		}
	}
}
