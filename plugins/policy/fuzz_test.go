package policy

import (
	"encoding/json"
	"reflect"
	"testing"
)

// FuzzDecodeOutput feeds arbitrary bytes to the decoder of a policy module's
// answer (the ABI's output, docs/policy-abi.md), which a hostile module
// controls entirely: it must never panic, an error must leave no partial
// answer, an accepted answer has no empty key, and encoding an accepted
// answer and decoding it again gives the same answer.
func FuzzDecodeOutput(f *testing.F) {
	for _, s := range []string{
		`{}`,
		`{"env_vars":null}`,
		` {"env_vars":{"A":"1","B":"x\ny"}} `,
		`{"rejections":[{"key":"LD_PRELOAD","reason":"loader variable"}]}`,
		`{"env_vars":{"":"x"}}`,
		`{"env_vars":{"A":1}}`,
		`{"unknown":true}`,
		`{} {}`,
		`[]`,
		``,
		`{"env_vars":{"A":"\ud800"}}`,
		`{"rejections":null,"env_vars":{}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		out, err := decodeOutput(b)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("an error without a message")
			}
			if out.EnvVars != nil || out.Rejections != nil {
				t.Fatalf("error %v with a partial answer %+v", err, out)
			}
			return
		}
		if _, ok := out.EnvVars[""]; ok {
			t.Fatalf("accepted an empty key: %q", b)
		}
		again, err := json.Marshal(out)
		if err != nil {
			t.Fatalf("encode the accepted answer %+v: %v", out, err)
		}
		out2, err := decodeOutput(again)
		if err != nil {
			t.Fatalf("the re-encoded answer %s is refused: %v", again, err)
		}
		if !reflect.DeepEqual(normalize(out), normalize(out2)) {
			t.Fatalf("round trip: %+v, was %+v", out2, out)
		}
	})
}

// normalize makes an empty map and an absent one, and an empty list and an
// absent one, compare equal: the ABI gives them the same meaning.
func normalize(o output) output {
	if len(o.EnvVars) == 0 {
		o.EnvVars = nil
	}
	if len(o.Rejections) == 0 {
		o.Rejections = nil
	}
	return o
}
