package server_test

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kernelhost/kernelhost/hostcmd/internal/hosttest"
	"github.com/kernelhost/kernelhost/hostcmd/settings"
	"github.com/kernelhost/kernelhost/internal/testkit"
)

// Past MaxContexts, POST /contexts answers 429 with a message that says
// what to do; deleting one makes room again. The defaults count.
func TestMaxContexts(t *testing.T) {
	t.Parallel()
	defaults := 1
	if _, err := exec.LookPath("node"); err == nil {
		defaults = 2
	}
	h := hosttest.Start(t, func(c *settings.Config) { c.MaxContexts = defaults + 1 })
	extra := h.CreateContext(`{}`)
	status, body := h.Do("POST", "/contexts", `{}`)
	if status != http.StatusTooManyRequests || !strings.Contains(body, "delete one first") {
		t.Fatalf("context past the limit: %d %q, want 429 saying to delete one", status, body)
	}
	if len(h.Contexts()) != defaults+1 {
		t.Fatalf("contexts after the refusal: %+v", h.Contexts())
	}
	if status, body := h.Do("DELETE", "/contexts/"+extra.ID, ""); status != 200 {
		t.Fatalf("delete: %d %s", status, body)
	}
	h.CreateContext(`{}`)
}

// The "timeout" field of /execute (seconds) ends a run that takes longer
// with an ExecutionTimeout error line, and the context works afterwards.
func TestExecutionTimeoutPerRequest(t *testing.T) {
	t.Parallel()
	h := hosttest.Start(t)
	hosttest.NoError(t, h.Run(map[string]any{"code": "kept = 7"}))
	began := time.Now()
	lines := h.Run(map[string]any{"code": "import time\nprint('started', flush=True)\ntime.sleep(60)", "timeout": 0.5})
	took := time.Since(began)
	if e := hosttest.OnlyError(t, lines); e.Str("name") != "ExecutionTimeout" {
		t.Fatalf("error line %v, want ExecutionTimeout", e)
	}
	if hosttest.Stdout(lines) != "started\n" {
		t.Fatalf("output before the timeout lost: %q", hosttest.Stdout(lines))
	}
	if took > 30*time.Second { // the cell sleeps 60 s
		t.Fatalf("a 0.5 s timeout ended the stream after %s", took)
	}
	// The interrupt stopped the sleep; the state is kept (no restart needed).
	if got := hosttest.MainResult(t, h.Run(map[string]any{"code": "kept"})); got != "7" {
		t.Fatalf("state after the timeout: %q", got)
	}
}

// The host default applies to requests without "timeout"; a request's own
// timeout overrides it either way.
func TestExecutionTimeoutHostDefault(t *testing.T) {
	t.Parallel()
	h := hosttest.Start(t, func(c *settings.Config) { c.ExecutionTimeout = 500 * time.Millisecond })
	if e := hosttest.OnlyError(t, h.Run(map[string]any{"code": "import time; time.sleep(60)"})); e.Str("name") != "ExecutionTimeout" {
		t.Fatalf("error line %v, want ExecutionTimeout", e)
	}
	lines := h.Run(map[string]any{"code": "import time; time.sleep(1.5); print('done')", "timeout": 30})
	hosttest.NoError(t, lines)
	if hosttest.Stdout(lines) != "done\n" {
		t.Fatalf("a longer per-request timeout was not honoured: %v", lines)
	}
}

func TestExecutionTimeoutInvalid(t *testing.T) {
	t.Parallel()
	h := hosttest.Start(t)
	for _, body := range []string{
		`{"code":"1","timeout":-1}`,
		`{"code":"1","timeout":"5"}`,
		`{"code":"1","timeout":true}`,
		`{"code":"1","timeout":1e300}`,
		`{"code":"1","timeout":1e400}`,
		// Below a millisecond a timeout would round to nothing (1e-12 once
		// meant no timeout at all): refused rather than read as "none".
		`{"code":"1","timeout":1e-12}`,
		`{"code":"1","timeout":0.0009}`,
	} {
		status, text := h.Do("POST", "/execute", body)
		if status != http.StatusUnprocessableEntity || !strings.Contains(text, "timeout") {
			t.Errorf("%s: %d %q, want 422 naming timeout", body, status, text)
		}
	}
	if got := hosttest.MainResult(t, h.Run(map[string]any{"code": "1+1", "timeout": 0})); got != "2" {
		t.Fatalf(`"timeout": 0 (the host's): %q`, got)
	}
}

