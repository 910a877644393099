package subprocess

import (
	"os"

	"golang.org/x/sys/unix"
)

// parkUntilExit returns once the child process pid has exited, without
// reaping it: the wait that reaps it (exec.Cmd.Wait) then returns at once.
// It parks on the netpoller, through a pidfd, where exec.Cmd.Wait would
// block a thread in waitid for the process's whole life, holding its P
// until the runtime's sysmon takes it back; the plugin runs with one P, and
// with sysmon out of its deep sleep (the Makefile's RUNTIME_LDFLAGS, which
// the plugins carry) that can take up to 10 ms. Where there is no pollable
// pidfd (Linux before 5.3) it returns at once and the wait blocks as before.
func parkUntilExit(pid int) {
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if err != nil {
		return
	}
	f := os.NewFile(uintptr(fd), "pidfd")
	defer f.Close()
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	// A pidfd is readable once its process has exited. WNOWAIT leaves it
	// to be reaped by the caller's wait.
	_ = rc.Read(func(fd uintptr) bool {
		var info unix.Siginfo
		err := unix.Waitid(unix.P_PIDFD, int(fd), &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
		return err != nil || info.Signo != 0
	})
}
