// Package engine is kernelhost's transport-agnostic execution engine.
//
// It owns contexts (one stateful kernel each), per-context admission (one
// execution on a kernel at a time, FIFO, bounded queue), msg_id routing of kernel
// messages to the one execution they belong to, ordered env-var set/reset around
// every execution, the disconnect policy, and the output model that the HTTP host
// streams as NDJSON. It drives kernels only through package core's Transport
// and Kernel interfaces, so it cannot tell an in-process transport from a plugin.
//
// engine imports only the standard library and core: no net and no os/exec
// (its ids come from crypto/rand, not google/uuid, which imports net; see
// id.go). It builds and its tests run with GOOS=wasip1 GOARCH=wasm.
//
// The invariants it keeps are written in docs/RATIONALE.md; each has a test in
// this package that fails when it is broken.
package engine
