package subprocess

import (
	"context"
	"sync"
	"time"
)

// cellActivity is whether the transport's contexts run cells (requests
// that are not silent), for the pool's refill: a fork made ahead of need
// warms up before it says ready (procSpec.warmUp), 150-300 ms of CPU,
// and run beside a session's first cells it took their core (on 2 cores
// the chart cell took 2-3x as long). So a refill waits until the cells
// pause (awaitPause). Silent requests (the engine's set-up of a new
// context) do not count: they take a millisecond. A hand-out does
// (handedOut): the new context's first cell follows it.
type cellActivity struct {
	mu      sync.Mutex
	running int
	lastEnd time.Time
	paused  chan struct{} // closed when the last running cell ends, then replaced
}

func newCellActivity() *cellActivity {
	return &cellActivity{paused: make(chan struct{})}
}

// cellPause is how long no cell must run before a refill starts; maxHold
// bounds the wait, so that contexts busy without a pause still get a pool.
const (
	cellPause = 250 * time.Millisecond
	maxHold   = 2 * time.Second
)

func (a *cellActivity) begin() {
	a.mu.Lock()
	a.running++
	a.mu.Unlock()
}

func (a *cellActivity) end() {
	a.mu.Lock()
	if a.running--; a.running == 0 {
		a.lastEnd = time.Now()
		close(a.paused)
		a.paused = make(chan struct{})
	}
	a.mu.Unlock()
}

// handedOut says a context was just handed out: its first cells follow
// within milliseconds, and a refill that started in between (no cell
// running, none for cellPause) would warm up beside them. So the pause
// counts from the hand-out too.
func (a *cellActivity) handedOut() {
	a.mu.Lock()
	a.lastEnd = time.Now()
	a.mu.Unlock()
}

// awaitPause waits until no cell has run for cellPause, for at most
// maxHold, or until ctx ends or taken is closed (a kernel claimed the
// slot this wait holds back: it must not wait for its own pause).
func (a *cellActivity) awaitPause(ctx context.Context, taken chan struct{}) {
	deadline := time.Now().Add(maxHold)
	for {
		a.mu.Lock()
		running, lastEnd, paused := a.running, a.lastEnd, a.paused
		a.mu.Unlock()
		now := time.Now()
		wait := deadline.Sub(now)
		if running == 0 {
			wait = min(wait, lastEnd.Add(cellPause).Sub(now))
		}
		if wait <= 0 {
			return
		}
		timer := time.NewTimer(wait)
		select {
		case <-paused:
		case <-timer.C:
		case <-ctx.Done():
		case <-taken:
		}
		timer.Stop()
		if ctx.Err() != nil || isClosed(taken) {
			return
		}
	}
}
