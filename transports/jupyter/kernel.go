package jupyter

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/gorilla/websocket"

	"github.com/kernelhost/kernelhost/core"
)

// cleanupTimeout bounds REST calls made to clean up after a failure.
const cleanupTimeout = 10 * time.Second

// Reconnect backoff: doubling from the first delay up to the cap, for at most
// Config.ReconnectTimeout in all.
const (
	reconnectFirstDelay = 50 * time.Millisecond
	reconnectMaxDelay   = 2 * time.Second
)

// liveRequest is the progress of a request this client sent.
type liveRequest struct {
	id    string        // its msg_id
	heard bool          // a message of it arrived
	idle  bool          // its status idle was forwarded
	reply *core.Message // its execute_reply, held until idle arrives
	probe *time.Timer   // sends an idle probe while the reply is held
	// silence asks the server whether the kernel still exists if nothing
	// of the request is heard (silenceCheckDelay); stopped by the first
	// message, so that a busy kernel's process is not woken by a timer
	// for every request it ran.
	silence *time.Timer

	// The range of the kernel's message counter its messages carried, under
	// prefix (see counterLog); numbered once one was seen.
	numbered    bool
	prefix      string
	first, last uint64
}

// idleProbeDelay is how long a reply waits for its idle before the kernel is
// probed. A ZeroMQ queue that overflows (the server fell behind the kernel's
// IOPub) drops messages without a word, and a lost idle would leave the
// request unfinished for ever. A kernel_info_request sent now has its own
// busy/idle published behind everything the request published: when the
// probe's idle arrives and the request's has not, the request's was lost.
const idleProbeDelay = time.Second

// kernel is one kernel on the server and its channels websocket.
//
// One supervisor goroutine owns the connection: it reads frames (the only
// reader), and when the socket drops it reports StateDisconnected, redials
// with bounded backoff, and at the end closes msgs. A ping goroutine runs per
// connection. Writes are serialized by conn.writeMu.
type kernel struct {
	c       *client
	id      string
	session string

	msgs     chan core.Message
	ctx      context.Context // cancelled by Shutdown
	cancel   context.CancelFunc
	exited   chan struct{} // closed when the supervisor has ended and msgs is closed
	delOnce  sync.Once
	delErr   error
	emitSem  chan struct{} // held while a message is checked and sent on msgs
	closed   bool          // msgs is closed; guarded by emitSem
	liveMu   sync.Mutex
	live     map[string]*liveRequest  // requests sent since the last restart/disconnect, by msg_id
	counters counterLog               // the kernel's message counter while requests are live
	probes   map[string]string        // idle probe msg_id → request msg_id
	nudges   map[string]chan struct{} // nudge msg_id → closed when its first IOPub message arrives
	ready    chan struct{}            // closed while IOPub is known to flow (guarded by mu)
	bg       sync.WaitGroup           // background nudges after a restart by the server
	mu       sync.Mutex
	conn     *conn         // nil while disconnected
	connUp   chan struct{} // closed when conn is set
	lostErr  error         // why the kernel was given up, once it was
	restarts int           // manual restarts in progress (see forward)

	// deleteOnServer deletes the kernel on the server at Shutdown
	// (Transport.deleteOwned, which takes it off the transport's record).
	deleteOnServer func(ctx context.Context) error

	// lose, when set (tests only), drops the incoming messages it returns
	// true for, as a full ZeroMQ queue would. Atomic: a test sets it while
	// the reader already reads the kernel's start-up messages.
	lose atomic.Pointer[func(core.Message) bool]
}

type conn struct {
	ws      *websocket.Conn
	v1      bool
	writeMu sync.Mutex
	// idle is how long the server may be silent after it has all we wrote
	// before the connection is judged lost (serve sets it; 0: not yet);
	// holdReads is the least read deadline our writes ask for: while one is
	// under way, when its deadline and idle run out; after it, when the
	// server has had time to read and parse it (UnixNano; 0: none).
	idle      atomic.Int64
	holdReads atomic.Int64
}

// extendReads sets the read deadline: idle from now, or the hold of a
// write under way if that is later.
func (c *conn) extendReads() error {
	d := time.Now().Add(time.Duration(c.idle.Load()))
	if h := c.holdReads.Load(); h > d.UnixNano() {
		d = time.Unix(0, h)
	}
	return c.ws.SetReadDeadline(d)
}

