package pluginrpc

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/protobuf/proto"

	pb "github.com/kernelhost/kernelhost/plugins/transportplugin/proto"
)

// The kernel socket carries kernel streams without gRPC (see kernel_socket
// in proto/transport.proto): each connection is one kernel, a token, then
// length-prefixed protobuf frames. A round trip on it is one write and one
// read on each side, where a gRPC stream adds HTTP/2 framing, TLS records
// and two more goroutine hand-offs per direction (its reader and writer
// goroutines): several times the cost (docs/benchmarks-plugins.md, the
// floor's grpc-bidi against unix).

const tokenBytes = 32

// tokenTimeout bounds how long a new connection may take to present its
// token.
const tokenTimeout = 10 * time.Second

// frameConn reads and writes length-prefixed protobuf messages on a
// connection. Reads happen on one goroutine; writes are serialised.
type frameConn struct {
	c  net.Conn
	r  *bufio.Reader
	rb []byte     // read buffer, reused: proto.Unmarshal copies what it keeps
	mu sync.Mutex // guards w and writes
	w  []byte
}

func newFrameConn(c net.Conn) *frameConn {
	return &frameConn{c: c, r: bufio.NewReaderSize(c, 64<<10)}
}

func (f *frameConn) write(m proto.Message) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, err := marshalFrame(f.w[:0], m)
	if err != nil {
		return err
	}
	_, err = f.c.Write(b)
	if cap(b) <= 1<<20 {
		f.w = b // keep small buffers; let a 20 MB one go
	}
	return err
}

// marshalFrame appends m's frame (length, then protobuf) to buf.
func marshalFrame(buf []byte, m proto.Message) ([]byte, error) {
	b, err := proto.MarshalOptions{}.MarshalAppend(append(buf, 0, 0, 0, 0), m)
	if err != nil {
		return nil, err
	}
	if len(b)-4 > MaxMessageBytes {
		return nil, fmt.Errorf("frame of %d bytes is over the %d-byte limit", len(b)-4, MaxMessageBytes)
	}
	binary.BigEndian.PutUint32(b[len(buf):], uint32(len(b)-len(buf)-4))
	return b, nil
}

// queueWriter writes frames on a goroutine of its own, in order, so that the
// plugin's sender can batch and marshal the next frame of a fast stream
// while the previous one is written (as gRPC's writer goroutine lets it),
// yet writes a frame that carries results at once, on the caller's
// goroutine, when nothing is queued: a round trip then costs no hand-off.
type queueWriter struct {
	c      net.Conn
	mu     sync.Mutex // held while writing; guards queued and err
	queued int
	err    error
	q      chan []byte // nil: the last frame was queued
	done   chan struct{}
}

func newQueueWriter(c net.Conn) *queueWriter {
	w := &queueWriter{c: c, q: make(chan []byte, 64), done: make(chan struct{})}
	go w.run()
	return w
}

func (w *queueWriter) run() {
	defer close(w.done)
	for b := range w.q {
		if b == nil {
			return
		}
		w.mu.Lock()
		if w.err == nil {
			_, w.err = w.c.Write(b)
		}
		w.queued--
		w.mu.Unlock()
	}
}

// write sends b (a whole frame): now if urgent and nothing is queued, else
// after what is queued. It reports the first write error.
func (w *queueWriter) write(b []byte, urgent bool) error {
	w.mu.Lock()
	if err := w.err; err != nil {
		w.mu.Unlock()
		return err
	}
	if urgent && w.queued == 0 {
		_, w.err = w.c.Write(b)
		err := w.err
		w.mu.Unlock()
		return err
	}
	w.queued++
	w.mu.Unlock()
	w.q <- b
	return nil
}

// close writes what is queued (for at most timeout: a host that stopped
// reading must not keep the plugin's goroutine) and stops the writer. The
// caller closes the connection afterwards.
func (w *queueWriter) close(timeout time.Duration) {
	w.q <- nil
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-w.done:
	case <-t.C:
		w.c.Close() // unblocks the write in progress
		<-w.done
	}
}

// errUnexpectedEOF: the peer closed the connection without ending the
// stream, i.e. it died or dropped it.
var errUnexpectedEOF = errors.New("kernel socket closed without an end frame")

