package subprocess

import (
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// openTickPipe makes the tick pipe: the child's read end blocks (its
// flusher thread waits in read), the parent's write end never does.
func (p *proc) openTickPipe() (child *os.File, err error) {
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_CLOEXEC); err != nil {
		return nil, err
	}
	if err := unix.SetNonblock(fds[1], true); err != nil {
		unix.Close(fds[0])
		unix.Close(fds[1])
		return nil, err
	}
	p.tickFD = fds[1]
	return os.NewFile(uintptr(fds[0]), "child-ticks"), nil
}

// Flush ticks. A driver that coalesces output (python) sends what it
// buffered on a timer while a cell runs; waking that timer at the start of
// every cell costs a short cell (1+1) 15-20 µs. So the host keeps the time
// instead: while a request runs tickEvery after it was sent, it writes a
// byte to the tick pipe every tickEvery until the request's idle arrives,
// and the driver's flusher thread, blocked reading the pipe, flushes on
// each. A cell shorter than tickEvery costs nothing. The write never
// blocks: a full pipe (a driver that does not read) drops the tick.
const tickEvery = 2 * time.Millisecond

// tickFDEnv names the variable that tells the driver its tick fd; the
// driver unsets it first thing.
const tickFDEnv = "KH_TICK_FD"

var tickByte = []byte{0}

// startTicks has ticks sent for the request just begun (p.req) until no
// request runs (stopTicks); a no-op for a driver without the tick pipe.
func (p *proc) startTicks() {
	p.tickMu.Lock()
	defer p.tickMu.Unlock()
	if p.tickFD < 0 {
		return
	}
	if p.tickTimer == nil {
		p.tickTimer = time.AfterFunc(tickEvery, p.tick)
	} else {
		p.tickTimer.Reset(tickEvery)
	}
}

func (p *proc) tick() {
	p.tickMu.Lock()
	defer p.tickMu.Unlock()
	if p.tickFD < 0 || p.req.current() == "" {
		return
	}
	_, _ = unix.Write(p.tickFD, tickByte) // EAGAIN: the pipe holds ticks enough
	p.tickTimer.Reset(tickEvery)
}

// stopTicks stops the ticks once the request ended, unless the next one
// began meanwhile: its startTicks, after its begin, waits for tickMu.
func (p *proc) stopTicks() {
	p.tickMu.Lock()
	defer p.tickMu.Unlock()
	if p.tickTimer != nil && p.req.current() == "" {
		p.tickTimer.Stop()
	}
}

// closeTicks stops the ticks for good and closes the tick pipe, under
// tickMu so that no tick writes to a descriptor number reused meanwhile.
func (p *proc) closeTicks() {
	p.tickMu.Lock()
	defer p.tickMu.Unlock()
	if p.tickTimer != nil {
		p.tickTimer.Stop()
	}
	if p.tickFD >= 0 {
		unix.Close(p.tickFD)
		p.tickFD = -1
	}
}