var _ core.Kernel = (*kernel)(nil)

func newKernel(c *client, id, session string) *kernel {
	ctx, cancel := context.WithCancel(context.Background())
	return &kernel{
		c:       c,
		id:      id,
		session: session,
		msgs:    make(chan core.Message, 256),
		ctx:     ctx,
		cancel:  cancel,
		exited:  make(chan struct{}),
		emitSem: make(chan struct{}, 1),
		live:    map[string]*liveRequest{},
		probes:  map[string]string{},
		nudges:  map[string]chan struct{}{},
		ready:   closedChan(),
		connUp:  make(chan struct{}),
	}
}

func newConn(ws *websocket.Conn) *conn {
	return &conn{ws: ws, v1: ws.Subprotocol() == subprotocolV1}
}

func (k *kernel) start(ws *websocket.Conn) { go k.run(newConn(ws)) }

func (k *kernel) Messages() <-chan core.Message { return k.msgs }

// Execute sends an execute_request. While the websocket is reconnecting it
// waits for it, bounded by ctx.
func (k *kernel) Execute(ctx context.Context, req core.ExecuteRequest) error {
	max := k.c.cfg.MaxMessageSize
	if len(req.Code) > max {
		return tooLarge(len(req.Code), max)
	}
	if err := k.waitReady(ctx); err != nil {
		return fmt.Errorf("execute on kernel %s: %w", k.id, err)
	}
	c, err := k.waitConn(ctx)
	if err != nil {
		return fmt.Errorf("execute on kernel %s: %w", k.id, err)
	}
	frame, binaryFrame, err := encodeExecute(c.v1, k.session, req)
	if err != nil {
		return fmt.Errorf("execute on kernel %s: encode request: %w", k.id, err)
	}
	if len(frame) > max {
		return tooLarge(len(frame), max)
	}
	lr := &liveRequest{id: req.MsgID}
	k.liveMu.Lock()
	k.live[req.MsgID] = lr
	k.liveMu.Unlock()
	if err := c.write(ctx, binaryFrame, frame); err != nil {
		k.liveMu.Lock()
		delete(k.live, req.MsgID)
		k.liveMu.Unlock()
		return fmt.Errorf("execute on kernel %s: send request: %w", k.id, err)
	}
	k.liveMu.Lock()
	if !lr.heard && k.live[req.MsgID] == lr {
		lr.silence = time.AfterFunc(silenceCheckDelay, func() { k.checkSilence(req.MsgID, c) })
	}
	k.liveMu.Unlock()
	return nil
}

// silenceCheckDelay is how long a request may go without a first message
// (the kernel's busy comes within milliseconds) before the transport asks the
// server whether the kernel still exists. jupyter-server 1.x leaves the
// websocket of a kernel it culled or deleted open and silent: an execution
// sent to it would otherwise wait for the next ping tick's check
// (PingInterval) or longer.
const silenceCheckDelay = 2 * time.Second

// checkSilence closes c when request id has heard nothing and the server
// says the kernel is gone: the supervisor's redial then learns it for good,
// and the request ends with the kernel.
func (k *kernel) checkSilence(id string, c *conn) {
	k.liveMu.Lock()
	req, live := k.live[id]
	silent := live && !req.heard
	k.liveMu.Unlock()
	if silent && k.ctx.Err() == nil && k.deletedOnServer(k.c.cfg.PongTimeout) {
		c.ws.Close()
	}
}

func tooLarge(size, max int) error {
	return &core.Error{
		Kind: core.KindTooLarge,
		Msg: fmt.Sprintf("the request is %d bytes; the Jupyter server accepts websocket messages of at most %d bytes",
			size, max),
	}
}

// Interrupt asks the server to interrupt the kernel (SIGINT or an
// interrupt_request, as its kernel spec says), if a request of ours runs
// (core.Kernel: none, nothing to do). An interrupt sent to an idle kernel
// is no harmless no-op: a SIGINT reaches the kernel when it reaches it
// (through the sandbox launcher's relay, say), and under load that can be
// inside the next request, which then loses its output or its reply; nor
// is a request of another client of the kernel ours to stop.
func (k *kernel) Interrupt(ctx context.Context) error {
	k.liveMu.Lock()
	running := len(k.live) > 0
	k.liveMu.Unlock()
	if !running {
		return nil
	}
	if err := k.c.interruptKernel(ctx, k.id); err != nil {
		return fmt.Errorf("interrupt kernel %s: %w", k.id, err)
	}
	return nil
}