// closedWithin reads from c until the server closes it (or answers and
// closes), failing unless that happens within d. It returns what was read.
func closedWithin(t *testing.T, c net.Conn, d time.Duration) string {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(d))
	b, err := io.ReadAll(c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the server kept the connection open for %s (read so far: %q)", d, b)
	}
	return string(b)
}

// A client that trickles its headers (slowloris) is cut after the header
// timeout; one that trickles its body, after the read timeout. Meanwhile
// the host serves others.
func TestSlowClientsAreCut(t *testing.T) {
	t.Parallel()
	h := hosttest.Start(t, func(c *settings.Config) {
		c.ReadHeaderTimeout = 300 * time.Millisecond
		c.ReadTimeout = 600 * time.Millisecond
	})
	trickle := func(c net.Conn, first string, stop <-chan struct{}) {
		if _, err := io.WriteString(c, first); err != nil {
			return
		}
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				if _, err := io.WriteString(c, "x"); err != nil {
					return // cut: what this test waits for
				}
			}
		}
	}
	for _, tc := range []struct{ name, first string }{
		{"headers", "POST /execute HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "},
		{"body", "POST /execute HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{\"code\":\""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := net.Dial("tcp", h.Addr())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			stop := make(chan struct{})
			var wg sync.WaitGroup
			wg.Go(func() { trickle(c, tc.first, stop) })
			began := time.Now()
			got := closedWithin(t, c, 5*time.Second)
			close(stop)
			wg.Wait()
			t.Logf("cut after %s; the client saw %q", time.Since(began).Round(time.Millisecond), firstLine(got))
			if tc.name == "body" && !strings.HasPrefix(got, "HTTP/1.1 408") {
				t.Fatalf("a trickled body got %q, want 408", firstLine(got))
			}
			if status, _ := h.Do("GET", "/health", ""); status != 200 {
				t.Fatalf("health: %d", status)
			}
		})
	}
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\r\n")
	return line
}

// The read timeout bounds the request, not the response: a stream that
// runs longer than it is not cut.
func TestReadTimeoutDoesNotCutStreams(t *testing.T) {
	t.Parallel()
	h := hosttest.Start(t, func(c *settings.Config) { c.ReadTimeout = 300 * time.Millisecond })
	lines := h.Run(map[string]any{"code": "import time\nprint('a', flush=True)\ntime.sleep(1.2)\nprint('b')"})
	hosttest.NoError(t, lines)
	if got := hosttest.Stdout(lines); got != "a\nb\n" {
		t.Fatalf("stream longer than the read timeout: %q", got)
	}
	// The same for a restart, which takes a while and has no body.
	id := h.DefaultID("python")
	hosttest.NoError(t, h.Run(map[string]any{"code": "import time; time.sleep(0.5)"}))
	if status, body := h.Do("POST", "/contexts/"+id+"/restart", ""); status != 200 {
		t.Fatalf("restart: %d %s", status, body)
	}
}

// tokenRequest sends a request with the given headers and returns the status.
func tokenRequest(t *testing.T, h *hosttest.Host, method, path, body string, headers map[string]string) (int, string) {
	t.Helper()
	status, _, text := h.DoWith(method, path, body, headers)
	return status, text
}

