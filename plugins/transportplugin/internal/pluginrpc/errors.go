package pluginrpc

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc/status"

	"github.com/kernelhost/kernelhost/core"
	pb "github.com/kernelhost/kernelhost/plugins/transportplugin/proto"
)

// A transport's error crosses the plugin boundary as a CallResult: its text,
// unchanged, and its kind as a value. The host turns it back into an error of
// the same kind, so a client sees the same status code or error name (a
// Jupyter request over the server's size limit ends in CodeTooLarge, say)
// whether the transport runs as a plugin or linked in.

// kinds is the one mapping between core.ErrorKind and its protocol value.
// TestEveryKindIsListed fails when core gains a kind this table lacks.
var kinds = []struct {
	core core.ErrorKind
	pb   pb.ErrorKind
}{
	{core.KindInternal, pb.ErrorKind_KIND_INTERNAL},
	{core.KindInvalid, pb.ErrorKind_KIND_INVALID},
	{core.KindNotFound, pb.ErrorKind_KIND_NOT_FOUND},
	{core.KindQueueFull, pb.ErrorKind_KIND_QUEUE_FULL},
	{core.KindRejected, pb.ErrorKind_KIND_REJECTED},
	{core.KindUnavailable, pb.ErrorKind_KIND_UNAVAILABLE},
	{core.KindTooLarge, pb.ErrorKind_KIND_TOO_LARGE},
	{core.KindGone, pb.ErrorKind_KIND_GONE},
	{core.KindUnsupported, pb.ErrorKind_KIND_UNSUPPORTED},
}

// kindToPB is the protocol value of err's kind: KIND_NONE when err is not a
// *core.Error.
func kindToPB(err error) pb.ErrorKind {
	var ce *core.Error
	if !errors.As(err, &ce) {
		return pb.ErrorKind_KIND_NONE
	}
	for _, k := range kinds {
		if k.core == ce.Kind {
			return k.pb
		}
	}
	return pb.ErrorKind_KIND_INTERNAL // a kind newer than this table
}

// kindFromPB is the core.ErrorKind of a protocol value; ok is false for
// KIND_NONE (a plain error) and for values newer than this table.
func kindFromPB(v pb.ErrorKind) (_ core.ErrorKind, ok bool) {
	for _, k := range kinds {
		if k.pb == v {
			return k.core, true
		}
	}
	return 0, false
}

// result is the plugin's side: the CallResult that ends call id with err.
func result(id uint64, err error) *pb.CallResult {
	r := &pb.CallResult{Id: id}
	if err == nil {
		return r
	}
	r.Error = []byte(err.Error())
	r.Kind = kindToPB(err)
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		r.Code = pb.Code_DEADLINE_EXCEEDED
	case errors.Is(err, context.Canceled):
		r.Code = pb.Code_CANCELED
	case r.Kind == pb.ErrorKind_KIND_INVALID:
		r.Code = pb.Code_INVALID // for hosts built before kind
	default:
		r.Code = pb.Code_UNKNOWN
	}
	return r
}

// resultError is the host's side: the error the transport returned for the
// call named what, from its CallResult; nil for OK. A *core.Error keeps its
// kind and message (after what); any other error keeps its text. A context
// error in the plugin reads as the host's own (callError).
func (k *remoteKernel) resultError(what string, timeout time.Duration, r *pb.CallResult) error {
	switch r.Code {
	case pb.Code_OK:
		return nil
	case pb.Code_DEADLINE_EXCEEDED:
		return k.s.callError(k.inst, what, timeout, status.FromContextError(context.DeadlineExceeded).Err())
	case pb.Code_CANCELED:
		return k.s.callError(k.inst, what, timeout, status.FromContextError(context.Canceled).Err())
	}
	msg := what + ": " + string(r.Error)
	kind, ok := kindFromPB(r.Kind)
	if !ok && r.Kind == pb.ErrorKind_KIND_NONE && r.Code == pb.Code_INVALID {
		kind, ok = core.KindInvalid, true // a plugin built before kind
	}
	if ok {
		return &core.Error{Kind: kind, Msg: msg}
	}
	return errors.New(msg)
}