// Restart reports StateRestarting (forgetting every earlier request), then
// restarts the kernel through the server and returns once it answers again.
func (k *kernel) Restart(ctx context.Context) error {
	select {
	case <-k.exited:
		return fmt.Errorf("restart kernel %s: %w", k.id, k.lost())
	default:
	}
	k.mu.Lock()
	k.restarts++
	k.mu.Unlock()
	defer func() {
		k.mu.Lock()
		k.restarts--
		k.mu.Unlock()
	}()
	if err := k.emitKernelWide(ctx, core.StateRestarting); err != nil {
		return fmt.Errorf("restart kernel %s: %w", k.id, err)
	}
	outer := ctx
	ctx, cancel := context.WithTimeout(ctx, k.c.cfg.RestartTimeout)
	defer cancel()
	// A kernel that died is being restarted by the server's own restarter
	// (its "restarting" is what reported the death): let that restart end
	// first, until the new kernel answers (the background nudge). A restart
	// request that arrives during it does not wait its turn on Kernel Gateway
	// 2.5.2 (jupyter_client's blocking restart_kernel re-enters the event
	// loop through nest_asyncio): the server runs both restarts interleaved
	// on the one KernelManager, which answers 500 (InvalidStateError), kills
	// a kernel it is still launching, or loses the request altogether
	// ("Cannot enter into task" in its log); and a kernel it kills can count
	// against the restarter's restart_limit, past which the server removes
	// the kernel (a 404 for the rest of its life).
	err := k.waitReady(ctx)
	if err == nil {
		err = k.restartOnServer(ctx)
	}
	if err == nil {
		err = k.nudge(ctx)
	}
	switch {
	case err == nil:
		return nil
	case errors.Is(ctx.Err(), context.DeadlineExceeded) && outer.Err() == nil:
		// %v, not %w: see ownTimeout.
		return fmt.Errorf("restart kernel %s: not back within the restart timeout (%v): %v", k.id, k.c.cfg.RestartTimeout, ownTimeout(err))
	}
	return fmt.Errorf("restart kernel %s: %w", k.id, err)
}

// restartOnServer asks the server to restart the kernel. The server answers
// 500 while its own restarter is still bringing back a kernel that died (it
// reported restarting before it restarts; Restart waits for the restarts it
// heard of, not for one whose status is still on its way): that is
// retried, with backoff, until ctx ends.
func (k *kernel) restartOnServer(ctx context.Context) error {
	delay := reconnectFirstDelay
	for {
		err := k.c.restartKernel(ctx, k.id)
		var ae *apiError
		if err == nil || !errors.As(err, &ae) || ae.Status != http.StatusInternalServerError {
			return err
		}
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w (last answer: %v)", ctx.Err(), err)
		}
		delay = min(2*delay, time.Second)
	}
}

// Shutdown closes the websocket, waits for the supervisor to end (which closes
// Messages), and deletes the kernel on the server.
func (k *kernel) Shutdown(ctx context.Context) error {
	k.cancel()
	k.mu.Lock()
	if k.conn != nil {
		k.conn.ws.Close() // unblocks the reader
	}
	k.mu.Unlock()
	select {
	case <-k.exited:
	case <-ctx.Done():
		return fmt.Errorf("shut down kernel %s: %w", k.id, ctx.Err())
	}
	k.bg.Wait() // ends with k.ctx
	k.delOnce.Do(func() {
		if err := k.deleteOnServer(ctx); err != nil {
			k.delErr = fmt.Errorf("shut down kernel %s: %w", k.id, err)
		}
	})
	return k.delErr
}

func (k *kernel) lost() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.lostErr != nil {
		return k.lostErr
	}
	return errors.New("the kernel was shut down")
}

// waitConn returns the current connection, waiting while it reconnects.
func (k *kernel) waitConn(ctx context.Context) (*conn, error) {
	for {
		k.mu.Lock()
		c, up := k.conn, k.connUp
		k.mu.Unlock()
		if c != nil {
			return c, nil
		}
		select {
		case <-up:
		case <-k.exited:
			return nil, k.lost()
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for the kernel's websocket to reconnect: %w", ctx.Err())
		}
	}
}

