package engine

import "github.com/kernelhost/kernelhost/core"

func newError(kind core.ErrorKind, msg string, cause error) *core.Error {
	return &core.Error{Kind: kind, Msg: msg, Err: cause}
}