func TestAccessTokenEveryRoute(t *testing.T) {
	t.Parallel()
	const token = "s3cret-host-token"
	h := hosttest.Start(t, func(c *settings.Config) { c.AccessToken = token; c.AllowedOrigins = []string{"http://a.test"} })
	good := map[string]string{"Authorization": "Bearer " + token}
	for _, tc := range []struct {
		name    string
		headers map[string]string
		status  int
	}{
		{"no token", nil, 401},
		{"wrong token", map[string]string{"Authorization": "Bearer nope"}, 401},
		{"token prefix", map[string]string{"Authorization": "Bearer " + token[:5]}, 401},
		{"token with more", map[string]string{"Authorization": "Bearer " + token + "x"}, 401},
		{"basic scheme", map[string]string{"Authorization": "Basic " + token}, 401},
		{"bare token", map[string]string{"Authorization": token}, 401},
		// The SDKs send X-Access-Token only on /execute; elsewhere it is no credential.
		{"X-Access-Token off /execute", map[string]string{"X-Access-Token": token}, 401},
		{"bearer", good, 200},
		{"bearer, lower-case scheme", map[string]string{"Authorization": "bearer " + token}, 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, r := range [][2]string{{"GET", "/contexts"}, {"POST", "/contexts"}, {"POST", "/contexts/nope/interrupt"}} {
				status, body := tokenRequest(t, h, r[0], r[1], "", tc.headers)
				want := tc.status
				if want == 200 && strings.Contains(r[1], "nope") {
					want = 404 // authorized, then the unknown context
				}
				if status != want {
					t.Errorf("%s %s: %d %q, want %d", r[0], r[1], status, body, want)
				}
				if status == 401 && strings.Contains(body, token) {
					t.Errorf("the 401 body echoes the token: %q", body)
				}
			}
		})
	}
	// /execute: bearer, or X-Access-Token (what the SDKs send there).
	for _, hd := range []map[string]string{good, {"X-Access-Token": token}} {
		status, body := tokenRequest(t, h, "POST", "/execute", `{"code":"1+1"}`, hd)
		if status != 200 || hosttest.MainResult(t, hosttest.ParseStream(t, []byte(body))) != "2" {
			t.Fatalf("/execute with %v: %d %q", hd, status, body)
		}
	}
	if status, _ := tokenRequest(t, h, "POST", "/execute", `{"code":"1+1"}`, map[string]string{"X-Access-Token": "nope"}); status != 401 {
		t.Fatalf("/execute with a wrong X-Access-Token: %d, want 401", status)
	}
	// Readiness probes and CORS preflights (from an allowed origin) carry no credentials.
	if status, _ := tokenRequest(t, h, "GET", "/health", "", nil); status != 200 {
		t.Fatalf("/health without a token: %d, want 200", status)
	}
	status, _ := tokenRequest(t, h, "OPTIONS", "/execute", "", map[string]string{"Origin": "http://a.test", "Access-Control-Request-Method": "POST"})
	if status != 200 {
		t.Fatalf("preflight without a token: %d, want 200", status)
	}
}

// With scope "execute" the official SDKs work unchanged when the token is
// the sandbox's envd access token: they send it as X-Access-Token on
// /execute and nothing on /contexts.
func TestAccessTokenExecuteScope(t *testing.T) {
	t.Parallel()
	const token = "envd-token"
	h := hosttest.Start(t, func(c *settings.Config) { c.AccessToken = token; c.AccessTokenScope = settings.ScopeExecute })
	if status, _ := tokenRequest(t, h, "POST", "/contexts", "", nil); status != 200 {
		t.Fatalf("POST /contexts without a token in scope execute: %d, want 200", status)
	}
	if status, _ := tokenRequest(t, h, "POST", "/execute", `{"code":"1"}`, nil); status != 401 {
		t.Fatalf("/execute without a token: %d, want 401", status)
	}
	status, hdr, body := h.DoWith("POST", "/execute", `{"code":"1+1"}`, map[string]string{"X-Access-Token": token})
	if status != 200 || hosttest.MainResult(t, hosttest.ParseStream(t, []byte(body))) != "2" {
		t.Fatalf("/execute with X-Access-Token: %d %q", status, body)
	}
	// Execution data is behind the token too: whoever learns an id must not
	// read its output or take over its stream (issue 11 item 7).
	id := hdr.Get("X-Execution-Id")
	for _, path := range []string{"/executions/" + id, "/executions/" + id + "/stream", "/executions/nope"} {
		if status, body := tokenRequest(t, h, "GET", path, "", nil); status != 401 {
			t.Errorf("GET %s without a token in scope execute: %d %q, want 401", path, status, body)
		}
		want := 200
		if strings.HasSuffix(path, "nope") {
			want = 404
		}
		if status, body := tokenRequest(t, h, "GET", path, "", map[string]string{"Authorization": "Bearer " + token}); status != want {
			t.Errorf("GET %s with the token: %d %q, want %d", path, status, body, want)
		}
	}
}

