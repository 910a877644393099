package jupyter

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/gorilla/websocket"

	"github.com/kernelhost/kernelhost/core"
)

// Transport starts kernels on one Jupyter Server.
type Transport struct {
	c       *client
	version string

	mu    sync.Mutex
	specs kernelSpecs     // refreshed when a language is not found
	owned map[string]bool // every kernel id the server gave us, until deleted (reap.go)
	// deleting holds the ids whose delete is in flight, each with a channel
	// closed when it ends (deleteOwned).
	deleting map[string]chan struct{}

	bgCtx     context.Context // ends abandoned start requests and the reapers at Close
	bgCancel  context.CancelFunc
	bg        sync.WaitGroup
	abandoned sync.WaitGroup // start requests given up on and not answered yet

	// lastUpgrade is when the server last completed one of our websocket
	// upgrades (unix nanoseconds): the progress a held upgrade is judged
	// against (dialWhileAlive).
	lastUpgrade atomic.Int64
	// upgrading counts the websocket upgrades in flight (dialWhileAlive).
	upgrading atomic.Int32
}

var _ core.Transport = (*Transport)(nil)

// New connects to the server in cfg: it checks that the server answers with
// the token and reads its kernel specs. ctx bounds these calls only.
func New(ctx context.Context, cfg Config) (*Transport, error) {
	c, err := newClient(cfg.withDefaults())
	if err != nil {
		return nil, err
	}
	v, err := c.version(ctx)
	if err != nil {
		c.httpTr.CloseIdleConnections()
		return nil, fmt.Errorf("jupyter server at %s: %w", cfg.URL, err)
	}
	specs, err := c.kernelSpecs(ctx)
	if err != nil {
		c.httpTr.CloseIdleConnections()
		return nil, fmt.Errorf("jupyter server at %s: %w", cfg.URL, err)
	}
	bgCtx, bgCancel := context.WithCancel(context.Background())
	return &Transport{c: c, version: v, specs: specs, owned: map[string]bool{}, deleting: map[string]chan struct{}{}, bgCtx: bgCtx, bgCancel: bgCancel}, nil
}

// Close leaves nothing on the server: it waits (closeWait at most) for
// start requests given up on to be answered, so that their kernels are
// deleted, stops looking for late kernels, and deletes every kernel still on
// record (those whose delete failed, or whose Shutdown never came), within
// cleanupTimeout. Then it releases the transport's idle HTTP connections.
func (t *Transport) Close() {
	answered := make(chan struct{})
	go func() {
		t.abandoned.Wait()
		close(answered)
	}()
	wait := time.NewTimer(closeWait)
	select {
	case <-answered:
	case <-wait.C:
	}
	wait.Stop()
	t.bgCancel()
	t.bg.Wait()
	<-answered // the requests ended with bgCtx
	t.deleteAllOwned()
	t.c.httpTr.CloseIdleConnections()
}

// Info names the transport and the languages of the server's kernel specs.
// Its kernels run where the server runs them, maybe on another machine.
func (t *Transport) Info() core.TransportInfo {
	t.mu.Lock()
	defer t.mu.Unlock()
	seen := map[string]bool{}
	for lang := range t.c.cfg.KernelNames {
		seen[core.NormalizeLanguage(lang)] = true
	}
	for _, ks := range t.specs.Kernelspecs {
		seen[core.NormalizeLanguage(ks.Spec.Language)] = true
	}
	if seen["javascript"] {
		seen["typescript"] = true // runs on the javascript kernel
	}
	langs := make([]string, 0, len(seen))
	for l := range seen {
		langs = append(langs, l)
	}
	sort.Strings(langs)
	return core.TransportInfo{Name: "jupyter", Version: t.version, Languages: langs, RemoteKernels: true}
}

