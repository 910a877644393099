//go:build linux

package jupytertest

import "syscall"

// setDeathSignal makes the kernel kill the server when the test process dies
// (a test binary killed by its timeout never runs its cleanups).
func setDeathSignal(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }
