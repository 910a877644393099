package transportplugin

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
// goroutines): about 180 µs against 30 µs per round trip here.

const tokenBytes = 32

// tokenTimeout bounds how long a new connection may take to present its
// token.
const tokenTimeout = 10 * time.Second

// frameConn reads and writes length-prefixed protobuf messages on a
// connection. Reads happen on one goroutine; writes are serialised.
type frameConn struct {
	c  net.Conn
	r  *bufio.Reader
	mu sync.Mutex // guards w and writes
	w  []byte
}

func newFrameConn(c net.Conn) *frameConn {
	return &frameConn{c: c, r: bufio.NewReaderSize(c, 64<<10)}
}

func (f *frameConn) write(m proto.Message) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, err := proto.MarshalOptions{}.MarshalAppend(append(f.w[:0], 0, 0, 0, 0), m)
	if err != nil {
		return err
	}
	if len(b)-4 > MaxMessageBytes {
		return fmt.Errorf("frame of %d bytes is over the %d-byte limit", len(b)-4, MaxMessageBytes)
	}
	binary.BigEndian.PutUint32(b, uint32(len(b)-4))
	_, err = f.c.Write(b)
	if cap(b) <= 1<<20 {
		f.w = b // keep small buffers; let a 20 MB one go
	}
	return err
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
	buf := make([]byte, n)
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
	st := &socketServerStream{f: newFrameConn(c), ctx: ctx, cancel: cancel}
	if err := s.kernel(st); err != nil {
		return err
	}
	return st.f.write(&pb.KernelFrame{End: true})
}

// socketServerStream is a kernel stream on the plugin's side of the socket.
// Its context ends when the host's side is gone (a read fails).
type socketServerStream struct {
	f      *frameConn
	ctx    context.Context
	cancel context.CancelFunc
}

func (s *socketServerStream) Context() context.Context { return s.ctx }

func (s *socketServerStream) Send(f *pb.KernelFrame) error { return s.f.write(f) }

func (s *socketServerStream) Recv() (*pb.KernelCall, error) {
	c := new(pb.KernelCall)
	if err := s.f.read(c); err != nil {
		s.cancel()
		return nil, err
	}
	return c, nil
}

// socketClientStream is a kernel stream on the host's side of the socket.
type socketClientStream struct {
	f *frameConn
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
	return &socketClientStream{f: newFrameConn(c)}, nil
}

func (s *socketClientStream) Send(c *pb.KernelCall) error { return s.f.write(c) }

// Recv returns io.EOF when the plugin ended the stream, and an error when
// the connection was lost.
func (s *socketClientStream) Recv() (*pb.KernelFrame, error) {
	f := new(pb.KernelFrame)
	if err := s.f.read(f); err != nil {
		return nil, err
	}
	if f.End {
		return nil, io.EOF
	}
	return f, nil
}
