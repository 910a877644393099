package policysdk

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// The hand-written codec must agree with encoding/json on every shape the
// ABI uses, including escapes and non-ASCII text.
func TestCodecMatchesEncodingJSON(t *testing.T) {
	want := Input{
		Config:    `{"deny":["A"]}`,
		EnvVars:   map[string]string{"Q": "quote\" back\\ nl\n tab\t cr\r ctl\x01 uni ü € 😀 <>&", "E": ""},
		GlobalEnv: map[string]string{},
		ContextID: "c", Language: "python", Cwd: "/tmp/ü",
	}
	b, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	// members a newer host might add are skipped
	b = append(b[:len(b)-1], `,"extra":[1,true,null,{"x":[]},"s\""],"n":-1.5e3}`...)
	got, err := decodeInput(b, &scratch{})
	if err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("decoded\n %#v\nwant\n %#v", got, want)
	}
	// \u escapes, surrogate pairs and \/ as another encoder might write them
	got, err = decodeInput([]byte(`{"env_vars":{"K":"\u00fc\ud83d\ude00\/"}}`), nil)
	if err != nil || got.EnvVars["K"] != "ü😀/" {
		t.Fatalf("got %q, %v", got.EnvVars["K"], err)
	}

	for _, d := range []Decision{
		Allow(),
		Rewrite(nil),
		Rewrite(want.EnvVars),
		Reject(Rejection{Key: "LD_\"X", Reason: "no\n"}, Rejection{Reason: "whole request"}),
	} {
		out := appendDecision(nil, d)
		var back struct {
			EnvVars    map[string]string `json:"env_vars"`
			Rejections []Rejection       `json:"rejections"`
		}
		if err := json.Unmarshal(out, &back); err != nil {
			t.Fatalf("output %s is not JSON: %v", out, err)
		}
		if !reflect.DeepEqual(back.EnvVars, d.EnvVars) || !reflect.DeepEqual(back.Rejections, d.Rejections) {
			t.Errorf("round trip of %+v gave %+v (%s)", d, back, out)
		}
	}
}

func TestMalformedInput(t *testing.T) {
	for _, in := range []string{``, `{`, `[]`, `{"env_vars":{"A":1}}`, `{"config":"x}`, `{} x`, `{"a":"\q"}`} {
		if _, err := decodeInput([]byte(in), nil); err == nil {
			t.Errorf("decodeInput(%q): no error", in)
		}
	}
}

func TestRunRecoversPanic(t *testing.T) {
	_, err := Run(func(Input) Decision { panic("boom") }, []byte(`{}`))
	if err == nil || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("err = %v", err)
	}
}

func TestDecodeJSON(t *testing.T) {
	src := `{"s":"x\u00fc","n":-12.5e1,"i":3,"b":true,"f":false,"z":null,"a":["p",{"q":[]}],"o":{}}`
	got, err := DecodeJSON(src)
	if err != nil {
		t.Fatal(err)
	}
	var want any
	if err := json.Unmarshal([]byte(src), &want); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %#v\nwant %#v", got, want)
	}
	for _, bad := range []string{`{`, `[1,]`, `-`, `1.2.3`, `{"a" 1}`, `tru`, `"x" y`} {
		if _, err := DecodeJSON(bad); err == nil {
			t.Errorf("DecodeJSON(%q): no error", bad)
		}
	}
}

// canonicalDoc is an input as the host writes it (docs/policy-abi.md).
const canonicalDoc = `{"config":"{\"deny\":[\"A\"]}","env_vars":{"APP_MODE":"fast","TZ":"UTC"},"global_env":{"HOME":"/home/user"},"context_id":"ctx-1","language":"python","cwd":"/home/ü","metadata":{"request_id":"r-1"}}`

