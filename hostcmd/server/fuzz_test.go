package server_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kernelhost/kernelhost/hostcmd/internal/hosttest"
	"github.com/kernelhost/kernelhost/hostcmd/settings"
)

// FuzzExecuteRequest sends arbitrary bodies to POST /execute of one real host
// (subprocess transport): every body gets 200 or a 4xx with a non-empty
// body, never a 5xx (garbage is the client's fault, not the server's), a 200
// stream is well framed, and the host still runs code afterwards. Bodies
// that happen to be valid requests run their code: the host's execution
// timeout bounds them.
func FuzzExecuteRequest(f *testing.F) {
	for _, s := range []string{
		`{"code":"1+1"}`,
		`{"code":"print('a')","language":"python","env_vars":{"A":"x\ny","B":"é\"'"}}`,
		`{"code":"echo hi","language":"bash","env_vars":{"K":"v"}}`,
		`{"code":"raise ValueError('x')"}`,
		`{"code":"1","timeout":0.5}`,
		`{"code":"1","timeout":-1}`,
		`{"code":"1","timeout":"1"}`,
		`{"code":"1","context_id":"x","language":"python"}`,
		`{"code":"1","context_id":"nope"}`,
		`{"code":"1","language":"cobol"}`,
		`{"code":"1","env_vars":{"A-B":"x"}}`,
		`{"code":"1","env_vars":{"A":"x\u0000"}}`,
		`{"code":"1","env_vars":{"A":null}}`,
		`{"code":null}`,
		`{"code":`,
		`["1+1"]`,
		`null`,
		``,
		"\xff\xfe",
	} {
		f.Add([]byte(s))
	}
	h := hosttest.Start(f, func(c *settings.Config) {
		c.ExecutionTimeout = 2 * time.Second
		c.MaxBodyBytes = 64 << 10
	})
	f.Fuzz(func(t *testing.T, body []byte) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, "POST", h.URL()+"/execute", strings.NewReader(string(body)))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := h.Client().Do(req)
		if err != nil {
			t.Fatalf("POST /execute: %v", err)
		}
		text, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatalf("read the answer: %v", err)
		}
		switch {
		case resp.StatusCode == 200:
			hosttest.ParseStream(t, text)
		case resp.StatusCode >= 400 && resp.StatusCode < 500:
			if len(text) == 0 {
				t.Fatalf("%d with an empty body for %q", resp.StatusCode, body)
			}
		default:
			t.Fatalf("%d %q for the body %q: want 200 or 4xx", resp.StatusCode, text, body)
		}
	})
}
