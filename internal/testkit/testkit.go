// Package testkit is the support code this repository's own tests share:
// building the real binaries they run (the kernelhost command, the transport
// plugins, the policy modules), a TestMain that builds them and then checks
// for leaked goroutines, waiting for processes to end, a log sink safe for
// concurrent writers, and the timing helpers of the A/B benchmarks.
//
// It is for tests only and is not a stable API: nothing outside _test.go
// files imports it.
//
// Why here: the tests of core, transports/, plugins/ and hostcmd/ all use it,
// and a Go internal/ folder is importable only under its parent, which would
// have to be the repository's root (its top level is fixed). transports/ is
// the lowest layer that may hold it: core builds for wasip1 and imports no
// os/exec. It imports no package of this module, so the in-package tests of
// core, the transports and the plugins can import it without an import
// cycle; it builds the binaries by import path with `go build`, not by
// importing them.
package testkit