// The host's logs, at debug level, through successes and every kind of
// failure, never contain code, env values or the access token.
func TestLogsHoldNoSecrets(t *testing.T) {
	t.Parallel()
	const (
		token      = "tok-6f1d9c2ab0"
		envSecret  = "envsecret-93b1e"
		codeSecret = "codesecret-7ac44"
		globSecret = "globalsecret-5d0e2"
	)
	var logs testkit.SyncBuffer
	h := hosttest.Start(t, func(c *settings.Config) {
		c.AccessToken = token
		c.GlobalEnv = map[string]string{"KH_GLOBAL": globSecret}
		c.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
		c.ExecutionTimeout = 20 * time.Second
	})
	auth := map[string]string{"Authorization": "Bearer " + token}
	run := func(body string, headers map[string]string) int {
		status, _ := tokenRequest(t, h, "POST", "/execute", body, headers)
		return status
	}
	q := func(s string) string { return fmt.Sprintf("%q", s) }
	for _, tc := range []struct {
		body    string
		headers map[string]string
		status  int
	}{
		{`{"code":` + q("print('"+codeSecret+"')") + `,"env_vars":{"KH_SECRET":` + q(envSecret) + `}}`, auth, 200},
		{`{"code":` + q("raise ValueError('"+codeSecret+"')") + `,"env_vars":{"KH_SECRET":` + q(envSecret) + `}}`, auth, 200},
		{`{"code":` + q(codeSecret+" syntax error (") + `}`, auth, 200},
		{`{"code":` + q(codeSecret) + `,"env_vars":{"BAD-KEY":` + q(envSecret) + `}}`, auth, 400},
		{`{"code":` + q(codeSecret) + `,"env_vars":{"K":"` + envSecret + `\u0000"}}`, auth, 400},
		{`{"code":` + q(codeSecret) + `,"env_vars":{"K":1}, "x":"` + envSecret + `"`, auth, 422},
		{`{"code":` + q(codeSecret) + `,"context_id":"nope"}`, auth, 404},
		{`{"code":` + q(codeSecret) + `}`, map[string]string{"Authorization": "Bearer " + token + "x"}, 401},
		{`{"code":` + q(codeSecret) + `}`, map[string]string{"X-Access-Token": envSecret}, 401},
		{`{"code":` + q("import time; time.sleep(30)") + `,"timeout":0.2,"env_vars":{"KH_SECRET":` + q(envSecret) + `}}`, auth, 200},
	} {
		if got := run(tc.body, tc.headers); got != tc.status {
			t.Errorf("%.60s: status %d, want %d", tc.body, got, tc.status)
		}
	}
	// A restart re-applies the global env (the value must not be logged).
	status, list := tokenRequest(t, h, "GET", "/contexts", "", auth)
	var ctxs []hosttest.ContextInfo
	if err := json.Unmarshal([]byte(list), &ctxs); status != 200 || err != nil || len(ctxs) == 0 {
		t.Fatalf("GET /contexts: %d %q %v", status, list, err)
	}
	if status, _ := tokenRequest(t, h, "POST", "/contexts/"+ctxs[0].ID+"/restart", "", auth); status != 200 {
		t.Fatalf("restart: %d", status)
	}
	// The metrics name no code, value or token either.
	status, exposition := tokenRequest(t, h, "GET", "/metrics", "", auth)
	if status != 200 || !strings.Contains(exposition, "kernelhost_executions_total") {
		t.Fatalf("GET /metrics: %d %.200q", status, exposition)
	}
	for _, secret := range []string{token, envSecret, codeSecret, globSecret} {
		if strings.Contains(exposition, secret) {
			t.Errorf("/metrics holds the secret %q", secret)
		}
	}
	out := logs.String()
	if !strings.Contains(out, "request refused") || !strings.Contains(out, "request failed") || !strings.Contains(out, "request served") {
		t.Fatalf("the test did not exercise the request and failure logs:\n%s", out)
	}
	// Every line about a request says which one.
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		if l := sc.Text(); strings.Contains(l, "msg=\"request ") && !strings.Contains(l, " request_id=") {
			t.Errorf("a request's log line has no request_id: %s", l)
		}
	}
	for _, secret := range []string{token, envSecret, codeSecret, globSecret} {
		if strings.Contains(out, secret) {
			sc := bufio.NewScanner(strings.NewReader(out))
			for sc.Scan() {
				if strings.Contains(sc.Text(), secret) {
					t.Errorf("a log line holds the secret %q: %s", secret, sc.Text())
				}
			}
		}
	}
}

