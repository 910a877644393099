package jupyter

import (
	"strconv"
	"strings"
)

// Lost-message detection by ipykernel's message counter.
//
// jupyter_client's Session numbers every message a kernel process sends:
// msg_id is "<session>_<pid>_<n>", n counting up from 0 across all of its
// channels (IOPub, shell and control replies). Between the first and the last
// message of one of our requests, the kernel is busy with that request, and
// every number in that range is a message we see (IOPub is broadcast, the
// shell reply comes to us) except the replies to other clients' requests the
// kernel handled meanwhile (the server's kernel_info nudges on control); each
// of those shows itself by a status on IOPub with its parent. So the numbers
// missing from the range, less one per such foreign request, were lost on the
// way (a full ZeroMQ queue drops them without a word). Kernels that number
// their messages otherwise (IRkernel: UUIDs) are not checked.

// counterLog is what the kernel saw of the counter while requests were live.
// Guarded by kernel.liveMu; emptied when no request is live.
type counterLog struct {
	prefix  string              // "<session>_<pid>_" of the process the numbers belong to
	seen    map[uint64]struct{} // numbers seen under prefix
	foreign map[string]uint64   // parents of statuses of requests not ours: the number of such a status
}

// parseMsgID splits an ipykernel msg_id into its "<session>_<pid>_" prefix and
// its counter.
func parseMsgID(id string) (prefix string, n uint64, ok bool) {
	i := strings.LastIndexByte(id, '_')
	if i <= 0 {
		return "", 0, false
	}
	n, err := strconv.ParseUint(id[i+1:], 10, 64)
	if err != nil {
		return "", 0, false
	}
	j := strings.LastIndexByte(id[:i], '_')
	if j <= 0 {
		return "", 0, false
	}
	if _, err := strconv.ParseUint(id[j+1:i], 10, 32); err != nil { // the pid
		return "", 0, false
	}
	return id[:i+1], n, true
}

// note records a message the kernel sent. ours is the live request it
// belongs to, if any; foreignStatus says it is a status of a request that is
// not ours.
func (l *counterLog) note(msgID string, ours *liveRequest, foreignParent string) {
	prefix, n, ok := parseMsgID(msgID)
	if !ok {
		return
	}
	if prefix != l.prefix {
		if ours == nil {
			return // e.g. the server's own messages
		}
		// A new kernel process (or the first message seen): start over.
		l.reset()
		l.prefix = prefix
	}
	if l.seen == nil {
		l.seen = map[uint64]struct{}{}
		l.foreign = map[string]uint64{}
	}
	l.seen[n] = struct{}{}
	if foreignParent != "" {
		l.foreign[foreignParent] = n
	}
	if ours != nil {
		if !ours.numbered || ours.prefix != prefix {
			ours.numbered, ours.prefix, ours.first, ours.last = true, prefix, n, n
		}
		ours.first, ours.last = min(ours.first, n), max(ours.last, n)
	}
}

// lost is how many messages of req's range were not seen, beyond those
// explained by foreign requests.
func (l *counterLog) lost(req *liveRequest) int {
	if !req.numbered || req.prefix != l.prefix {
		return 0
	}
	span := req.last - req.first + 1
	var seen uint64
	for n := range l.seen {
		if n >= req.first && n <= req.last {
			seen++
		}
	}
	// Only foreign requests the kernel handled inside req's range explain a
	// number missing from it: the log can outlive a request (it is emptied
	// only when a message comes while none is live), and a foreign request
	// seen during an earlier one (the server's kernel_info when it connects)
	// must not hide a loss in this one.
	missing := int(span - seen)
	for _, n := range l.foreign {
		if n >= req.first && n <= req.last {
			missing--
		}
	}
	return max(missing, 0)
}

func (l *counterLog) reset() {
	l.prefix, l.seen, l.foreign = "", nil, nil
}
