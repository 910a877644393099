//go:build !linux

package jupytertest

import "syscall"

func setDeathSignal(*syscall.SysProcAttr) {}
