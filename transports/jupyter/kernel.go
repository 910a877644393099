package jupyter

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"time"

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

// Reply and idle flags of a live request.
const (
	seenReply = 1 << iota
	seenIdle
)

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
	live     map[string]uint8 // msg_ids sent since the last restart/disconnect → seen flags
	mu       sync.Mutex
	conn     *conn         // nil while disconnected
	connUp   chan struct{} // closed when conn is set
	lostErr  error         // why the kernel was given up, once it was
	restarts int           // manual restarts in progress (see forward)
}

type conn struct {
	ws      *websocket.Conn
	v1      bool
	writeMu sync.Mutex
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
		live:    map[string]uint8{},
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
	k.liveMu.Lock()
	k.live[req.MsgID] = 0
	k.liveMu.Unlock()
	if err := c.write(ctx, binaryFrame, frame); err != nil {
		k.liveMu.Lock()
		delete(k.live, req.MsgID)
		k.liveMu.Unlock()
		return fmt.Errorf("execute on kernel %s: send request: %w", k.id, err)
	}
	return nil
}

func tooLarge(size, max int) error {
	return &core.Error{
		Kind: core.KindTooLarge,
		Msg: fmt.Sprintf("the request is %d bytes; the Jupyter server accepts websocket messages of at most %d bytes",
			size, max),
	}
}

// Interrupt asks the server to interrupt the kernel (SIGINT or an
// interrupt_request, as its kernel spec says).
func (k *kernel) Interrupt(ctx context.Context) error {
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
	if err := k.c.restartKernel(ctx, k.id); err != nil {
		return fmt.Errorf("restart kernel %s: %w", k.id, err)
	}
	return nil
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
	k.delOnce.Do(func() {
		err := k.c.deleteKernel(ctx, k.id)
		var ae *apiError
		if errors.As(err, &ae) && ae.Status == 404 {
			err = nil // already gone, e.g. culled or lost
		}
		if err != nil {
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
	idle := cfg.PingInterval + cfg.PongTimeout
	extend := func(string) error { return c.ws.SetReadDeadline(time.Now().Add(idle)) }
	_ = extend("")
	c.ws.SetPongHandler(extend)

	stopPing := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(cfg.PingInterval)
		defer t.Stop()
		for {
			select {
			case <-stopPing:
				return
			case <-t.C:
				if c.ws.WriteControl(websocket.PingMessage, nil, time.Now().Add(cfg.PongTimeout)) != nil {
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
	}()
	defer func() {
		close(stopPing)
		wg.Wait()
		c.ws.Close()
	}()

	for {
		typ, frame, err := c.ws.ReadMessage()
		if err != nil {
			return
		}
		_ = extend("")
		m, err := decodeFrame(c.v1, typ == websocket.BinaryMessage, frame)
		if err != nil || (m.Channel != "iopub" && m.Channel != "shell") {
			continue // not ours to use (control, stdin) or not a kernel message
		}
		msg, ok, err := toMessage(m)
		if err != nil || !ok {
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
		if msg.Type != core.MsgStatus || (msg.State != core.StateRestarting && msg.State != core.StateDead) {
			return true // e.g. "starting", or busy/idle of the server's own probes
		}
		if msg.State == core.StateRestarting {
			k.mu.Lock()
			manual := k.restarts > 0
			k.mu.Unlock()
			if manual {
				return true // Restart has reported it already
			}
		}
		k.forgetAll()
		return k.send(k.ctx, msg) == nil
	}
	k.liveMu.Lock()
	flags, ok := k.live[msg.ParentID]
	if ok {
		switch {
		case msg.Type == core.MsgExecuteReply:
			flags |= seenReply
		case msg.Type == core.MsgStatus && msg.State == core.StateIdle:
			flags |= seenIdle
		}
		if flags == seenReply|seenIdle {
			delete(k.live, msg.ParentID)
		} else {
			k.live[msg.ParentID] = flags
		}
	}
	k.liveMu.Unlock()
	if !ok {
		return true // another client's, a forgotten request's, or the server's own
	}
	return k.send(k.ctx, msg) == nil
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
	clear(k.live)
	k.liveMu.Unlock()
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
