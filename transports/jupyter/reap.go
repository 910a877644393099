package jupyter

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// A start request the transport gave up on (StartTimeout, or its caller
// left) may still create the kernel on the server: Enterprise Gateway keeps
// bringing up the remote kernel and answers to nobody. Nobody would ever
// delete it, so the transport looks for it: a kernel of the requested spec
// that was not on the server before the request, that has no connection and
// that no start of this transport claimed, seen so on two polls in a row (a
// start that just succeeded claims its kernel between the two), is deleted.
// One such kernel per abandoned start, looked for during reapWindow after
// the start gave up.

// reapInterval is the time between two polls of GET api/kernels; reapWindow
// is how long a late kernel is looked for (at least StartTimeout): the
// gateway's own launch timeout (EG's KERNEL_LAUNCH_TIMEOUT) ends its
// attempts well before.
const (
	reapInterval = 2 * time.Second
	reapWindow   = 10 * time.Minute
)

// createKernel sends the start request, bounded by StartTimeout, and claims
// the kernel it got; if the request is abandoned it starts the reaper.
func (t *Transport) createKernel(ctx context.Context, name string) (kernelModel, error) {
	timeout := t.c.cfg.StartTimeout
	// What was there before: without it a late kernel cannot be told apart.
	before, listErr := t.c.listKernels(ctx)
	rctx, cancel := context.WithTimeout(ctx, timeout)
	km, err := t.c.createKernel(rctx, name)
	cancel()
	if err == nil {
		t.claim(km.ID)
		return km, nil
	}
	if rctx.Err() == nil {
		return km, err // the server answered: nothing was created
	}
	if listErr == nil {
		t.reapLate(name, before)
	}
	if errors.Is(rctx.Err(), context.DeadlineExceeded) && ctx.Err() == nil {
		return km, fmt.Errorf("the server did not answer the start request within the start timeout (%v); a kernel it creates later is deleted: %v", timeout, ownTimeout(err))
	}
	return km, err
}

func (t *Transport) claim(id string) {
	t.mu.Lock()
	t.claimed[id] = true
	t.mu.Unlock()
}

// reapLate looks for the kernel of an abandoned start of spec name in the
// background and deletes it.
func (t *Transport) reapLate(name string, before []kernelModel) {
	known := map[string]bool{}
	for _, k := range before {
		known[k.ID] = true
	}
	t.bg.Add(1)
	go func() {
		defer t.bg.Done()
		ctx, cancel := context.WithTimeout(t.bgCtx, max(reapWindow, t.c.cfg.StartTimeout))
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
				if known[k.ID] || k.Name != name || k.Connections > 0 || t.isClaimed(k.ID) {
					continue
				}
				if !suspects[k.ID] {
					now[k.ID] = true
					continue
				}
				t.claim(k.ID) // no other reaper takes it too
				if t.c.deleteKernel(ctx, k.ID) == nil {
					return
				}
			}
			suspects = now
		}
	}()
}

func (t *Transport) unclaim(id string) {
	t.mu.Lock()
	delete(t.claimed, id)
	t.mu.Unlock()
}

func (t *Transport) isClaimed(id string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.claimed[id]
}