// serverReadRate is the slowest a server may read and parse a frame of
// ours without being judged lost: a Jupyter Server at load 10 on two cores
// took ~30 s after the write for a 9 MiB request (~300 KiB/s).
const serverReadRate = 256 << 10

func (c *conn) write(ctx context.Context, binaryFrame bool, frame []byte) error {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	dl, ok := ctx.Deadline()
	if !ok {
		dl = time.Now().Add(30 * time.Second)
	}
	_ = c.ws.SetWriteDeadline(dl)
	typ := websocket.TextMessage
	if binaryFrame {
		typ = websocket.BinaryMessage
	}
	// The server says nothing while it reads a frame of ours, which takes
	// a loaded server seconds for a large one (a 9 MiB request took more
	// than PingInterval+PongTimeout in CI), and our pings wait behind it:
	// while we write, the write's deadline judges the connection. A
	// written frame may still sit in the sockets' buffers (megabytes on
	// loopback), and the server parses it before it answers anything, so
	// its silence may last idle plus the frame at serverReadRate.
	if idle := time.Duration(c.idle.Load()); idle > 0 {
		c.holdReads.Store(dl.Add(idle).UnixNano())
		_ = c.extendReads()
		defer func() {
			c.holdReads.Store(time.Now().Add(idle + time.Duration(len(frame))*time.Second/serverReadRate).UnixNano())
			_ = c.extendReads()
		}()
	}
	if err := c.ws.WriteMessage(typ, frame); err != nil {
		// A failed write leaves the connection unusable: close it so the
		// reader notices and the supervisor reconnects.
		c.ws.Close()
		return err
	}
	return nil
}

// run is the supervisor goroutine.
func (k *kernel) run(c *conn) {
	defer close(k.exited)
	defer k.closeMsgs()
	for {
		k.setConn(c)
		k.serve(c)
		k.mu.Lock()
		k.conn = nil
		k.connUp = make(chan struct{})
		k.mu.Unlock()
		if k.ctx.Err() != nil {
			return
		}
		if k.emitKernelWide(k.ctx, core.StateDisconnected) != nil {
			return
		}
		var err error
		if c, err = k.reconnect(); err != nil {
			k.mu.Lock()
			k.lostErr = fmt.Errorf("lost for good: %w", err)
			k.mu.Unlock()
			return
		}
	}
}

func (k *kernel) setConn(c *conn) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.ctx.Err() != nil {
		c.ws.Close() // Shutdown ran before the connection was published
		return
	}
	k.conn = c
	close(k.connUp)
}

// serve reads the connection until it fails, with a ping goroutine alongside.
func (k *kernel) serve(c *conn) {
	cfg := k.c.cfg
	c.idle.Store(int64(cfg.PingInterval + cfg.PongTimeout))
	extend := func(string) error { return c.extendReads() }
	_ = extend("")
	c.ws.SetPongHandler(extend)

	stopPing := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		k.ping(c, stopPing)
	}()
	defer func() {
		close(stopPing)
		wg.Wait()
		c.ws.Close()
	}()
	k.read(c, func() { _ = extend("") })
}

// ping pings the server every PingInterval (and sends the keep-alive
// requests, Config.KeepAlive) until stop is closed or the connection fails.
func (k *kernel) ping(c *conn, stop <-chan struct{}) {
	cfg := k.c.cfg
	t := time.NewTicker(cfg.PingInterval)
	defer t.Stop()
	var keepAlive <-chan time.Time
	if cfg.KeepAlive > 0 {
		ka := time.NewTicker(cfg.KeepAlive)
		defer ka.Stop()
		keepAlive = ka.C
	}
	for {
		select {
		case <-stop:
			return
		case <-keepAlive:
			k.sendKeepAlive(c)
		case <-t.C:
			if err := c.ws.WriteControl(websocket.PingMessage, nil, time.Now().Add(cfg.PongTimeout)); err != nil {
				if ne := net.Error(nil); errors.As(err, &ne) && ne.Timeout() {
					continue // behind a large write of ours (write): the next tick pings again
				}
				return // the reader sees the failure too
			}
			if k.deletedOnServer(cfg.PongTimeout) {
				// jupyter-server keeps the websocket of a kernel it shut
				// down (culled, deleted by someone else) open and silent:
				// close it, so the supervisor's redial learns it is gone.
				c.ws.Close()
				return
			}
		}
	}
}

