package subprocess

import (
	"os"
	"sync"
)

// kernelKnobs are the system-wide files a fresh /proc holds: sysctls, the
// magic SysRq key, IRQ affinities, bus and filesystem settings. They are
// root's, mode 0644 or 0200, and checked by owner only: an interpreter of
// a root host is uid 0 in its sandbox, and would write core_pattern (a
// command the kernel runs as root at the next crash) or the host's
// hostname, whatever capabilities it was left without. bwrap covers some
// of them read-only by itself, depending on its version and on whether it
// is privileged (0.8.0 as root covered /proc/irq and /proc/bus but left
// /proc/sys writable); the sandbox covers each one that exists, always,
// read-only. /sys needs nothing more: `--ro-bind / /` shows it and every
// mount under it (the cgroup tree) read-only. A context forked from the
// fork template makes its own /proc and covers the same list itself
// (drivers/forkserver.py, _own_proc).
var kernelKnobs = []string{"/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus", "/proc/fs"}

// knobCovers are bwrap's arguments, after its --proc, that show each of
// kernelKnobs read-only: the host's own entry bound over the fresh one (a
// sysctl reads and writes the same through either; bwrap takes a bind's
// source from the host's tree). An entry this kernel lacks (no SysRq
// built in) is left out, as bwrap fails on a missing source.
var knobCovers = sync.OnceValue(func() []string {
	var args []string
	for _, p := range kernelKnobs {
		if _, err := os.Lstat(p); err == nil {
			args = append(args, "--ro-bind", p, p)
		}
	}
	return args
})
