// Package testkit is the support code this repository's own tests share:
// building the real binaries they run (the kernelhost command, the transport
// plugins, the policy modules), a TestMain that builds them and then checks
// for leaked goroutines, waiting for processes to end, a log sink safe for
// concurrent writers, and the timing helpers of the A/B benchmarks.
//
// It is for tests only and is not an API: only _test.go files and
// test-support packages (jupytertest) import it, and internal/ keeps it
// inside this module. It imports no package of this module, so the
// in-package tests of core, the transports and the plugins can import it
// without an import cycle; it builds the binaries by import path with `go
// build`, not by importing them.
package testkit
