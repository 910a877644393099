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

// inputBuf and outputBuf are reused across calls: under wasm the first heap
// allocation of a call costs tens of µs, so the hot path allocates nothing.
// The Input's strings point into inputBuf and its maps are reused, which is
// why an Input is only valid until the policy function returns.
var inputBuf, outputBuf []byte

//go:wasmexport kernelhost_policy_v1_evaluate
func evaluate(n uint32) int32 {
	if handler == nil {
		return fail("no policy registered: call policysdk.Handle from an init function")
	}
	if uint32(cap(inputBuf)) < n {
		inputBuf = make([]byte, n)
	}
	buf := inputBuf[:n]
	if n > 0 {
		if got := readInput(unsafe.Pointer(&buf[0]), n); got != n {
			return fail("short input")
		}
	}
	out, err := run(handler, buf, &reused, outputBuf[:0])
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
