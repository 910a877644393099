package jupyter

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/kernelhost/kernelhost/core"
)

// subprotocolV1 is the binary websocket subprotocol of jupyter-server ≥ 1.17:
// the server forwards the kernel's message parts without re-encoding them.
const subprotocolV1 = "v1.kernel.websocket.jupyter.org"

// protocolVersion is the messaging protocol version we speak.
const protocolVersion = "5.3"

type header struct {
	MsgID    string `json:"msg_id"`
	MsgType  string `json:"msg_type"`
	Username string `json:"username,omitempty"`
	Session  string `json:"session,omitempty"`
	Date     string `json:"date,omitempty"`
	Version  string `json:"version,omitempty"`
}

type executeContent struct {
	Code            string   `json:"code"`
	Silent          bool     `json:"silent"`
	StoreHistory    bool     `json:"store_history"`
	UserExpressions struct{} `json:"user_expressions"`
	AllowStdin      bool     `json:"allow_stdin"`
	StopOnError     bool     `json:"stop_on_error"`
}

// jsonFrame is a message in the JSON-frame protocol (jupyter-server 1.x
// default): the whole message, plus the channel, as one text frame.
type jsonFrame struct {
	Header       header   `json:"header"`
	ParentHeader struct{} `json:"parent_header"`
	Metadata     struct{} `json:"metadata"`
	Content      any      `json:"content"`
	Channel      string   `json:"channel"`
	Buffers      []string `json:"buffers"`
}

// encodeExecute builds the execute_request frame for req. It reports whether
// the frame is binary (v1 subprotocol) or text (JSON frames).
//
// stop_on_error is false: the engine never queues user code behind other user
// code, and an error must never abort a request someone else submitted.
func encodeExecute(v1 bool, session string, req core.ExecuteRequest) (frame []byte, binaryFrame bool, err error) {
	return encodeRequest(v1, session, req.MsgID, "execute_request", executeContent{
		Code:         req.Code,
		Silent:       req.Silent,
		StoreHistory: !req.Silent,
		AllowStdin:   false,
		StopOnError:  false,
	})
}

// encodeRequest builds a shell-channel request frame.
func encodeRequest(v1 bool, session, msgID, msgType string, content any) (frame []byte, binaryFrame bool, err error) {
	h := header{
		MsgID:    msgID,
		MsgType:  msgType,
		Username: "kernelhost",
		Session:  session,
		Date:     time.Now().UTC().Format("2006-01-02T15:04:05.000000Z"),
		Version:  protocolVersion,
	}
	if !v1 {
		frame, err = json.Marshal(jsonFrame{Header: h, Content: content, Channel: "shell", Buffers: []string{}})
		return frame, false, err
	}
	hb, err := json.Marshal(h)
	if err != nil {
		return nil, false, err
	}
	cb, err := json.Marshal(content)
	if err != nil {
		return nil, false, err
	}
	return encodeV1("shell", [][]byte{hb, []byte("{}"), []byte("{}"), cb}), true, nil
}

// encodeV1 lays out a v1 frame: the number of offsets, the offsets (8-byte
// little-endian each), the channel name, then the message parts.
func encodeV1(channel string, parts [][]byte) []byte {
	n := 2 + len(parts) // start of channel, then the end of channel and of every part
	start := 8 * (1 + n)
	size := start + len(channel)
	for _, p := range parts {
		size += len(p)
	}
	buf := make([]byte, 0, size)
	buf = binary.LittleEndian.AppendUint64(buf, uint64(n))
	off := start
	buf = binary.LittleEndian.AppendUint64(buf, uint64(off))
	off += len(channel)
	buf = binary.LittleEndian.AppendUint64(buf, uint64(off))
	for _, p := range parts {
		off += len(p)
		buf = binary.LittleEndian.AppendUint64(buf, uint64(off))
	}
	buf = append(buf, channel...)
	for _, p := range parts {
		buf = append(buf, p...)
	}
	return buf
}

// decodeV1 splits a v1 frame into its channel and message parts.
func decodeV1(frame []byte) (channel string, parts [][]byte, err error) {
	if len(frame) < 8 {
		return "", nil, errors.New("v1 frame shorter than its header")
	}
	n := binary.LittleEndian.Uint64(frame)
	// The count and the n offsets are 8 bytes each: 8*(1+n) bytes at least.
	if n < 2 || n > uint64(len(frame)/8)-1 {
		return "", nil, fmt.Errorf("v1 frame: bad offset count %d", n)
	}
	offs := make([]int, n)
	for i := range offs {
		o := binary.LittleEndian.Uint64(frame[8*(i+1):])
		if o > uint64(len(frame)) || (i > 0 && int(o) < offs[i-1]) {
			return "", nil, fmt.Errorf("v1 frame: bad offset %d", o)
		}
		offs[i] = int(o)
	}
	channel = string(frame[offs[0]:offs[1]])
	for i := 1; i < len(offs)-1; i++ {
		parts = append(parts, frame[offs[i]:offs[i+1]])
	}
	// The last part runs to the end of the frame when the server leaves its
	// end offset out; tolerate both layouts.
	if last := offs[len(offs)-1]; last < len(frame) {
		parts = append(parts, frame[last:])
	}
	return channel, parts, nil
}