// read is the connection's only reader: it decodes every frame, notes its
// counter and forwards what the engine uses, until the connection fails or
// the kernel is shut down. alive extends the read deadline after each frame.
func (k *kernel) read(c *conn, alive func()) {
	for {
		typ, frame, err := c.ws.ReadMessage()
		if err != nil {
			return
		}
		alive()
		m, err := decodeFrame(c.v1, typ == websocket.BinaryMessage, frame)
		if err != nil {
			continue // not a kernel message
		}
		var msg core.Message
		mapped := false
		if m.Channel == "iopub" || m.Channel == "shell" { // control and stdin are not ours to use
			msg, mapped, _ = toMessage(m)
		}
		if lose := k.lose.Load(); mapped && lose != nil && (*lose)(msg) {
			continue
		}
		k.noteCounter(m) // every message counts, those we do not forward too
		if !mapped {
			continue
		}
		if !k.forward(msg) {
			return
		}
	}
}

// deletedOnServer reports whether the server says it has no such kernel. Any
// other failure says nothing: pings and redials judge the connection.
func (k *kernel) deletedOnServer(timeout time.Duration) bool {
	ctx, cancel := context.WithTimeout(k.ctx, timeout)
	defer cancel()
	err := k.c.do(ctx, http.MethodGet, "api/kernels/"+url.PathEscape(k.id), nil, nil)
	var ae *apiError
	return errors.As(err, &ae) && ae.Status == http.StatusNotFound
}

// forward delivers msg if it belongs to a live request, or is a kernel-wide
// restart/death. It returns false once the kernel is shut down.
func (k *kernel) forward(msg core.Message) bool {
	if !k.acquire(k.ctx) {
		return false
	}
	defer k.release()
	if msg.ParentID == "" {
		return k.forwardKernelWide(msg)
	}
	for _, m := range k.deliverable(msg) {
		if k.send(k.ctx, m) != nil {
			return false
		}
	}
	return true
}

// forwardKernelWide delivers a status of no request: a restart or death
// forgets every request; anything else (e.g. "starting", or busy/idle of
// the server's own probes) is dropped. The caller holds emitSem.
func (k *kernel) forwardKernelWide(msg core.Message) bool {
	if msg.Type != core.MsgStatus || (msg.State != core.StateRestarting && msg.State != core.StateDead) {
		return true
	}
	if msg.State == core.StateRestarting {
		k.mu.Lock()
		manual := k.restarts > 0
		k.mu.Unlock()
		if manual {
			return true // Restart has reported it already
		}
		// The server's restarter only acts on a kernel that died: say
		// so, then that it was replaced (its state is gone).
		k.forgetAll()
		k.nudgeInBackground()
		dead := msg
		dead.State = core.StateDead
		if k.send(k.ctx, dead) != nil {
			return false
		}
	}
	k.forgetAll()
	return k.send(k.ctx, msg) == nil
}

// deliverable returns what msg, a message of a request, lets out, in the order
// the kernel sent it: outputs at once; the execute_reply, which travels on
// the shell channel (not ordered with IOPub), held until the idle; then
// both. A message of no live request is the transport's own or someone
// else's (see auxiliary).
func (k *kernel) deliverable(msg core.Message) []core.Message {
	k.liveMu.Lock()
	defer k.liveMu.Unlock()
	req, ok := k.live[msg.ParentID]
	if ok && !req.heard {
		req.heard = true
		if req.silence != nil {
			req.silence.Stop()
		}
	}
	switch {
	case !ok:
		return k.auxiliary(msg)
	case msg.Type == core.MsgExecuteReply && !req.idle:
		req.reply = &msg
		id := msg.ParentID
		req.probe = time.AfterFunc(idleProbeDelay, func() { k.probeIdle(id) })
		return nil
	case msg.Type == core.MsgExecuteReply:
		delete(k.live, msg.ParentID)
		return append(k.lostNotices(req, msg.Timestamp), msg)
	case msg.Type == core.MsgStatus && msg.State == core.StateIdle && req.reply != nil:
		req.probe.Stop()
		delete(k.live, msg.ParentID)
		return append(k.lostNotices(req, msg.Timestamp), *req.reply, msg)
	case msg.Type == core.MsgStatus && msg.State == core.StateIdle:
		req.idle = true
	}
	return []core.Message{msg}
}