func TestLoadLimits(t *testing.T) {
	t.Parallel()
	c, err := settings.Load("kernelhost", nil, hosttest.Env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.MaxContexts != settings.DefaultMaxContexts || c.ExecutionTimeout != 0 || c.ReadHeaderTimeout != 10*time.Second ||
		c.ReadTimeout != 60*time.Second || c.IdleTimeout != 640*time.Second || c.AccessToken != "" || c.AccessTokenScope != "all" {
		t.Fatalf("defaults: %+v", c)
	}
	if fmt.Sprint(c.AllowedHosts) != "[*.e2b.app *.e2b.dev]" || len(c.AllowedOrigins) != 0 {
		t.Fatalf("default allowed hosts %q, origins %q", c.AllowedHosts, c.AllowedOrigins)
	}
	c, err = settings.Load("kernelhost", []string{"-allowed-origins", " https://a.test, http://b.test:3000 "}, hosttest.Env(map[string]string{"KERNELHOST_ALLOWED_HOSTS": "kh.test,*.s.test"}), io.Discard)
	if err != nil || fmt.Sprint(c.AllowedHosts) != "[kh.test *.s.test]" || fmt.Sprint(c.AllowedOrigins) != "[https://a.test http://b.test:3000]" {
		t.Fatalf("allowed hosts %q, origins %q: %v", c.AllowedHosts, c.AllowedOrigins, err)
	}
	c, err = settings.Load("kernelhost", []string{"-max-contexts", "0", "-execution-timeout", "90s"}, hosttest.Env(map[string]string{
		"KERNELHOST_ACCESS_TOKEN":       "t0k",
		"KERNELHOST_ACCESS_TOKEN_SCOPE": "execute",
		"KERNELHOST_READ_TIMEOUT":       "5s",
	}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.MaxContexts >= 0 || c.ExecutionTimeout != 90*time.Second || c.AccessToken != "t0k" || c.AccessTokenScope != "execute" || c.ReadTimeout != 5*time.Second {
		t.Fatalf("settings not applied (max-contexts 0 must be settings.Config's no-limit, negative): %+v", c)
	}
	for _, args := range [][]string{
		{"-max-contexts", "-1"},
		{"-execution-timeout", "-1s"},
		{"-read-header-timeout", "0"},
		{"-idle-timeout", "-5s"},
		{"-access-token-scope", "some"},
		{"-access-token", " padded"},
		{"-allowed-hosts", "http://kh.test"},
		{"-allowed-hosts", "kh.test:8080"},
		{"-allowed-origins", "app.test"},
		{"-allowed-origins", "https://app.test/path"},
	} {
		_, err := settings.Load("kernelhost", args, hosttest.Env(nil), io.Discard)
		if err == nil {
			t.Errorf("%v: accepted", args)
		} else if strings.Contains(err.Error(), "padded") {
			t.Errorf("%v: the error echoes the token: %v", args, err)
		}
	}
}

// A language the transport does not have is the client's error (400, with
// the languages there are), not a 500, on /execute and POST /contexts.
func TestUnknownLanguageIs400(t *testing.T) {
	t.Parallel()
	h := hosttest.Start(t)
	for _, r := range [][2]string{{"/execute", `{"code":"1","language":"cobol"}`}, {"/contexts", `{"language":"cobol"}`}} {
		status, body := h.Do("POST", r[0], r[1])
		if status != http.StatusBadRequest || !strings.Contains(body, `unknown language "cobol"`) || !strings.Contains(body, "python") {
			t.Errorf("POST %s %s: %d %q, want 400 naming the language and those there are", r[0], r[1], status, body)
		}
	}
	if got := hosttest.MainResult(t, h.Run(map[string]any{"code": "1+1"})); got != "2" {
		t.Fatalf("after the refusals: %q", got)
	}
}

// env_vars past -max-env-vars or -max-env-bytes are refused with a 400 that
// names the limit, before anything runs; at the limit they are applied.
func TestEnvVarLimits(t *testing.T) {
	t.Parallel()
	h := hosttest.Start(t, func(c *settings.Config) { c.MaxEnvVars = 3; c.MaxEnvBytes = 64 })
	body := func(env map[string]string) string {
		b, err := json.Marshal(map[string]any{"code": "import os\nprint(sorted(k for k in os.environ if k.startswith('KH_')))", "env_vars": env})
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	for name, tc := range map[string]struct {
		env  map[string]string
		want string
	}{
		"count": {map[string]string{"KH_A": "1", "KH_B": "2", "KH_C": "3", "KH_D": "4"}, "env_vars has 4 entries; this host accepts at most 3 per execution"},
		"bytes": {map[string]string{"KH_A": strings.Repeat("x", 61)}, "env_vars take 65 bytes (names and values); this host accepts at most 64 per execution"},
	} {
		status, got := h.Do("POST", "/execute", body(tc.env))
		if status != http.StatusBadRequest || !strings.Contains(got, tc.want) {
			t.Errorf("%s: %d %q, want 400 with %q", name, status, got, tc.want)
		}
	}
	lines := h.Run(map[string]any{"code": "import os\nprint(sorted(k for k in os.environ if k.startswith('KH_')))", "env_vars": map[string]string{"KH_A": strings.Repeat("x", 52), "KH_B": "", "KH_C": ""}})
	hosttest.NoError(t, lines)
	if got := hosttest.Stdout(lines); got != "['KH_A', 'KH_B', 'KH_C']\n" {
		t.Errorf("at the limit: stdout %q", got)
	}
}
