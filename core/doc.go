// Package core is what a transport author implements and uses: the Transport
// and Kernel interfaces (a kernel's lifecycle and each method's error contract
// are written on them), the ExecuteRequest a kernel is sent, the Message it
// emits with its states and reply statuses, and the error kinds that tell the
// host whose mistake an error is. Nothing of the engine is here: the engine
// that drives these interfaces (contexts, admission, routing, the output
// model) is package core/engine, which only the host imports.
//
// core imports only the standard library, and builds with GOOS=wasip1
// GOARCH=wasm, as core/engine does: no net, no os/exec. Everything that talks
// to a real kernel lives behind Transport and Kernel, implemented by the
// packages under transports/ and by the plugin client.
package core
