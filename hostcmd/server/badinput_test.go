package server_test

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/kernelhost/kernelhost/hostcmd/internal/hosttest"
	"github.com/kernelhost/kernelhost/hostcmd/settings"
	"github.com/kernelhost/kernelhost/internal/testkit"
)

// Each bad request gets the right status and a clear message, and disturbs
// nothing: a context with state keeps it and keeps working.
func TestBadInput(t *testing.T) {
	t.Parallel()
	const limit = 64 << 10
	h := hosttest.Start(t, func(c *settings.Config) { c.MaxBodyBytes = limit })
	other := h.CreateContext(`{}`)
	hosttest.NoError(t, h.Run(map[string]any{"code": "kept = 'state'", "context_id": other.ID}))
	before := h.Contexts()

	for _, tc := range []struct {
		name, method, path, body string
		status                   int
		contains                 string
	}{
		{"malformed JSON", "POST", "/execute", `{"code":`, 422, "malformed JSON"},
		{"not an object", "POST", "/execute", `["1+1"]`, 422, "JSON object"},
		{"missing code", "POST", "/execute", `{}`, 422, `"code" is required`},
		{"null code", "POST", "/execute", `{"code":null}`, 422, `"code" is required`},
		{"code not a string", "POST", "/execute", `{"code":{"a":1}}`, 422, "code"},
		{"env value not a string", "POST", "/execute", `{"code":"1","env_vars":{"A":1}}`, 422, "env_vars"},
		{"env value null", "POST", "/execute", `{"code":"1","env_vars":{"A":null}}`, 422, "env_vars"},
		{"language not a string", "POST", "/execute", `{"code":"1","language":3}`, 422, "language"},
		{"both language and context_id", "POST", "/execute", `{"code":"1","context_id":"x","language":"python"}`, 400, "Only one of context_id or language can be provided"},
		{"unknown context", "POST", "/execute", `{"code":"1","context_id":"nope"}`, 404, "Context nope not found"},
		{"invalid env key", "POST", "/execute", `{"code":"1","env_vars":{"A-B":"x"}}`, 400, "A-B"},
		{"NUL in env value", "POST", "/execute", `{"code":"1","env_vars":{"A":"x\u0000y"}}`, 400, "NUL"},
		{"oversized body", "POST", "/execute", fmt.Sprintf(`{"code":%q}`, strings.Repeat("x", limit)), 413, "KERNELHOST_MAX_BODY_BYTES"},
		{"oversized context body", "POST", "/contexts", fmt.Sprintf(`{"cwd":%q}`, strings.Repeat("x", limit)), 413, "too large"},
		{"malformed context body", "POST", "/contexts", `{"language":`, 422, "malformed JSON"},
		{"context cwd not a string", "POST", "/contexts", `{"cwd":1}`, 422, "cwd"},
		{"context cwd not a directory", "POST", "/contexts", `{"cwd":"/no/such/kh-dir"}`, 400, "not an existing directory"},
		// Relative to what? Not the host's working directory (issue 11 item 11).
		{"context cwd relative", "POST", "/contexts", `{"cwd":"../../../../etc"}`, 400, "absolute"},
		{"context cwd dot", "POST", "/contexts", `{"cwd":"."}`, 400, "absolute"},
		// bash cannot hold a NUL in its code; it was a 200 with a WebSocketError line.
		{"NUL in bash code", "POST", "/execute", `{"code":"echo a\u0000b","language":"bash"}`, 400, "NUL"},
		{"unknown route", "GET", "/nope", "", 404, `{"detail":"Not Found"}`},
		{"wrong method", "GET", "/execute", "", 405, `{"detail":"Method Not Allowed"}`},
		{"restart unknown", "POST", "/contexts/nope/restart", "", 404, "Context nope not found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, body := h.Do(tc.method, tc.path, tc.body)
			if status != tc.status || !strings.Contains(body, tc.contains) {
				t.Fatalf("%d %q, want %d containing %q", status, body, tc.status, tc.contains)
			}
		})
	}

	if got := hosttest.MainResult(t, h.Run(map[string]any{"code": "kept", "context_id": other.ID})); got != "state" {
		t.Fatalf("the other context lost its state: %q", got)
	}
	if after := h.Contexts(); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("bad requests changed the contexts: %+v, was %+v", after, before)
	}
}