// TestCanonicalFastPath: the host's usual document takes the one-pass
// decoder, which agrees with the general one; every other document (escapes,
// whitespace, another order, members added later, truncated) falls back to
// the general decoder, with the same result as before.
func TestCanonicalFastPath(t *testing.T) {
	plain := `{"config":"","env_vars":{"APP_MODE":"fast","TZ":"UTC"},"global_env":{"HOME":"/home/user"},"context_id":"ctx-1","language":"python","cwd":"/home/ü","metadata":{"request_id":"r-1"}}`
	empty := `{"config":"","env_vars":{},"global_env":{},"context_id":"","language":"","cwd":"","metadata":{}}`
	for _, doc := range []string{plain, empty} {
		got, ok := decodeCanonical([]byte(doc), nil)
		if !ok {
			t.Fatalf("decodeCanonical(%s) did not take the fast path", doc)
		}
		want, err := decodeGeneral([]byte(doc), nil)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("fast path %#v, general %#v (%v)", got, want, err)
		}
	}
	for _, doc := range []string{
		canonicalDoc, // escapes in the config
		strings.Replace(plain, `"fast"`, `"f\nst"`, 1),
		strings.Replace(plain, `,"TZ"`, `, "TZ"`, 1),
		strings.Replace(plain, `{"config":"",`, `{`, 1) + "", // config missing
		strings.TrimSuffix(plain, "}") + `,"later":1}`,
		strings.Replace(plain, `"metadata":{"request_id":"r-1"}`, `"metadata":null`, 1),
	} {
		if _, ok := decodeCanonical([]byte(doc), nil); ok {
			t.Errorf("decodeCanonical(%s) took the fast path", doc)
		}
		got, err := decodeInput([]byte(doc), nil)
		want, werr := decodeGeneral([]byte(doc), nil)
		if err != nil || werr != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("decodeInput(%s) = %#v, %v; want %#v, %v", doc, got, err, want, werr)
		}
	}
	for i := 0; i < len(plain); i++ { // every truncation fails cleanly
		if _, ok := decodeCanonical([]byte(plain[:i]), nil); ok {
			t.Errorf("decodeCanonical(%q) succeeded", plain[:i])
		}
		if _, err := decodeInput([]byte(plain[:i]), nil); err == nil {
			t.Errorf("decodeInput(%q): no error", plain[:i])
		}
	}
	if _, ok := decodeCanonical([]byte(plain+" "), nil); ok {
		t.Error("trailing bytes took the fast path")
	}
}

// TestReuseLeavesNothingBehind: in the export's call-scoped mode the maps of
// one call are reused by the next, on either path; nothing of a call may show
// in the next.
func TestReuseLeavesNothingBehind(t *testing.T) {
	var s scratch
	first := `{"config":"","env_vars":{"A":"1","B":"2","C":"3"},"global_env":{"G":"1","H":"2"},"context_id":"c","language":"l","cwd":"/","metadata":{"m":"1"}}`
	for _, second := range []string{
		`{"config":"","env_vars":{"D":"4"},"global_env":{},"context_id":"c","language":"l","cwd":"/","metadata":{"n":"2"}}`,
		`{"config":"","env_vars":{"D":"\u0034"},"global_env":{},"context_id":"c","language":"l","cwd":"/","metadata":{"n":"2"}}`,
	} {
		if _, err := decodeInput([]byte(first), &s); err != nil {
			t.Fatal(err)
		}
		got, err := decodeInput([]byte(second), &s)
		if err != nil {
			t.Fatal(err)
		}
		want := Input{Config: "", EnvVars: map[string]string{"D": "4"}, GlobalEnv: map[string]string{}, ContextID: "c", Language: "l", Cwd: "/", Metadata: map[string]string{"n": "2"}}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("second call (%s) decoded %#v, want %#v", second, got, want)
		}
	}
}

// FuzzDecodeCanonical: whenever the fast path accepts a document, the
// general decoder accepts it too and decodes the same Input.
func FuzzDecodeCanonical(f *testing.F) {
	f.Add(canonicalDoc)
	f.Add(`{"config":"","env_vars":{"A":"1"},"global_env":{},"context_id":"","language":"","cwd":"","metadata":{}}`)
	f.Fuzz(func(t *testing.T, doc string) {
		got, ok := decodeCanonical([]byte(doc), nil)
		if !ok {
			return
		}
		want, err := decodeGeneral([]byte(doc), nil)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("fast path %#v, general %#v (%v) for %q", got, want, err, doc)
		}
	})
}