// inMsg is the part of an incoming kernel message that we use.
type inMsg struct {
	Header  header          `json:"header"`
	Parent  header          `json:"parent_header"`
	Content json.RawMessage `json:"content"`
	Channel string          `json:"channel"`
}

// inContent holds the content fields of every message type we map.
type inContent struct {
	ExecutionCount int                        `json:"execution_count"`
	Name           string                     `json:"name"`
	Text           string                     `json:"text"`
	Data           map[string]json.RawMessage `json:"data"`
	EName          string                     `json:"ename"`
	EValue         string                     `json:"evalue"`
	Traceback      []string                   `json:"traceback"`
	Status         string                     `json:"status"`
	ExecutionState string                     `json:"execution_state"`
}

// decodeFrame decodes one websocket frame. Text frames are JSON frames; binary
// frames are v1 frames on a v1 connection, else the legacy binary layout
// (JSON message plus buffers, which we do not use).
func decodeFrame(v1, binaryFrame bool, frame []byte) (inMsg, error) {
	var m inMsg
	switch {
	case v1 && binaryFrame:
		channel, parts, err := decodeV1(frame)
		if err != nil {
			return m, err
		}
		if len(parts) < 4 {
			return m, fmt.Errorf("v1 frame has %d parts, want at least 4", len(parts))
		}
		m.Channel = channel
		if err := json.Unmarshal(parts[0], &m.Header); err != nil {
			return m, fmt.Errorf("header: %w", err)
		}
		if err := json.Unmarshal(parts[1], &m.Parent); err != nil {
			return m, fmt.Errorf("parent_header: %w", err)
		}
		m.Content = parts[3]
		return m, nil
	case binaryFrame:
		// Legacy binary: uint32 BE count, uint32 BE offsets, the JSON message first.
		if len(frame) < 8 {
			return m, errors.New("binary frame too short")
		}
		n := binary.BigEndian.Uint32(frame)
		first := binary.BigEndian.Uint32(frame[4:])
		end := uint32(len(frame))
		if n > 1 && len(frame) >= 12 {
			end = binary.BigEndian.Uint32(frame[8:])
		}
		if first > end || end > uint32(len(frame)) {
			return m, errors.New("binary frame: bad offsets")
		}
		frame = frame[first:end]
	}
	err := json.Unmarshal(frame, &m)
	return m, err
}

// Rate-limit notices jupyter-server writes to stderr of the request whose
// output it drops.
var rateLimitNotices = []string{"IOPub message rate exceeded", "IOPub data rate exceeded"}

// droppedOutputLine is what the client sees when the server drops output.
const droppedOutputLine = "kernelhost: the Jupyter server dropped output of this execution " +
	"(its IOPub rate limit was exceeded); the output below is incomplete.\n"

// lostNotice is the stderr line that tells request parent that n of its
// messages were lost between the kernel and the server (a full ZeroMQ queue
// drops them without a word); Lost carries n to the host's metrics.
func lostNotice(parent, ts string, n int) core.Message {
	return core.Message{
		ParentID: parent, Type: core.MsgStream, Name: "stderr", Timestamp: ts, Lost: n,
		Text: fmt.Sprintf("kernelhost: messages of this execution were lost between the kernel and "+
			"the Jupyter server (%d missing; its IOPub queue overflowed); the output is incomplete.\n", n),
	}
}

// toMessage maps a kernel message to a core.Message. ok is false for message
// types the core does not use.
func toMessage(m inMsg) (msg core.Message, ok bool, err error) {
	msg = core.Message{ParentID: m.Parent.MsgID, Timestamp: m.Header.Date}
	switch m.Header.MsgType {
	case "stream", "execute_input", "execute_result", "display_data",
		"update_display_data", "error", "execute_reply", "status":
	default:
		return msg, false, nil
	}
	var c inContent
	if err := json.Unmarshal(m.Content, &c); err != nil {
		return msg, false, fmt.Errorf("%s content: %w", m.Header.MsgType, err)
	}
	msg.Type = core.MessageType(m.Header.MsgType)
	switch msg.Type {
	case core.MsgStream:
		msg.Name, msg.Text = c.Name, c.Text
		if c.Name == "stderr" {
			for _, notice := range rateLimitNotices {
				if strings.HasPrefix(c.Text, notice) {
					msg.Text = droppedOutputLine + c.Text
				}
			}
		}
	case core.MsgExecuteInput:
		msg.ExecutionCount = c.ExecutionCount
	case core.MsgExecuteResult:
		msg.ExecutionCount, msg.Data = c.ExecutionCount, c.Data
	case core.MsgDisplayData, core.MsgUpdateDisplayData:
		msg.Data = c.Data
	case core.MsgError:
		msg.EName, msg.EValue, msg.Traceback = c.EName, c.EValue, c.Traceback
	case core.MsgExecuteReply:
		msg.ExecutionCount, msg.Status = c.ExecutionCount, c.Status
		if c.Status == "abort" { // older kernels' spelling; both are terminal
			msg.Status = core.ReplyAborted
		}
		msg.EName, msg.EValue, msg.Traceback = c.EName, c.EValue, c.Traceback
	case core.MsgStatus:
		msg.State = c.ExecutionState
	}
	return msg, true, nil
}
