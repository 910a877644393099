package pluginrpc

import (
	"os"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"
)

// parentPollInterval is how often a plugin checks that its host still lives.
// Linux tells a process nothing when its parent dies unless it asked with
// PR_SET_PDEATHSIG, which the host sets too; polling getppid is the backstop
// that also works when the plugin was started by something else.
const parentPollInterval = 200 * time.Millisecond

// watchParent calls exit once the process that started the plugin is gone
// (the plugin was re-parented), and returns when done closes.
func watchParent(done <-chan struct{}, exit func(why string)) {
	parent := os.Getppid()
	t := time.NewTicker(parentPollInterval)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
			if os.Getppid() != parent {
				exit("host process exited")
				return
			}
		}
	}
}

// keepStdoutForHandshake points file descriptor 1 at stderr and keeps the real
// stdout only for go-plugin's handshake line (os.Stdout). Whatever a library
// or a child process writes to fd 1 then lands in the plugin's log instead of
// corrupting the handshake. A print through os.Stdout before Serve still
// breaks start-up; the host reports that clearly.
func keepStdoutForHandshake(log hclog.Logger) {
	fd, err := unix.FcntlInt(1, unix.F_DUPFD_CLOEXEC, 3)
	if err != nil {
		log.Warn("cannot duplicate stdout; fd 1 stays the handshake pipe", "error", err)
		return
	}
	if err := unix.Dup3(2, 1, 0); err != nil {
		unix.Close(fd)
		log.Warn("cannot point fd 1 at stderr", "error", err)
		return
	}
	os.Stdout = os.NewFile(uintptr(fd), "/dev/stdout")
}