func (f *frameConn) read(m proto.Message) error {
	var hdr [4]byte
	if _, err := io.ReadFull(f.r, hdr[:]); err != nil {
		if err == io.EOF {
			return errUnexpectedEOF
		}
		return err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n > MaxMessageBytes {
		return fmt.Errorf("frame of %d bytes is over the %d-byte limit", n, MaxMessageBytes)
	}
	buf := f.rb
	if cap(buf) < int(n) {
		buf = make([]byte, n)
		if n <= 1<<20 {
			f.rb = buf // keep small buffers; let a 20 MB one go
		}
	}
	buf = buf[:n]
	if _, err := io.ReadFull(f.r, buf); err != nil {
		return err
	}
	return proto.Unmarshal(buf, m)
}

// kernelSocket is the plugin's end: a listener whose connections are served
// as kernel streams.
type kernelSocket struct {
	ln    net.Listener
	path  string
	token []byte
}

// listenKernelSocket opens the kernel socket in dir, go-plugin's private
// socket directory (a fresh 0700 directory if there is none).
func listenKernelSocket(dir string) (*kernelSocket, error) {
	if dir == "" {
		d, err := os.MkdirTemp("", "kernelhost-plugin")
		if err != nil {
			return nil, err
		}
		dir = d
	}
	token := make([]byte, tokenBytes)
	if _, err := rand.Read(token); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, fmt.Sprintf("kernels-%d.sock", os.Getpid()))
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	return &kernelSocket{ln: ln, path: path, token: token}, nil
}

// serve accepts connections until the listener closes.
func (ks *kernelSocket) serve(s *server, log hclog.Logger) {
	for {
		c, err := ks.ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			if err := ks.serveConn(s, c); err != nil && !errors.Is(err, errUnexpectedEOF) && !errors.Is(err, context.Canceled) {
				log.Debug("kernel socket connection ended", "error", err)
			}
		}()
	}
}

func (ks *kernelSocket) close() {
	ks.ln.Close() // removes the socket file too
}

func (ks *kernelSocket) serveConn(s *server, c net.Conn) error {
	got := make([]byte, tokenBytes)
	c.SetReadDeadline(time.Now().Add(tokenTimeout))
	if _, err := io.ReadFull(c, got); err != nil {
		return err
	}
	if subtle.ConstantTimeCompare(got, ks.token) != 1 {
		return errors.New("kernel socket: wrong token")
	}
	c.SetReadDeadline(time.Time{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st := &socketServerStream{f: newFrameConn(c), w: newQueueWriter(c), ctx: ctx, cancel: cancel}
	defer st.w.close(kernelShutdownTimeout)
	if err := s.kernel(st); err != nil {
		return err
	}
	return st.Send(&pb.KernelFrame{End: true})
}

// socketServerStream is a kernel stream on the plugin's side of the socket.
// Its context ends when the host's side is gone (a read fails).
type socketServerStream struct {
	f      *frameConn // reads
	w      *queueWriter
	ctx    context.Context
	cancel context.CancelFunc
}

func (s *socketServerStream) Context() context.Context { return s.ctx }

// Send writes a frame that ends a call (or the stream) at once and queues
// one of messages only; see queueWriter.
func (s *socketServerStream) Send(f *pb.KernelFrame) error {
	b, err := marshalFrame(nil, f)
	if err != nil {
		return err
	}
	return s.w.write(b, len(f.Results) > 0 || f.End)
}

func (s *socketServerStream) Recv() (*pb.KernelCall, error) {
	c := new(pb.KernelCall)
	if err := s.f.read(c); err != nil {
		s.cancel()
		return nil, err
	}
	return c, nil
}

// socketClientStream is a kernel stream on the host's side of the socket.
// Recv reads and decodes the next frame on the caller's goroutine (the
// kernel's pump): a frame then wakes one goroutine of the host, the pump,
// which hands a call its result directly. Recv must not be called after it
// returned an error, nor from two goroutines at once.
type socketClientStream struct {
	f   *frameConn
	ctx context.Context // the stream's: ends it (closes the connection)
}

// dialKernelSocket connects to a plugin's kernel socket and presents the
// token; the connection closes when ctx ends.
func dialKernelSocket(ctx context.Context, dialCtx context.Context, path string, token []byte) (*socketClientStream, error) {
	var d net.Dialer
	c, err := d.DialContext(dialCtx, "unix", path)
	if err != nil {
		return nil, err
	}
	if _, err := c.Write(token); err != nil {
		c.Close()
		return nil, err
	}
	context.AfterFunc(ctx, func() { c.Close() })
	return &socketClientStream{f: newFrameConn(c), ctx: ctx}, nil
}

func (s *socketClientStream) Send(c *pb.KernelCall) error { return s.f.write(c) }

// Recv returns io.EOF when the plugin ended the stream, and an error when
// the connection was lost (or closed because ctx ended).
func (s *socketClientStream) Recv() (*pb.KernelFrame, error) {
	f := new(pb.KernelFrame)
	if err := s.f.read(f); err != nil {
		if cerr := s.ctx.Err(); cerr != nil {
			return nil, cerr // the host ended the stream: not a lost plugin
		}
		return nil, err
	}
	if f.End {
		return nil, io.EOF
	}
	return f, nil
}