// auxiliary handles a message of no live request: a nudge's first status
// ends the nudge; an idle probe's idle releases its request's held reply
// when the request's own idle was lost. Anything else is another client's,
// a forgotten request's or the server's own, and dropped. The caller holds
// liveMu.
func (k *kernel) auxiliary(msg core.Message) []core.Message {
	if ch, isNudge := k.nudges[msg.ParentID]; isNudge && msg.Type == core.MsgStatus {
		delete(k.nudges, msg.ParentID)
		close(ch)
	}
	target, isProbe := k.probes[msg.ParentID]
	if !isProbe || msg.Type != core.MsgStatus || msg.State != core.StateIdle {
		return nil
	}
	delete(k.probes, msg.ParentID)
	req := k.live[target]
	if req == nil || req.reply == nil || req.idle {
		return nil
	}
	req.probe.Stop()
	delete(k.live, target)
	// Its idle is lost, and whatever the counter says besides.
	lost := 1 + k.counters.lost(req)
	return []core.Message{
		lostNotice(target, msg.Timestamp, lost),
		*req.reply,
		{ParentID: target, Type: core.MsgStatus, State: core.StateIdle, Timestamp: msg.Timestamp},
	}
}

// emitKernelWide forgets every request sent so far and reports state with
// ParentID "", atomically with respect to forward.
func (k *kernel) emitKernelWide(ctx context.Context, state string) error {
	if !k.acquire(ctx) {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return k.lost()
	}
	defer k.release()
	k.forgetAll()
	return k.send(ctx, core.Message{
		Type:      core.MsgStatus,
		State:     state,
		Timestamp: time.Now().UTC().Format(time.RFC3339Nano),
	})
}

func (k *kernel) forgetAll() {
	k.liveMu.Lock()
	for _, req := range k.live {
		if req.probe != nil {
			req.probe.Stop()
		}
		if req.silence != nil {
			req.silence.Stop()
		}
	}
	clear(k.live)
	clear(k.probes)
	k.counters.reset()
	k.liveMu.Unlock()
}

// noteCounter records the message counter of a message from the kernel while
// requests are live (see counterLog).
func (k *kernel) noteCounter(m inMsg) {
	k.liveMu.Lock()
	defer k.liveMu.Unlock()
	if len(k.live) == 0 {
		k.counters.reset()
		return
	}
	parent := m.Parent.MsgID
	ours := k.live[parent]
	foreign := ""
	if ours == nil && m.Header.MsgType == "status" && parent != "" && !strings.HasPrefix(parent, auxPrefix) {
		foreign = parent // another client's request: its reply went to that client
	}
	k.counters.note(m.Header.MsgID, ours, foreign)
}

// lostNotices is the notice for req's lost messages, if the counter shows
// any, to go out before its reply. The caller holds liveMu.
func (k *kernel) lostNotices(req *liveRequest, ts string) []core.Message {
	if n := k.counters.lost(req); n > 0 {
		return []core.Message{lostNotice(req.id, ts, n)}
	}
	return nil
}

// sendKeepAlive sends a kernel_info_request (Config.KeepAlive): its busy and
// idle are activity to a server that culls idle kernels. Its messages belong
// to no live request and are dropped like the server's own probes.
func (k *kernel) sendKeepAlive(c *conn) {
	frame, binaryFrame, err := encodeRequest(c.v1, k.session, auxPrefix+"keepalive-"+uuid.NewString(), "kernel_info_request", struct{}{})
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(k.ctx, k.c.cfg.PongTimeout)
	defer cancel()
	_ = c.write(ctx, binaryFrame, frame) // a failed write closes the connection; the reader sees it
}

// probeIdle sends a kernel_info_request to learn whether the idle of request
// target was lost (see idleProbeDelay), and re-arms itself in case the probe's
// own messages are lost too.
func (k *kernel) probeIdle(target string) {
	if k.ctx.Err() != nil {
		return
	}
	k.liveMu.Lock()
	req, ok := k.live[target]
	if !ok || req.reply == nil || req.idle {
		k.liveMu.Unlock()
		return
	}
	id := auxPrefix + "probe-" + uuid.NewString()
	k.probes[id] = target
	req.probe = time.AfterFunc(idleProbeDelay, func() { k.probeIdle(target) })
	k.liveMu.Unlock()

	k.mu.Lock()
	c := k.conn
	k.mu.Unlock()
	if c == nil {
		return // a disconnect forgets the request anyway
	}
	frame, binaryFrame, err := encodeRequest(c.v1, k.session, id, "kernel_info_request", struct{}{})
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(k.ctx, k.c.cfg.PongTimeout)
	defer cancel()
	_ = c.write(ctx, binaryFrame, frame)
}

