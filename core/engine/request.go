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
// (runUserCode) both go through it, so the loop that reads a request's
// messages is written once, in wait.
type request struct {
	msgID    string
	k        core.Kernel
	r        *router
	rt       *route
	gotReply bool // execute_reply seen
	gotIdle  bool // status idle seen
	// endText is the Text of the kernel-wide status that ended the request:
	// what the transport knows of why (for a death: what died, and how).
	endText string
}

// send registers a fresh msg_id with the context's current kernel and sends
// code with it. On an error nothing stays registered. ctx bounds the send.
// The request is a value, kept by its caller (on the stack: one request per
// execution or helper costs no allocation of its own).
func (c *Context) send(ctx context.Context, code string, silent bool) (request, error) {
	k, r := c.current()
	q := request{msgID: newID(), k: k, r: r}
	q.rt = r.register(q.msgID)
	if err := k.Execute(ctx, core.ExecuteRequest{MsgID: q.msgID, Code: code, Silent: silent}); err != nil {
		q.close()
		return request{}, err
	}
	return q, nil
}

// close ends the request's routing: its msg_id is forgotten.
func (q *request) close() { q.r.unregister(q.msgID) }

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

// wait reads the request's messages, handing each one of its own to
// onMessage in kernel order, until the request has ended or one of w's
// channels fires. After a watch event the caller may call wait again: the
// request goes on where it was.
func (q *request) wait(w *watch, onMessage func(core.Message)) requestEnd {
	for !q.gotReply || !q.gotIdle {
		select {
		case m := <-q.rt.ch:
			if m.ParentID == "" {
				if end, over := kernelWideEnd(m.State); over {
					q.endText = m.Text
					return end
				}
				continue
			}
			switch {
			case m.Type == core.MsgExecuteReply:
				q.gotReply = true
			case m.Type == core.MsgStatus && m.State == core.StateIdle:
				q.gotIdle = true
			}
			onMessage(m)
		case <-q.r.gone:
			return endLost
		case <-w.deadline:
			return endDeadline
		case <-w.clientGone:
			return endClientGone
		case <-w.grace:
			return endGrace
		case <-w.control:
			return endControl
		}
	}
	return endFinished
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
