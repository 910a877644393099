package jupyter

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Nothing this transport starts is left on the server. Every kernel id the
// server gives it is on record (Transport.owned) until its delete succeeded
// (or the server no longer knows it); Close deletes what is still on record.
//
// A start request the transport gave up on (StartTimeout, or its caller
// left) may still create the kernel: Enterprise Gateway answers the start
// only once the remote kernel is up, and Jupyter Server keeps starting a
// kernel whose client went away. So the request is not cancelled: it stays
// open (for lateWindow at most), and the kernel it is answered with is
// deleted by id. That works on every gateway, also those that do not list
// kernels (Kernel Gateway's and Enterprise Gateway's default). Only when the
// request ends without an answer (its connection broke) does the transport
// look for the kernel in GET api/kernels, where the gateway allows it: a
// kernel of the requested spec that was not on the server before the
// request, that has no connection and is not on record, seen so on two polls
// in a row (a start that just succeeded records its kernel between the two),
// is deleted.

// lateWindow is how long an abandoned start request is kept open, and how
// long its kernel is looked for when it was not answered (at least
// StartTimeout): the gateway's own launch timeout (EG's KERNEL_LAUNCH_TIMEOUT)
// ends its attempts well before. reapInterval is the time between two polls
// of GET api/kernels.
const (
	lateWindow   = 10 * time.Minute
	reapInterval = 2 * time.Second
)

// closeWait is how long Close waits for abandoned start requests to be
// answered, so that their kernels are deleted before the host exits.
const closeWait = 10 * time.Second

// createKernel sends the start request and records the kernel it got. The
// caller waits for at most StartTimeout; a request it gave up on goes on in
// the background, and its kernel is deleted when it is answered.
func (t *Transport) createKernel(ctx context.Context, name string) (kernelModel, error) {
	timeout := t.c.cfg.StartTimeout
	// What was there before: without it a late kernel cannot be told apart
	// when the request breaks unanswered.
	before, listErr := t.c.listKernels(ctx)

	type answer struct {
		km  kernelModel
		err error
	}
	answered := make(chan answer, 1)
	var mu sync.Mutex
	abandoned := false
	window := max(lateWindow, timeout)
	rctx, rcancel := context.WithTimeout(t.bgCtx, window)
	t.bg.Add(1)
	go func() {
		defer t.bg.Done()
		defer rcancel()
		km, err := t.c.createKernel(rctx, name, window)
		if err == nil {
			t.own(km.ID)
		}
		mu.Lock()
		gaveUp := abandoned
		if !gaveUp {
			answered <- answer{km, err}
		}
		mu.Unlock()
		if !gaveUp {
			return
		}
		defer t.abandoned.Done()
		var ae *apiError
		switch {
		case err == nil:
			ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
			defer cancel()
			if err := t.deleteOwned(ctx, km.ID); err != nil {
				t.c.cfg.Warn("a start given up on was answered late; deleting its kernel failed (tried again at exit)", "kernel", km.ID, "err", err.Error())
			} else {
				t.c.cfg.Warn("a start given up on was answered late; its kernel was deleted", "kernel", km.ID)
			}
		case !errors.As(err, &ae) && listErr == nil:
			t.reapLate(name, before) // the server may have created it all the same
		}
	}()

	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var why error
	select {
	case a := <-answered:
		return a.km, a.err
	case <-timer.C:
		why = fmt.Errorf("the server did not answer the start request within the start timeout (%v); the kernel it creates later is deleted", timeout)
	case <-ctx.Done():
		why = fmt.Errorf("jupyter POST api/kernels: %w (the kernel the server creates later is deleted)", ctx.Err())
	}
	mu.Lock()
	defer mu.Unlock()
	select {
	case a := <-answered: // answered in the meantime
		return a.km, a.err
	default:
	}
	abandoned = true
	t.abandoned.Add(1)
	return kernelModel{}, why
}

// own records a kernel id the server gave this transport.
func (t *Transport) own(id string) {
	t.mu.Lock()
	t.owned[id] = true
	t.mu.Unlock()
}

func (t *Transport) isOwned(id string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.owned[id]
}

// deleteOwned deletes kernel id on the server and takes it off the record
// once the server no longer has it (a 404 says so too). A delete of id
// already in flight is waited for, not sent again: Kernel Gateway 2.5.2
// answers a second DELETE of a kernel it is still deleting with a 500 and
// then leaves its next request unanswered for about 30 s, and Close meets
// one whenever a kernel's Shutdown outlived its caller (the plugin's stream
// gives a Shutdown 1 s; KG's delete takes 1-2 s).
func (t *Transport) deleteOwned(ctx context.Context, id string) error {
	for {
		t.mu.Lock()
		inFlight, busy := t.deleting[id]
		if !busy {
			done := make(chan struct{})
			t.deleting[id] = done
			t.mu.Unlock()
			err := t.deleteUntilGone(ctx, id)
			t.mu.Lock()
			delete(t.deleting, id)
			if err == nil {
				delete(t.owned, id)
			}
			t.mu.Unlock()
			close(done)
			return err
		}
		t.mu.Unlock()
		select {
		case <-inFlight:
		case <-ctx.Done():
			return ctx.Err()
		}
		if !t.isOwned(id) {
			return nil // the delete in flight succeeded
		}
	}
}