func (k *kernel) acquire(ctx context.Context) bool {
	select {
	case k.emitSem <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	case <-k.ctx.Done():
		return false
	}
}

func (k *kernel) release() { <-k.emitSem }

// send puts msg on msgs; the caller holds emitSem.
func (k *kernel) send(ctx context.Context, msg core.Message) error {
	if k.closed {
		return k.lost()
	}
	select {
	case k.msgs <- msg:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-k.ctx.Done():
		return k.lost()
	}
}

// closeMsgs closes msgs once no sender holds emitSem.
func (k *kernel) closeMsgs() {
	k.emitSem <- struct{}{}
	k.closed = true
	close(k.msgs)
	<-k.emitSem
}

// reconnect redials the websocket with bounded backoff.
func (k *kernel) reconnect() (*conn, error) {
	deadline := time.Now().Add(k.c.cfg.ReconnectTimeout)
	delay := reconnectFirstDelay
	for {
		ctx, cancel := context.WithDeadline(k.ctx, deadline)
		ws, err := k.c.dialChannels(ctx, k.id, k.session)
		cancel()
		if err == nil {
			return newConn(ws), nil
		}
		if errors.Is(err, errKernelGone) || k.ctx.Err() != nil || !time.Now().Add(delay).Before(deadline) {
			return nil, err
		}
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-k.ctx.Done():
			t.Stop()
			return nil, k.ctx.Err()
		}
		delay = min(2*delay, reconnectMaxDelay)
	}
}

// auxPrefix starts the msg_ids of the requests the transport sends of its
// own accord (idle probes, nudges).
const auxPrefix = "kernelhost-"

// nudgeInterval is how often a nudge repeats its kernel_info_request until
// one of them is seen on IOPub.
const nudgeInterval = 200 * time.Millisecond

// nudge returns once the kernel's IOPub reaches us. After a restart the
// server's IOPub subscription to the new process takes a moment to join, and
// whatever the kernel publishes before that is lost (ZeroMQ's slow joiner):
// so a restart is only done when a kernel_info_request's status came back.
func (k *kernel) nudge(ctx context.Context) error {
	var ids []string
	defer func() {
		k.liveMu.Lock()
		for _, id := range ids {
			delete(k.nudges, id)
		}
		k.liveMu.Unlock()
	}()
	for {
		id := auxPrefix + "nudge-" + uuid.NewString()
		seen := make(chan struct{})
		k.liveMu.Lock()
		k.nudges[id] = seen
		k.liveMu.Unlock()
		ids = append(ids, id)
		c, err := k.waitConn(ctx)
		if err != nil {
			return err
		}
		frame, binaryFrame, err := encodeRequest(c.v1, k.session, id, "kernel_info_request", struct{}{})
		if err != nil {
			return err
		}
		_ = c.write(ctx, binaryFrame, frame) // a failed write is retried below
		t := time.NewTimer(nudgeInterval)
		select {
		case <-seen:
			t.Stop()
			return nil
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("waiting for the kernel's output channel: %w", ctx.Err())
		case <-k.ctx.Done():
			t.Stop()
			return k.lost()
		}
	}
}

// nudgeInBackground holds back Execute until IOPub flows again after the
// server restarted the kernel by itself. The caller holds emitSem.
func (k *kernel) nudgeInBackground() {
	k.mu.Lock()
	ready := make(chan struct{})
	k.ready = ready
	k.mu.Unlock()
	k.bg.Add(1)
	go func() {
		defer k.bg.Done()
		defer close(ready)
		ctx, cancel := context.WithTimeout(k.ctx, 2*time.Minute)
		defer cancel()
		_ = k.nudge(ctx) // on failure Execute goes ahead; the idle probe still guards it
	}()
}

func (k *kernel) waitReady(ctx context.Context) error {
	k.mu.Lock()
	ready := k.ready
	k.mu.Unlock()
	select {
	case <-ready:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting for the restarted kernel: %w", ctx.Err())
	case <-k.ctx.Done():
		return k.lost()
	}
}

func closedChan() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}
