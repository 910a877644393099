package subprocess

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// forkLine is the host's side of a sandboxed template's control socket.
// Fork requests go one after another without waiting for the answers
// before: the template takes them in order, and while a burst's requests
// queue it forks one after the other without sleeping between them (each
// wait for the host's next request was a wake-up of the template, which
// is the serial part of a burst, at the back of a run queue full of the
// burst's forks). One reader routes each answer to its request by number.
// It ends when the socket does (the template retired, or ended).
type forkLine struct {
	conn   *net.UnixConn
	sendMu sync.Mutex // one request with its descriptors at a time

	mu      sync.Mutex
	waiting map[uint64]chan error // by request number; buffered
	gone    error                 // why the socket ended; nil while it reads
}

// newForkLine starts reading template answers on conn.
func newForkLine(conn *net.UnixConn) *forkLine {
	l := &forkLine{conn: conn, waiting: map[uint64]chan error{}}
	go l.read()
	return l
}

// read routes each answer, until the socket ends; then every request
// waiting, and every one asked later, fails.
func (l *forkLine) read() {
	buf := make([]byte, 4096)
	for {
		n, _, _, _, err := l.conn.ReadMsgUnix(buf, nil)
		if err != nil || n == 0 {
			if err == nil {
				err = io.EOF
			}
			l.end(fmt.Errorf("the template's answer: %w", errTemplateGone(err)))
			return
		}
		id, answer, _ := strings.Cut(string(buf[:n]), " ")
		seq, _ := strconv.ParseUint(id, 10, 64)
		l.mu.Lock()
		ch := l.waiting[seq] // none: a request given up on
		delete(l.waiting, seq)
		l.mu.Unlock()
		if ch != nil {
			ch <- parseForkAnswer(answer)
		}
	}
}

func (l *forkLine) end(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.gone = err
	for seq, ch := range l.waiting {
		ch <- err
		delete(l.waiting, seq)
	}
}

// ask sends req with the child's descriptors and waits, until deadline,
// for its answer.
func (l *forkLine) ask(req forkRequest, files []*os.File, deadline time.Time) error {
	line, err := json.Marshal(req)
	if err != nil {
		return err
	}
	fds := make([]int, len(files))
	for i, f := range files {
		fds[i] = int(f.Fd())
	}
	seq := req.Fork.Seq
	answer := make(chan error, 1)
	l.mu.Lock()
	if l.gone != nil {
		l.mu.Unlock()
		return l.gone
	}
	l.waiting[seq] = answer
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		delete(l.waiting, seq)
		l.mu.Unlock()
	}()
	l.sendMu.Lock()
	_ = l.conn.SetWriteDeadline(deadline)
	_, _, err = l.conn.WriteMsgUnix(line, unix.UnixRights(fds...), nil)
	l.sendMu.Unlock()
	if err != nil {
		return fmt.Errorf("send the fork request: %w", errTemplateGone(err))
	}
	wait := time.NewTimer(time.Until(deadline))
	defer wait.Stop()
	select {
	case err := <-answer:
		return err
	case <-wait.C:
		return fmt.Errorf("the template's answer: %w", errTemplateGone(os.ErrDeadlineExceeded))
	}
}

// parseForkAnswer reads an answer after its number: "ok" or "error <why>".
func parseForkAnswer(answer string) error {
	if why, ok := strings.CutPrefix(answer, "error "); ok {
		return fmt.Errorf("%w: %s", errForkRefused, why)
	}
	if answer != "ok" {
		return fmt.Errorf("the forking interpreter answered %q", answer)
	}
	return nil
}

// errTemplateStuck marks a template that did not answer (dead, or stuck):
// the fork server replaces it.
var errTemplateStuck = errors.New("the fork template does not answer")

func errTemplateGone(err error) error {
	if err == nil {
		err = io.EOF
	}
	return fmt.Errorf("%w: %v", errTemplateStuck, err)
}
