//go:build wasip1

package policysdk

import (
	"runtime"
	"unsafe"
)

//go:wasmimport kernelhost_policy_v1 read_input
func readInput(ptr unsafe.Pointer, n uint32) uint32

//go:wasmimport kernelhost_policy_v1 write_output
func writeOutput(ptr unsafe.Pointer, n uint32) uint32

// outputBuf is reused across calls. The input gets a fresh buffer per call:
// the Input's strings point into it, so they stay valid for as long as the
// policy keeps them, at the cost of one allocation.
var outputBuf []byte

//go:wasmexport kernelhost_policy_v1_evaluate
func evaluate(n uint32) int32 {
	if handler == nil {
		return fail("no policy registered: call policysdk.Handle from an init function")
	}
	buf := make([]byte, n)
	if n > 0 {
		if got := readInput(unsafe.Pointer(&buf[0]), n); got != n {
			return fail("short input")
		}
	}
	out, err := run(handler, buf, true, outputBuf[:0])
	if err != nil {
		return fail(err.Error())
	}
	outputBuf = out
	write(out)
	return 0
}

// fail reports a failure: status 1, with the message as the output.
func fail(msg string) int32 {
	write([]byte(msg))
	return 1
}

func write(b []byte) {
	if len(b) == 0 {
		writeOutput(nil, 0)
		return
	}
	writeOutput(unsafe.Pointer(&b[0]), uint32(len(b)))
	runtime.KeepAlive(b)
}