// A kernel's DELETE is bounded by deleteAnswerTimeout, and sent at most
// deleteAttempts times while the server leaves it unanswered (see
// deleteUntilGone). A delete waits for the kernel to shut down (Jupyter
// Server gives it 5 s before it kills it), 1-2 s on Kernel Gateway, longer
// on a loaded machine.
const (
	deleteAnswerTimeout = 15 * time.Second
	deleteAttempts      = 3
)

// deleteUntilGone deletes kernel id on the server and makes sure of it when
// a DELETE goes unanswered: Kernel Gateway 2.5.2 sometimes never answers one
// ("Cannot enter into task" in its log), whether or not it deleted the
// kernel. After a DELETE without an answer it asks the server whether the
// kernel is still there (GET api/kernels/{id}; unlike the list, every
// gateway serves it): gone is done; there (or no answer again) gets another
// DELETE, deleteAttempts in all, within ctx. A DELETE the server fails
// (5xx) is treated the same, after a pause: Jupyter Server answers 500
// "Unhandled error" to the DELETE of a kernel that died and that its
// restarter is replacing. Each such DELETE is logged (Config.Warn), and the
// error says what may remain. A 404 is success: the kernel is gone already
// (culled, or lost).
func (t *Transport) deleteUntilGone(ctx context.Context, id string) error {
	var failed []string
	for attempt := 1; ; attempt++ {
		err := t.c.deleteKernel(ctx, id)
		var ae *apiError
		if err == nil || errors.As(err, &ae) && ae.Status == http.StatusNotFound {
			if attempt > 1 {
				t.c.cfg.Warn("the Jupyter server deleted a kernel only when its DELETE was sent again; the kernel is deleted", "kernel", id, "attempts", attempt)
			}
			return nil
		}
		serverFailed := ae != nil && ae.Status >= 500
		what := "left a kernel's DELETE unanswered"
		if serverFailed {
			what = "failed a kernel's DELETE"
		}
		if attempt == 1 && !errors.Is(err, errNoAnswer) && !serverFailed || ctx.Err() != nil {
			if len(failed) > 0 {
				return fmt.Errorf("%s; then %w", strings.Join(failed, "; "), err)
			}
			return err
		}
		failed = append(failed, err.Error())
		if serverFailed && !pause(ctx, deleteRetryPause<<(attempt-1)) {
			return fmt.Errorf("%s; then %w", strings.Join(failed, "; "), ctx.Err())
		}
		if t.c.kernelGone(ctx, id) {
			t.c.cfg.Warn("the Jupyter server "+what+"; it no longer has the kernel", "kernel", id, "attempts", attempt, "err", err.Error())
			return nil
		}
		if attempt == deleteAttempts || ctx.Err() != nil {
			t.c.cfg.Warn("the Jupyter server did not delete a kernel; it may still be there (deleted again when the transport closes)", "kernel", id, "attempts", attempt, "err", err.Error())
			return fmt.Errorf("kernel %s may still be on the server (deleted again when the transport closes): %d DELETEs sent, none deleted it: %s", id, attempt, strings.Join(failed, "; "))
		}
		t.c.cfg.Warn("the Jupyter server "+what+" and still has the kernel; sending it again", "kernel", id, "attempt", attempt, "err", err.Error())
	}
}

// deleteRetryPause is the pause before a failed DELETE is sent again,
// doubling per attempt: the server's restarter replaces a dead kernel
// within a second or two, and nothing says when it is done.
const deleteRetryPause = 500 * time.Millisecond

// pause waits d, or until ctx ends (false).
func pause(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// deleteAllOwned deletes every kernel still on record, at once, within
// cleanupTimeout.
func (t *Transport) deleteAllOwned() {
	t.mu.Lock()
	ids := make([]string, 0, len(t.owned))
	for id := range t.owned {
		ids = append(ids, id)
	}
	t.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = t.deleteOwned(ctx, id)
		}()
	}
	wg.Wait()
}

// reapLate looks for the kernel of an abandoned, unanswered start of spec
// name in the background and deletes it.
func (t *Transport) reapLate(name string, before []kernelModel) {
	known := map[string]bool{}
	for _, k := range before {
		known[k.ID] = true
	}
	t.bg.Add(1)
	go func() {
		defer t.bg.Done()
		ctx, cancel := context.WithTimeout(t.bgCtx, max(lateWindow, t.c.cfg.StartTimeout))
		defer cancel()
		suspects := map[string]bool{} // seen on the previous poll
		tick := time.NewTicker(reapInterval)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			ks, err := t.c.listKernels(ctx)
			if err != nil {
				continue
			}
			now := map[string]bool{}
			for _, k := range ks {
				if known[k.ID] || k.Name != name || k.Connections > 0 || t.isOwned(k.ID) {
					continue
				}
				if !suspects[k.ID] {
					now[k.ID] = true
					continue
				}
				t.own(k.ID) // no other reaper takes it too
				if t.deleteOwned(ctx, k.ID) == nil {
					return
				}
			}
			suspects = now
		}
	}()
}
