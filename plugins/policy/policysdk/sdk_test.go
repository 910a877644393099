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
