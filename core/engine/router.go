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

// route is one request's end of the router. The router hands each message of
// the request to handle itself, on its own goroutine, in kernel order, and
// marks the request over when the kernel reported it finished (execute_reply
// and status idle, after which it runs finished) or a kernel-wide status
// ended it. Only then is the request's waiter, the context's loop, woken:
// a message costs one goroutine hand-off into the engine (the transport's to
// the router) and one out of it (the output log's to the stream that reads
// it), not a third through the loop.
//
// mu serialises the router's work for the request with the waiter's: while
// the request is registered, the waiter takes it (exclusive) to change what
// handle and finished change too (an Execution's outcome and error line).
// Neither handle nor finished may block, nor anyone hold mu while waiting
// for the router.
type route struct {
	mu       sync.Mutex
	handle   func(core.Message) // each message of the request; nil: none wanted
	finished func()             // once, when the kernel reported the request finished; may be nil
	gotReply bool               // execute_reply seen
	gotIdle  bool               // status idle seen
	closed   bool               // unregistered: nothing more is delivered
	// end and endText are why the request is over; set once, before over
	// is closed.
	end     requestEnd
	endText string
	over    chan struct{}
}

func (rt *route) deliver(m core.Message) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.closed || rt.isOver() {
		return
	}
	if m.ParentID == "" {
		if end, over := kernelWideEnd(m.State); over {
			rt.endWith(end, m.Text)
		}
		return
	}
	switch {
	case m.Type == core.MsgExecuteReply:
		rt.gotReply = true
	case m.Type == core.MsgStatus && m.State == core.StateIdle:
		rt.gotIdle = true
	}
	if rt.handle != nil {
		rt.handle(m)
	}
	if rt.gotReply && rt.gotIdle {
		if rt.finished != nil {
			rt.finished()
		}
		rt.endWith(endFinished, "")
	}
}

func (rt *route) isOver() bool {
	select {
	case <-rt.over:
		return true
	default:
		return false
	}
}

// endWith records why the request is over and wakes its waiter; rt.mu is held.
func (rt *route) endWith(end requestEnd, text string) {
	rt.end, rt.endText = end, text
	close(rt.over)
}

// register starts routing the messages of msgID to handle (and finished,
// see route), until unregister.
func (r *router) register(msgID string, handle func(core.Message), finished func()) *route {
	rt := &route{handle: handle, finished: finished, over: make(chan struct{})}
	r.mu.Lock()
	r.routes[msgID] = rt
	r.mu.Unlock()
	return rt
}

// unregister stops routing the messages of msgID: once it returns, the
// route's handle and finished are not called again.
func (r *router) unregister(msgID string) {
	r.mu.Lock()
	rt := r.routes[msgID]
	delete(r.routes, msgID)
	r.mu.Unlock()
	if rt != nil {
		rt.mu.Lock()
		rt.closed = true
		rt.mu.Unlock()
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