// What the SDKs send must be accepted: empty strings for absent fields,
// unknown fields and query parameters, JSON content type on bodiless routes,
// and (a browser build, from an allowed origin) CORS preflights.
func TestLenientInput(t *testing.T) {
	t.Parallel()
	h := hosttest.Start(t, func(c *settings.Config) { c.AllowedOrigins = []string{"http://example.test"} })
	for _, body := range []string{
		`{"code":"1+1","context_id":"","language":""}`,
		`{"code":"1+1","context_id":null,"language":null,"env_vars":null}`,
		`{"code":"1+1","unknown_field":[1,2]}`,
		`{"code":"1+1","language":" PYTHON "}`,
	} {
		status, text := h.Do("POST", "/execute?source=ci", body)
		if status != 200 {
			t.Fatalf("%s: %d %s", body, status, text)
		}
		if got := hosttest.MainResult(t, hosttest.ParseStream(t, []byte(text))); got != "2" {
			t.Fatalf("%s: result %q", body, got)
		}
	}
	if status, body := h.Do("GET", "/contexts?source=ci", ""); status != 200 || !strings.HasPrefix(body, "[") {
		t.Fatalf("GET /contexts with a JSON content type: %d %q", status, body)
	}
	if status, _ := h.Do("POST", "/contexts", ""); status != 200 {
		t.Fatalf("POST /contexts with an empty body: %d", status)
	}

	req, _ := http.NewRequest("OPTIONS", h.URL()+"/execute", nil)
	req.Header.Set("Origin", "http://example.test")
	req.Header.Set("Access-Control-Request-Method", "POST")
	req.Header.Set("Access-Control-Request-Headers", "content-type,e2b-sandbox-id")
	resp, err := h.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Access-Control-Allow-Origin") == "" ||
		resp.Header.Get("Access-Control-Allow-Headers") != "content-type,e2b-sandbox-id" {
		t.Fatalf("preflight: %d %v", resp.StatusCode, resp.Header)
	}
}

// Strings the client chose (ids, language names, cwds, env keys, query
// values) reach error bodies and logs clipped and quoted, so a 4 MiB
// language cannot make an 8 MiB body, nor a newline in an id forge a log
// line (issue 11 item 10).
func TestClientStringsAreClipped(t *testing.T) {
	t.Parallel()
	var logs testkit.SyncBuffer
	h := hosttest.Start(t, func(c *settings.Config) {
		c.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	const forged = "\nlevel=ERROR msg=forged"
	huge := "x" + forged + strings.Repeat("y", 4<<20)   // inside a body (limit 16 MiB)
	long := "x" + forged + strings.Repeat("y", 256<<10) // inside a URL (headers up to 1 MB)
	pathLong := url.PathEscape(long)
	for _, tc := range []struct {
		name, method, path, body string
		status                   int
	}{
		{"execute language", "POST", "/execute", withCode("language", huge), 400},
		{"context language", "POST", "/contexts", jsonObject("language", huge), 400},
		{"context cwd", "POST", "/contexts", jsonObject("cwd", huge), 400},
		{"execute context_id", "POST", "/execute", withCode("context_id", huge), 404},
		{"env key", "POST", "/execute", fmt.Sprintf(`{"code":"1","env_vars":{%q:"v"}}`, huge), 400},
		{"env value null", "POST", "/execute", fmt.Sprintf(`{"code":"1","env_vars":{%q:null}}`, huge), 422},
		{"restart", "POST", "/contexts/" + pathLong + "/restart", "", 404},
		{"delete", "DELETE", "/contexts/" + pathLong, "", 404},
		{"execution", "GET", "/executions/" + pathLong, "", 404},
		{"execution stream", "GET", "/executions/" + pathLong + "/stream", "", 404},
		{"after", "GET", "/executions/x/stream?after=" + pathLong, "", 422},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, body := h.Do(tc.method, tc.path, tc.body)
			if status != tc.status || len(body) > 1024 || strings.Contains(body, forged) || !strings.Contains(body, `"x\n`) {
				t.Fatalf("%d, %d bytes %.300q, want %d, under 1 KiB, the string quoted", status, len(body), body, tc.status)
			}
		})
	}
	hosttest.NoError(t, h.Run(map[string]any{"code": "1"}))
	for _, l := range strings.Split(logs.String(), "\n") {
		if len(l) > 4096 || strings.HasPrefix(l, "level=ERROR msg=forged") {
			t.Errorf("log line of %d bytes: %.300q", len(l), l)
		}
	}
}

// withCode is an /execute body running "1" with one more string field.
func withCode(key, value string) string {
	b, _ := json.Marshal(map[string]string{"code": "1", key: value})
	return string(b)
}
