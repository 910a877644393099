package subprocess

import "syscall"

// noCoreDumps sets this process's soft RLIMIT_CORE to 0, which every
// interpreter it starts inherits (through bubblewrap or any other launcher).
//
// An interpreter that crashes natively (a segfault in a C extension) is not
// reaped until the kernel has written its core, and the stream that waits on
// it does not end before: a python with numpy and matplotlib loaded dumps
// ~100 MB, which a slow disk or systemd-coredump took 70-142 s over, where
// upstream reports the death at once. The crash itself is reported (what
// died, the signal); a core of a user's cell is of no use to the host.
// With a pipe core_pattern (systemd-coredump, apport) the kernel ignores
// the limit, but the handler reads it (%c) and drops the dump at once.
//
// It is process-wide rather than per child because os/exec sets no rlimits
// and a prlimit after Start races with a launcher's own fork; the host's
// own Go code does not dump core unless GOTRACEBACK=crash.
func noCoreDumps() {
	var lim syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_CORE, &lim) == nil && lim.Cur != 0 {
		lim.Cur = 0
		_ = syscall.Setrlimit(syscall.RLIMIT_CORE, &lim)
	}
}
