package engine

import (
	"context"
	"time"

	"github.com/kernelhost/kernelhost/core"
)

// request is one request on a context's kernel and the one owner of its
// msg_id, from the moment the id is registered with the router (before the
// request is sent, so that no message of it can come before its route) until
// the kernel has reported the request finished, an execute_reply and a status
// idle both with the id as their parent, or a kernel-wide end took it first:
// the kernel restarted, died or lost its connection, or its messages ended for
// good. close unregisters the id; whatever still comes for it is dropped by
// the router.
//
// The engine's own helper requests (silentRequest) and user code
// (runUserCode) both go through it, so the wait for a request's end is
// written once, in wait. Its messages do not pass through the waiter: the
// router hands each to the request's onMessage itself (see route).
type request struct {
	msgID string
	k     core.Kernel
	r     *router
	rt    *route
	// endText is the Text of the kernel-wide status that ended the request:
	// what the transport knows of why (for a death: what died, and how).
	endText string
}

// send registers a fresh msg_id with the context's current kernel and sends
// code with it. The router calls onMessage with each message of the
// request, in kernel order, on its own goroutine, and finished (if not nil)
// when the kernel reported the request finished, before wait learns it;
// neither may block (see route). On an error nothing stays registered. ctx
// bounds the send. The request is a value, kept by its caller (on the
// stack: one request per execution or helper costs no allocation of its own).
func (c *Context) send(ctx context.Context, code string, silent bool, onMessage func(core.Message), finished func()) (request, error) {
	k, r := c.current()
	q := request{msgID: newID(), k: k, r: r}
	q.rt = r.register(q.msgID, onMessage, finished)
	if err := k.Execute(ctx, core.ExecuteRequest{MsgID: q.msgID, Code: code, Silent: silent}); err != nil {
		q.close()
		return request{}, err
	}
	return q, nil
}

// close ends the request's routing: its msg_id is forgotten, and onMessage
// and finished are not called again.
func (q *request) close() { q.r.unregister(q.msgID) }

// exclusive runs f while the router hands nothing to the request: for a
// waiter that changes what onMessage and finished change too.
func (q *request) exclusive(f func()) {
	q.rt.mu.Lock()
	defer q.rt.mu.Unlock()
	f()
}

// requestEnd says why wait returned.
type requestEnd int

const (
	// endFinished: execute_reply and idle were seen; the kernel is done.
	endFinished requestEnd = iota
	// The kernel-wide ends: the request will get no more messages.
	endRestarted    // status restarting: the interpreter was replaced
	endDied         // status dead
	endDisconnected // status disconnected: the connection dropped
	endLost         // the kernel's messages ended for good
	// The waiter's own events (see watch); it may wait on after them.
	endDeadline
	endClientGone
	endGrace
	endControl
)

// kernelState is the kernel-wide state that ended a request, for messages.
func (e requestEnd) kernelState() string {
	switch e {
	case endRestarted:
		return core.StateRestarting
	case endDied:
		return core.StateDead
	case endDisconnected:
		return core.StateDisconnected
	}
	return ""
}

// watch is what a waiter wakes for besides the request's messages. A nil
// channel never fires; a waiter sets a channel to nil once it has fired for
// good.
type watch struct {
	deadline   <-chan struct{}  // the helper timeout, or the execution timeout
	clientGone <-chan struct{}  // the client left
	grace      <-chan time.Time // an interrupt was ignored for InterruptGrace
	control    <-chan struct{}  // a restart or delete may be waiting
}

// wait waits until the request has ended (the router has handed it all its
// messages by then) or one of w's channels fires. After a watch event the
// caller may call wait again: the request goes on where it was.
func (q *request) wait(w *watch) requestEnd {
	select {
	case <-q.rt.over:
	case <-q.r.gone:
		// Everything the kernel sent has been delivered by now: a request
		// that it finished (or ended) before its messages stopped says so.
		if !q.rt.isOver() {
			return endLost
		}
	case <-w.deadline:
		return endDeadline
	case <-w.clientGone:
		return endClientGone
	case <-w.grace:
		return endGrace
	case <-w.control:
		return endControl
	}
	q.endText = q.rt.endText // set before over was closed
	return q.rt.end
}

// kernelWideEnd says whether a kernel-wide status ends every request in flight.
func kernelWideEnd(state string) (requestEnd, bool) {
	switch state {
	case core.StateRestarting:
		return endRestarted, true
	case core.StateDead:
		return endDied, true
	case core.StateDisconnected:
		return endDisconnected, true
	}
	return 0, false
}
