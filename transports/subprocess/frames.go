package subprocess

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"

	"github.com/kernelhost/kernelhost/core"
)

// Frames: how the python driver's messages share fd 1 with its output.
//
// Python's print writes to fd 1 in C (a plain io.FileIO under sys.stdout's
// buffer), the pipe its child processes write to as well. Its messages
// (status, stderr text, display, result, error, reply) go into the same
// pipe as frames, so the pipe itself keeps every message in its place
// among the prints, and the host reads one ordered channel. A frame is
//
//	mark, kind, 4 hex digits n, n bytes of payload
//
// where mark is frameMarkPrefix and 16 random hex digits the host makes
// for each interpreter and passes in KH_FRAME_MARK (the driver unsets it),
// kind is '.' for the last piece of a message batch and '+' for one more
// to come, and the payloads of a batch joined are JSON lines as on fd 4.
// Each frame is at most framePipeBuf bytes and written with one write, so
// no other writer (a child process, another thread's print) can cut it:
// a pipe write up to PIPE_BUF is atomic. So when the pipe is empty no frame
// is half read, and bytes held back as a possible frame start are text.
const (
	frameMarkEnv    = "KH_FRAME_MARK"
	frameMarkPrefix = "\x1ekh"
	frameMarkLen    = len(frameMarkPrefix) + 16
	frameHeaderLen  = frameMarkLen + 1 + 4
	// framePipeBuf is PIPE_BUF on Linux: the largest atomic pipe write.
	framePipeBuf = 4096
)

// frameReader is the state of a framed fd 1 between reads.
type frameReader struct {
	mark    []byte
	pending []byte         // read, not handled: a frame's start, or bytes that may be one
	lines   *msgLines      // parses the payloads of a batch as they come
	msgs    []core.Message // the messages of the batch whose last piece is not in yet
}

// newFrameReader makes a mark for one interpreter: its random digits,
// which the driver gets in frameMarkEnv (or in its fork request).
func newFrameReader() (fr *frameReader, digits string, err error) {
	var random [8]byte
	if _, err := rand.Read(random[:]); err != nil {
		return nil, "", err
	}
	digits = hex.EncodeToString(random[:])
	return &frameReader{mark: []byte(frameMarkPrefix + digits)}, digits, nil
}

// read handles data read from a framed fd 1: text goes out as stdout
// (procReader.stream), each complete batch of messages is handled as the pump
// handles fd 4's (handleFrame). A frame not complete yet, and text at the
// end that may be the start of one, wait for the next read. fd 2 is drained
// first: what a child wrote there before this reached fd 1
// (os.system('echo E >&2'); print('q')) comes before it.
func (fr *frameReader) read(r *procReader, s *stream, data []byte) bool {
	if !r.drainStream(&r.streams[1], false) {
		return false
	}
	if fr.lines == nil {
		fr.lines = newMsgLines(r.maxMessage)
	}
	b := data
	if len(fr.pending) > 0 { // rare: a frame cut by the end of a read
		b, fr.pending = append(fr.pending, data...), nil
	}
	for len(b) > 0 {
		i := bytes.Index(b, fr.mark)
		if i < 0 {
			keep := markPrefixAtEnd(b, fr.mark)
			if !r.stream(s, b[:len(b)-keep], false) {
				return false
			}
			fr.pending = bytes.Clone(b[len(b)-keep:])
			return true
		}
		if !r.stream(s, b[:i], false) {
			return false
		}
		b = b[i:]
		if len(b) < frameHeaderLen {
			fr.pending = bytes.Clone(b)
			return true
		}
		kind, n, ok := frameHeader(b[frameMarkLen:frameHeaderLen])
		if !ok { // the mark, but no frame: text after all
			if !r.stream(s, b[:frameMarkLen], false) {
				return false
			}
			b = b[frameMarkLen:]
			continue
		}
		if len(b) < frameHeaderLen+n {
			fr.pending = bytes.Clone(b)
			return true
		}
		fr.msgs = fr.lines.add(r, fr.msgs, b[frameHeaderLen:frameHeaderLen+n])
		b = b[frameHeaderLen+n:]
		if kind == '.' && !fr.handleBatch(r) {
			return false
		}
	}
	return true
}

// empty sends what fd 1 left held back as text: called once the pipe is
// empty or closed, when no frame can be half read.
func (fr *frameReader) empty(r *procReader, s *stream) bool {
	if len(fr.pending) == 0 {
		return true
	}
	text := fr.pending
	fr.pending = nil
	return r.stream(s, text, false)
}

// handleBatch hands on the messages of the batch the frames carried.
func (fr *frameReader) handleBatch(r *procReader) bool {
	fr.lines.endBatch(fr.msgs)
	msgs := mergeStreams(fr.msgs)
	fr.msgs = fr.msgs[:0]
	return r.handleFrame(msgs)
}

// frameHeader reads a frame's kind and payload length.
func frameHeader(h []byte) (kind byte, n int, ok bool) {
	kind = h[0]
	if kind != '.' && kind != '+' {
		return 0, 0, false
	}
	for _, c := range h[1:] {
		switch {
		case '0' <= c && c <= '9':
			n = n<<4 | int(c-'0')
		case 'a' <= c && c <= 'f':
			n = n<<4 | int(c-'a'+10)
		default:
			return 0, 0, false
		}
	}
	return kind, n, frameHeaderLen+n <= framePipeBuf
}

// markPrefixAtEnd returns how many bytes at the end of b could be the start
// of mark (a frame cut by the end of a read).
func markPrefixAtEnd(b, mark []byte) int {
	from := max(0, len(b)-len(mark)+1)
	for i := bytes.IndexByte(b[from:], mark[0]); i >= 0; {
		at := from + i
		if bytes.HasPrefix(mark, b[at:]) {
			return len(b) - at
		}
		from = at + 1
		i = bytes.IndexByte(b[from:], mark[0])
	}
	return 0
}
