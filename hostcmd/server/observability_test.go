package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/kernelhost/kernelhost/hostcmd/internal/hosttest"
	"github.com/kernelhost/kernelhost/hostcmd/settings"
	"github.com/kernelhost/kernelhost/internal/testkit"
)

// logLines decodes JSON log output, one record a line.
func logLines(t *testing.T, out string) []map[string]any {
	t.Helper()
	var recs []map[string]any
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var r map[string]any
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("log line is not JSON: %v: %s", err, sc.Text())
		}
		recs = append(recs, r)
	}
	return recs
}

// withRequestID are the records carrying request_id id.
func withRequestID(recs []map[string]any, id string) []map[string]any {
	var out []map[string]any
	for _, r := range recs {
		if r["request_id"] == id {
			out = append(out, r)
		}
	}
	return out
}

// requestWithID sends one request with an X-Request-Id (none when id is
// "") and returns the status and the id the host answered with.
func requestWithID(h *hosttest.Host, t *testing.T, method, path, body, id string) (int, string) {
	t.Helper()
	var headers map[string]string
	if id != "" {
		headers = map[string]string{"X-Request-Id": id}
	}
	status, header, _ := h.DoWith(method, path, body, headers)
	return status, header.Get("X-Request-Id")
}

// The log lines of a real execution through the plugin carry its request
// id (the client's, echoed back), its context id and its execution id; a
// failed request's lines carry a generated id and the context it named; an
// id that is not a sane token is replaced; the plugin's lines carry its
// name.
func TestRequestLogIDs(t *testing.T) {
	t.Parallel()
	var logs testkit.SyncBuffer
	h := hosttest.Start(t, hosttest.ViaPlugin, func(c *settings.Config) {
		c.Logger = slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	python := h.DefaultID("python")

	const clientID = "client-req-42"
	status, echoed := requestWithID(h, t, "POST", "/execute", `{"code":"print('hi')"}`, clientID)
	if status != 200 || echoed != clientID {
		t.Fatalf("POST /execute with X-Request-Id %q: %d, echoed %q", clientID, status, echoed)
	}
	status, generated := requestWithID(h, t, "POST", "/execute", `{"code":"1","context_id":"nope"}`, "")
	if status != http.StatusNotFound {
		t.Fatalf("unknown context: %d, want 404", status)
	}
	if _, err := uuid.Parse(generated); err != nil {
		t.Fatalf("generated request id %q is not a UUID: %v", generated, err)
	}
	for _, bad := range []string{"has space", strings.Repeat("x", 129), "caf\u00e9", "tab\tbed"} {
		if _, got := requestWithID(h, t, "GET", "/health", "", bad); got == bad || uuid.Validate(got) != nil {
			t.Errorf("X-Request-Id %q: answered %q, want a generated UUID instead", bad, got)
		}
	}
	if _, got := requestWithID(h, t, "GET", "/health", "", strings.Repeat("y", 128)); got != strings.Repeat("y", 128) {
		t.Errorf("a 128-character id was replaced by %q", got)
	}

	const createID = "client-create-7"
	if status, _ := requestWithID(h, t, "POST", "/contexts", `{}`, createID); status != 200 {
		t.Fatalf("POST /contexts: %d", status)
	}
	const timeoutID = "client-timeout-8"
	if status, _ := requestWithID(h, t, "POST", "/execute", `{"code":"import time; time.sleep(30)","timeout":0.2}`, timeoutID); status != 200 {
		t.Fatalf("POST /execute with a timeout: %d", status)
	}

	recs := logLines(t, logs.String())
	// The engine's own lines on behalf of a request carry its id too.
	for id, msg := range map[string]string{createID: "context created", timeoutID: "interrupting"} {
		var found bool
		for _, r := range withRequestID(recs, id) {
			found = found || r["msg"] == msg
		}
		if !found {
			t.Errorf("no engine line %q with request_id %s in:\n%s", msg, id, logs.String())
		}
	}
	ok := withRequestID(recs, clientID)
	var served map[string]any
	for _, r := range ok {
		if r["msg"] == "request served" {
			served = r
		}
		if r["context_id"] != python {
			t.Errorf("a line of the execution has context_id %v, want %s: %v", r["context_id"], python, r)
		}
	}
	if served == nil {
		t.Fatalf("no \"request served\" line with request_id %s in:\n%s", clientID, logs.String())
	}
	if x, _ := served["execution_id"].(string); uuid.Validate(x) != nil || served["status"] != float64(200) || served["path"] != "/execute" {
		t.Errorf("request served line %v: want an execution_id, status 200, path /execute", served)
	}

	failed := withRequestID(recs, generated)
	var sawFailed bool
	for _, r := range failed {
		sawFailed = sawFailed || r["msg"] == "request failed" && r["context_id"] == "nope" && r["status"] == float64(404)
	}
	if !sawFailed {
		t.Errorf("no \"request failed\" line with request_id %s and context_id nope: %v", generated, failed)
	}

	var pluginStarted bool
	for _, r := range recs {
		pluginStarted = pluginStarted || r["msg"] == "transport plugin started" && r["plugin"] == settings.PluginPrefix+"subprocess"
	}
	if !pluginStarted {
		t.Errorf("no \"transport plugin started\" line with plugin=%ssubprocess", settings.PluginPrefix)
	}
}

// -pprof-addr serves /debug/pprof/ on its own listener, never on the API's;
// a non-loopback address gets a warning.
func TestPprof(t *testing.T) {
	t.Parallel()
	get := func(t *testing.T, url string) (int, string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", url, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	t.Run("on", func(t *testing.T) {
		h := hosttest.Start(t, func(c *settings.Config) { c.PprofAddr = "127.0.0.1:0" })
		if h.PprofAddr() == "" || h.PprofAddr() == h.Addr() {
			t.Fatalf("pprof address %q (API %s)", h.PprofAddr(), h.Addr())
		}
		if status, body := get(t, "http://"+h.PprofAddr()+"/debug/pprof/"); status != 200 || !strings.Contains(body, "goroutine") {
			t.Fatalf("GET /debug/pprof/ on the pprof address: %d %.200q", status, body)
		}
		if status, body := get(t, "http://"+h.PprofAddr()+"/debug/pprof/goroutine?debug=1"); status != 200 || !strings.Contains(body, "goroutine profile") {
			t.Fatalf("goroutine profile: %d %.200q", status, body)
		}
		if status, _ := get(t, h.URL()+"/debug/pprof/"); status != http.StatusNotFound {
			t.Fatalf("GET /debug/pprof/ on the API port: %d, want 404", status)
		}
	})
	t.Run("off", func(t *testing.T) {
		h := hosttest.Start(t)
		if h.PprofAddr() != "" {
			t.Fatalf("pprof listening at %s though not configured", h.PprofAddr())
		}
		if status, _ := get(t, h.URL()+"/debug/pprof/"); status != http.StatusNotFound {
			t.Fatalf("GET /debug/pprof/ on the API port: %d, want 404", status)
		}
	})
	t.Run("not loopback", func(t *testing.T) {
		var logs testkit.SyncBuffer
		hosttest.Start(t, func(c *settings.Config) {
			c.PprofAddr = "0.0.0.0:0" // bound only; the test sends nothing to it
			c.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
		})
		if !strings.Contains(logs.String(), "pprof listens on a non-loopback address") {
			t.Fatalf("no warning for a non-loopback pprof address:\n%s", logs.String())
		}
	})
}
