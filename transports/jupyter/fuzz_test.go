package jupyter

import (
	"bytes"
	"encoding/json"
	"testing"
)

// FuzzDecodeFrame feeds arbitrary websocket frames to the message decoder, in
// each of its three layouts (JSON text frames, v1 binary, legacy binary):
// it must never panic, a frame it accepts must map to a core message or be
// skipped without panicking, and a v1 frame it accepts must survive being
// laid out again by encodeV1 unchanged.
func FuzzDecodeFrame(f *testing.F) {
	hdr := []byte(`{"msg_id":"m1","msg_type":"stream","session":"s","date":"2024-01-01T00:00:00Z","version":"5.3"}`)
	parent := []byte(`{"msg_id":"p1","msg_type":"execute_request"}`)
	content := []byte(`{"name":"stdout","text":"hi\n"}`)
	f.Add(true, true, encodeV1("iopub", [][]byte{hdr, parent, []byte("{}"), content}))
	f.Add(true, true, encodeV1("shell", [][]byte{[]byte(`{"msg_type":"execute_reply"}`), parent, []byte("{}"), []byte(`{"status":"abort","execution_count":3}`), []byte("buf")}))
	f.Add(false, false, []byte(`{"header":{"msg_id":"m","msg_type":"error"},"parent_header":{"msg_id":"p"},"content":{"ename":"E","evalue":"v","traceback":["a","b"]},"channel":"iopub"}`))
	f.Add(false, false, []byte(`{"header":{"msg_type":"execute_result"},"content":{"data":{"text/plain":"1"},"execution_count":1}}`))
	f.Add(false, false, []byte(`{"header":{"msg_type":"status"},"content":{"execution_state":"idle"}}`))
	f.Add(false, true, append([]byte{0, 0, 0, 1, 0, 0, 0, 8}, `{"header":{"msg_type":"stream"},"content":{"name":"stderr","text":"IOPub message rate exceeded"}}`...))
	f.Add(true, true, []byte{2, 0, 0, 0, 0, 0, 0, 0, 16, 0, 0, 0, 0, 0, 0, 0})
	f.Add(false, false, []byte(`{"header":{"msg_type":"stream"},"content":[1]}`))
	f.Fuzz(func(t *testing.T, v1, binaryFrame bool, frame []byte) {
		m, err := decodeFrame(v1, binaryFrame, bytes.Clone(frame))
		if err != nil {
			if err.Error() == "" {
				t.Fatal("an error without a message")
			}
			return
		}
		if _, _, err := toMessage(m); err != nil && err.Error() == "" {
			t.Fatal("a mapping error without a message")
		}
		if !v1 || !binaryFrame {
			return
		}
		channel, parts, err := decodeV1(frame)
		if err != nil {
			t.Fatalf("decodeFrame accepted a frame decodeV1 refuses: %v", err)
		}
		channel2, parts2, err := decodeV1(encodeV1(channel, parts))
		if err != nil {
			t.Fatalf("re-encoded frame refused: %v", err)
		}
		if channel2 != channel || len(parts2) != len(parts) {
			t.Fatalf("round trip: channel %q parts %d, was %q %d", channel2, len(parts2), channel, len(parts))
		}
		for i := range parts {
			if !bytes.Equal(parts[i], parts2[i]) {
				t.Fatalf("round trip: part %d %q, was %q", i, parts2[i], parts[i])
			}
		}
		// What the decoder accepted as content is JSON text the mapper can read
		// or refuse with an error, never something in between.
		_ = json.Valid(m.Content)
	})
}