// kernelName picks the kernel spec for a language: the configured name, else
// the server's default spec if it is of that language, else the first (by
// name) spec of that language.
func (t *Transport) kernelName(lang string) (string, bool) {
	for l, name := range t.c.cfg.KernelNames {
		if core.NormalizeLanguage(l) == lang {
			return name, true
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if d, ok := t.specs.Kernelspecs[t.specs.Default]; ok && core.NormalizeLanguage(d.Spec.Language) == lang {
		return t.specs.Default, true
	}
	var names []string
	for name, ks := range t.specs.Kernelspecs {
		if core.NormalizeLanguage(ks.Spec.Language) == lang {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return "", false
	}
	sort.Strings(names)
	return names[0], true
}

// StartKernel creates a kernel for spec.Language and connects to it. The
// kernel runs in the server's root dir: the engine applies spec.Cwd with a
// snippet. Its errors do not begin with "start <language> kernel": the
// plugin boundary says that already (it read "start python kernel: start
// python kernel: …").
func (t *Transport) StartKernel(ctx context.Context, spec core.KernelSpec) (core.Kernel, error) {
	lang := core.KernelLanguage(core.NormalizeLanguage(spec.Language))
	name, ok := t.kernelName(lang)
	if !ok { // the server may have gained a kernel spec since New
		specs, err := t.c.kernelSpecs(ctx)
		if err != nil {
			return nil, fmt.Errorf("read the kernel specs: %w", err)
		}
		t.mu.Lock()
		t.specs = specs
		t.mu.Unlock()
		if name, ok = t.kernelName(lang); !ok {
			// The client asked for something this server cannot run: KindInvalid (400).
			return nil, &core.Error{Kind: core.KindInvalid, Msg: fmt.Sprintf("the Jupyter server has no kernel spec for language %s (it has %s)",
				core.Quote(lang), strings.Join(t.Info().Languages, ", "))}
		}
	}
	deadline := time.Now().Add(t.c.cfg.StartTimeout)
	for attempt := 1; ; attempt++ {
		k, err := t.startKernel(ctx, name, attempt)
		if err == nil {
			return k, nil
		}
		var silent *silentChannelsError
		if !errors.As(err, &silent) || ctx.Err() != nil || time.Now().After(deadline) {
			if attempt > 1 {
				err = fmt.Errorf("%w (attempt %d: the kernels of the earlier attempts did not answer on their websocket, or the server held it or shut them down, and were deleted)", err, attempt)
			}
			return nil, err
		}
		t.c.cfg.Warn("a new kernel's websocket did not answer; the kernel was deleted and another is started", "attempt", attempt, "err", err.Error())
	}
}

// startKernel is attempt number attempt at starting a kernel of spec name:
// the start request, the websocket, and a first answer on it
// (checkChannels). A kernel that fails any of them is deleted.
func (t *Transport) startKernel(ctx context.Context, name string, attempt int) (*kernel, error) {
	km, err := t.createKernel(ctx, name)
	if err != nil {
		return nil, err
	}
	k := newKernel(t.c, km.ID, uuid.NewString())
	k.deleteOnServer = func(ctx context.Context) error { return t.deleteOwned(ctx, km.ID) }
	ws, err := t.dialWhileAlive(ctx, km, k.session, heldUpgradeBound(t.c.cfg.answerTimeout, attempt))
	if err == nil {
		c := newConn(ws)
		if err = t.checkChannels(ctx, c, km.ID, k.session); err != nil {
			ws.Close()
		}
	}
	if err != nil {
		// Do not leave a kernel nobody can reach running on the server.
		delCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		if derr := t.deleteOwned(delCtx, km.ID); derr != nil {
			err = fmt.Errorf("%w; deleting the kernel failed too (tried again at exit): %v", err, derr)
		}
		return nil, err
	}
	k.start(ws)
	return k, nil
}

// goneCheckInterval is how often a start whose websocket has not opened
// within answerTimeout asks whether its kernel still exists.
const goneCheckInterval = 2 * time.Second

// heldUpgradeBound is how long attempt number attempt lets the server hold
// a kernel's websocket upgrade after it last completed another of this
// transport's (dialWhileAlive): answer (answerTimeout) on the first attempt,
// doubling with each attempt, so that a kernel slower to start than the
// others of its burst by more than answer gets through on a later attempt.
func heldUpgradeBound(answer time.Duration, attempt int) time.Duration {
	return answer << min(attempt-1, 4)
}

// dialWhileAlive opens the websocket of kernel km (dialChannels). The
// server holds the upgrade until the kernel answers a request of its own,
// so it gives up early, with a silentChannelsError (the kernel is deleted
// and the start tried again), in four cases:
//   - the server no longer has the kernel: a gateway that culls kernels
//     idle for less than a slow start takes (Kernel Gateway culls
//     "starting" kernels too) would otherwise hold the upgrade until the
//     connect timeout;
//   - the kernel is up (the server has seen it send on IOPub, as ipykernel
//     does as soon as it runs, or counts a websocket of it open: it
//     completed the upgrade on its side and the answer never came) and the
//     upgrade was held heldBound while the kernel was up and no other
//     upgrade of ours was in flight. A kernel that runs answers the
//     server's request within milliseconds, and a server with no other
//     upgrade to complete is not busy; an upgrade still held is stuck, not
//     slow, and the server would hold it until its kernel_info_timeout
//     (60 s) and then often open a websocket the kernel never answers.
//     Seen on Kernel Gateway with one start at a time, and on a fresh
//     Enterprise Gateway. In a burst the next case judges instead: a server
//     starting dozens of kernels completes upgrades seconds apart;
//   - other upgrades got through since this one began, and this one was
//     held heldBound past both its own start and the last of them. In a
//     burst the server completes upgrades one after another as kernels come
//     up (20 at once on two cores: every upgrade within 7 s), so a kernel
//     whose upgrade is held while the others get through is stuck too. This
//     needs nothing of the kernel's state, which a server misses when the
//     kernel's first IOPub message comes before the server listens;
//   - the kernel was never seen up, and its upgrade, the only one of ours
//     in flight, was held twice heldBound since it began. A kernel process
//     that failed as it started but did not exit (ipykernel whose port was
//     taken between the server choosing it and the kernel binding it hangs
//     in its exit, so the server's restarter sees it alive) never sends
//     anything; a lone start on two cores under CI's load sends its first
//     status within seconds. A slower one gets through on a later attempt,
//     whose bound doubles.
//
// While none of these holds (64 kernels starting at once on two cores take
// tens of seconds before the first answers; a remote kernel waits for its
// pod) the upgrade waits for the connect timeout, as a kernel that is slow
// to start must. It asks the server about the kernel only once the upgrade
// took answerTimeout: a burst of healthy starts sends no extra requests to a
// server that is busy starting them.
func (t *Transport) dialWhileAlive(ctx context.Context, km kernelModel, session string, heldBound time.Duration) (*websocket.Conn, error) {
	dialCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	t.upgrading.Add(1)
	defer t.upgrading.Add(-1)
	w := &upgradeWatch{t: t, km: km, began: time.Now(), heldBound: heldBound}
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		if w.watch(dialCtx) != keepWaiting {
			cancel()
		}
	}()
	ws, err := t.c.dialChannels(dialCtx, km.ID, session)
	cancel()
	<-watched
	if err == nil {
		t.lastUpgrade.Store(time.Now().UnixNano())
		return ws, nil
	}
	if ctx.Err() == nil && w.verdict != keepWaiting {
		return nil, &silentChannelsError{msg: w.why()}
	}
	return nil, err
}

// heldVerdict is what an upgradeWatch made of a held upgrade.
type heldVerdict int

const (
	keepWaiting heldVerdict = iota
	kernelGone
	heldWhileOthers
	heldWhileUp
	heldNeverUp
)

// upgradeWatch judges the upgrade of one kernel's websocket while it is
// held (dialWhileAlive's cases). Its fields are the watch goroutine's until
// it returns.
type upgradeWatch struct {
	t         *Transport
	km        kernelModel
	began     time.Time
	heldBound time.Duration
	verdict   heldVerdict
	up        bool      // the kernel has been seen up
	loneSince time.Time // since when its upgrade is the only one of ours in flight
	// loneUpSince is since when it is also up.
	loneUpSince time.Time
}

// watch asks about the kernel every goneCheckInterval once the upgrade took
// answerTimeout, until ctx ends or it has a verdict, which it returns.
func (w *upgradeWatch) watch(ctx context.Context) heldVerdict {
	select {
	case <-ctx.Done():
		return keepWaiting
	case <-time.After(w.t.c.cfg.answerTimeout):
	}
	tick := time.NewTicker(goneCheckInterval)
	defer tick.Stop()
	for w.verdict == keepWaiting {
		select {
		case <-ctx.Done():
			return keepWaiting
		case <-tick.C:
		}
		w.verdict = w.judge(ctx)
	}
	return w.verdict
}

// judge looks at the upgrade and the kernel once.
func (w *upgradeWatch) judge(ctx context.Context) heldVerdict {
	last := w.t.lastUpgrade.Load()
	if last > w.began.UnixNano() && time.Since(time.Unix(0, last)) > w.heldBound {
		return heldWhileOthers
	}
	gctx, gcancel := context.WithTimeout(ctx, goneCheckInterval)
	var now kernelModel
	err := w.t.c.do(gctx, http.MethodGet, "api/kernels/"+url.PathEscape(w.km.ID), nil, &now)
	gcancel()
	var ae *apiError
	if errors.As(err, &ae) && ae.Status == http.StatusNotFound {
		return kernelGone
	}
	w.up = w.up || (err == nil && (now.sentSince(w.km) || now.Connections > 0))
	lone := w.t.upgrading.Load() == 1
	switch {
	case !lone:
		w.loneSince = time.Time{}
	case w.loneSince.IsZero() && last <= w.began.UnixNano():
		w.loneSince = w.began // no other upgrade completed since it began
	case w.loneSince.IsZero():
		w.loneSince = time.Now()
	}
	switch {
	case !lone || !w.up:
		w.loneUpSince = time.Time{}
	case w.loneUpSince.IsZero():
		w.loneUpSince = time.Now()
	}
	switch {
	case !w.loneUpSince.IsZero() && time.Since(w.loneUpSince) > w.heldBound:
		return heldWhileUp
	case !w.up && !w.loneSince.IsZero() && time.Since(w.loneSince) > 2*w.heldBound:
		return heldNeverUp
	}
	return keepWaiting
}

// why says what the verdict was, for the error that replaces the kernel.
func (w *upgradeWatch) why() string {
	id, held := w.km.ID, time.Since(w.began).Round(time.Second)
	switch w.verdict {
	case kernelGone:
		return fmt.Sprintf("connect to kernel %s: the server shut the kernel down before its websocket opened (a gateway culling kernels that start slowly?)", id)
	case heldWhileOthers:
		return fmt.Sprintf("connect to kernel %s: the server held the websocket upgrade %v while it completed others (the kernel did not answer it); the kernel was deleted", id, held)
	case heldWhileUp:
		return fmt.Sprintf("connect to kernel %s: the server held the websocket upgrade %v, %v of them with the kernel up (the server had seen its first status) and no other upgrade pending; the kernel was deleted", id, held, time.Since(w.loneUpSince).Round(time.Second))
	default:
		return fmt.Sprintf("connect to kernel %s: the server held the websocket upgrade %v with no other upgrade pending, and the kernel never sent anything (it failed as it started?); the kernel was deleted", id, held)
	}
}

// answerTimeout bounds the wait for the first answer on a kernel's fresh
// websocket (checkChannels). Jupyter Server and Kernel Gateway complete the
// websocket upgrade only once the kernel answered a kernel_info_request of
// their own, so a kernel behind a working connection answers ours within
// milliseconds; 15 s leaves room for a 2-core machine busy starting dozens
// of kernels at once, and is short beside the start timeout, within which a
// kernel that did not answer is replaced.
const answerTimeout = 15 * time.Second

// silentChannelsError says a kernel's fresh websocket did not answer: the
// start is tried again with a new kernel.
type silentChannelsError struct{ msg string }

func (e *silentChannelsError) Error() string { return e.msg }

// checkChannels sends a kernel_info_request on c and waits (answerTimeout,
// or ConnectTimeout if shorter) for its reply. A websocket that opens but
// never carries anything (seen in bursts of starts, and on a fresh
// Enterprise Gateway, which holds its first websocket 60 s and then leaves
// it silent) would otherwise hang the context's first request.
func (t *Transport) checkChannels(ctx context.Context, c *conn, id, session string) error {
	bound := min(t.c.cfg.answerTimeout, t.c.cfg.ConnectTimeout)
	deadline := time.Now().Add(bound)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	msgID := auxPrefix + "check-" + uuid.NewString()
	frame, binaryFrame, err := encodeRequest(c.v1, session, msgID, "kernel_info_request", struct{}{})
	if err != nil {
		return err
	}
	wctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	silent := func() error {
		return &silentChannelsError{msg: fmt.Sprintf("connect to kernel %s: the websocket opened but the kernel did not answer on it within %v; the kernel was deleted", id, bound)}
	}
	if err := c.write(wctx, binaryFrame, frame); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return silent()
	}
	_ = c.ws.SetReadDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { _ = c.ws.SetReadDeadline(time.Now()) })
	defer stop()
	for {
		typ, frame, err := c.ws.ReadMessage()
		if err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("connect to kernel %s: %w", id, ctx.Err())
			}
			return silent()
		}
		m, err := decodeFrame(c.v1, typ == websocket.BinaryMessage, frame)
		if err == nil && m.Channel == "shell" && m.Parent.MsgID == msgID {
			return nil
		}
	}
}
