package server_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kernelhost/kernelhost/hostcmd/server"
	"github.com/kernelhost/kernelhost/hostcmd/settings"
	"github.com/kernelhost/kernelhost/internal/testkit"
	"github.com/kernelhost/kernelhost/plugins/policy"
	"github.com/kernelhost/kernelhost/transports/subprocess"
)

// Built once per run by TestMain into a temporary directory: the real
// transport plugins, and the policy modules the policy tests load.
var (
	pluginDir  string // kernelhost-transport-* executables
	denylist   string // the example Go policy (denylist.wasm)
	loopWasm   string // a hostile module that spins when it sees env vars
	watMissing error  // wat2wasm is not installed: loopWasm is ""
	// Compiled policy code shared by the tests' hosts: denylist.wasm is
	// compiled once per run, not once per host (seconds under -race).
	policyCache string
)

// policyOptions are the policy host options of every test host.
func policyOptions() policy.Options {
	return policy.Options{
		// Starting a Go policy instance takes well under the default 10 s, but
		// not always under -race on a loaded machine.
		StartTimeout: 30 * time.Second,
		CacheDir:     policyCache,
	}
}

func TestMain(m *testing.M) {
	testkit.Main(m, func(dir string) error {
		denylist = filepath.Join(dir, "denylist.wasm")
		policyCache = filepath.Join(dir, "wazero-cache")
		var err error
		if pluginDir, err = testkit.Plugins(); err != nil {
			return fmt.Errorf("build the transport plugins: %w", err)
		}
		if err := testkit.Denylist(denylist); err != nil {
			return fmt.Errorf("build denylist.wasm: %w", err)
		}
		if err := compilePolicy(denylist); err != nil {
			return err
		}
		loopWasm = filepath.Join(dir, "loop.wasm")
		if watMissing = testkit.Wat("plugins/policy/testdata/loop.wat", loopWasm); watMissing != nil {
			if !errors.Is(watMissing, testkit.ErrNoWat2wasm) {
				return watMissing
			}
			loopWasm = ""
		}
		return nil
	})
}

// compilePolicy loads the module at path once, so that its compiled code is
// in policyCache before any test's host loads it: the parallel tests that
// start hosts with it at once then only instantiate it, instead of each
// compiling it beside the others.
func compilePolicy(path string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	chain, err := policy.Load(ctx, []policy.ModuleConfig{{Path: path}}, policyOptions())
	if err != nil {
		return fmt.Errorf("compile %s: %w", path, err)
	}
	return chain.Close(ctx)
}

// inProcess runs the subprocess transport linked into the test binary.
func inProcess(c *settings.Config) {
	c.Transport = subprocess.New(subprocess.Options{Sandbox: subprocess.SandboxOptions{Writable: []string{c.DefaultCwd, c.TransportSettings["sandbox-writable"]}}})
}

// needSandbox skips a test that needs interpreters in sandboxes where bwrap
// cannot make them (it fails instead when CI is set).
func needSandbox(t testing.TB) {
	t.Helper()
	if on, why, _ := subprocess.New(subprocess.Options{}).Sandboxed(); !on {
		testkit.Missingf(t, "no sandbox for interpreters here: %s", why)
	}
}

// viaPlugin runs the subprocess transport through the plugin boundary, as
// the kernelhost binary does: the real kernelhost-transport-subprocess.
func viaPlugin(c *settings.Config) {
	c.Transport = nil
	c.PluginDir = pluginDir
	c.TransportName = "subprocess"
}

// eachTransport runs f once per way the host gets its transport: linked in
// and through the plugin boundary, side by side (each has a host of its
// own). f passes start's options to startHost.
func eachTransport(t *testing.T, f func(t *testing.T, start func(...func(*settings.Config)) *testHost)) {
	for _, mode := range []struct {
		name string
		set  func(*settings.Config)
	}{{"in-process", inProcess}, {"plugin", viaPlugin}} {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			f(t, func(configure ...func(*settings.Config)) *testHost {
				t.Helper()
				return startHost(t, append([]func(*settings.Config){mode.set}, configure...)...)
			})
		})
	}
}

// testHost is a host started in-process on a free port, with the real
// subprocess transport (linked in unless the test asks for the plugin), and
// an HTTP client of its own.
type testHost struct {
	*server.Host
	t      testing.TB
	client *http.Client
	cwd    string // the default cwd
}

// startHost starts a host for one test; it is shut down when the test ends.
func startHost(t testing.TB, configure ...func(*settings.Config)) *testHost {
	t.Helper()
	cwd := t.TempDir() // registered first, so removed after the host stopped
	cfg := settings.Config{
		Addr:          "127.0.0.1:0",
		DefaultCwd:    cwd,
		Logger:        slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		PolicyOptions: policyOptions(),
		// The test's temporary directories (cwd's parent holds them all)
		// are writable in its sandboxes: its code may wait for a file the
		// test makes there, or write one the test reads.
		TransportSettings: map[string]string{"sandbox-writable": filepath.Dir(cwd)},
	}
	inProcess(&cfg)
	for _, f := range configure {
		f(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	h, err := server.Start(ctx, cfg)
	if err != nil {
		t.Fatalf("start host: %v", err)
	}
	tr := &http.Transport{DisableCompression: true}
	th := &testHost{Host: h, t: t, client: &http.Client{Transport: tr}, cwd: cfg.DefaultCwd}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := h.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		tr.CloseIdleConnections()
	})
	return th
}

// do sends one request and returns the status and the whole body.
func (h *testHost) do(method, path string, body string) (int, string) {
	h.t.Helper()
	status, _, text := h.doWith(method, path, body, nil)
	return status, text
}

// doWith is do with extra request headers, returning the response's too.
func (h *testHost) doWith(method, path, body string, headers map[string]string) (int, http.Header, string) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, h.URL()+path, strings.NewReader(body))
	if err != nil {
		h.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json") // the SDKs send it everywhere
	for k, v := range headers {
		if k == "Host" {
			req.Host = v // net/http sends req.Host, never a Host header of the map
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := h.client.Do(req)
	if err != nil {
		h.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		h.t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	return resp.StatusCode, resp.Header, string(b)
}

// line is one decoded NDJSON line of an /execute stream.
type line map[string]any

func (l line) typ() string         { s, _ := l["type"].(string); return s }
func (l line) str(k string) string { s, _ := l[k].(string); return s }

// run executes req (marshalled to JSON) and returns the stream's lines,
// checked against the framing rules. A non-200 answer fails the test.
func (h *testHost) run(req any) []line {
	h.t.Helper()
	body, err := json.Marshal(req)
	if err != nil {
		h.t.Fatal(err)
	}
	status, text := h.do("POST", "/execute", string(body))
	if status != http.StatusOK {
		h.t.Fatalf("POST /execute %s: status %d: %s", body, status, text)
	}
	return parseStream(h.t, []byte(text))
}

// parseStream decodes a finished stream and checks the framing
// rules of docs/api-contract.md §5.1: ASCII only, no blank lines, every line a JSON object with a type,
// end_of_execution last and only last.
func parseStream(t testing.TB, raw []byte) []line {
	t.Helper()
	if len(raw) == 0 || raw[len(raw)-1] != '\n' {
		t.Fatalf("stream does not end with a newline: %q", raw)
	}
	var lines []line
	for i, l := range bytes.Split(raw[:len(raw)-1], []byte("\n")) {
		lines = append(lines, checkLine(t, i, l))
	}
	for i, l := range lines {
		if last := i == len(lines)-1; (l.typ() == "end_of_execution") != last {
			t.Fatalf("end_of_execution must be the last line and only the last: line %d of %d is %q", i, len(lines), l.typ())
		}
	}
	return lines
}

func checkLine(t testing.TB, i int, raw []byte) line {
	t.Helper()
	if len(bytes.TrimSpace(raw)) == 0 {
		t.Fatalf("line %d is blank", i)
	}
	for _, c := range raw {
		if c >= 0x80 || c < 0x20 {
			t.Fatalf("line %d has a byte %#x that is not printable ASCII: %q", i, c, raw)
		}
	}
	var l line
	if err := json.Unmarshal(raw, &l); err != nil {
		t.Fatalf("line %d is not a JSON object: %v: %q", i, err, raw)
	}
	if l.typ() == "" {
		t.Fatalf("line %d has no type: %q", i, raw)
	}
	return l
}

// stream starts an execution and returns a reader of its lines, for tests
// that act while it runs. Cancelling ctx drops the connection.
type stream struct {
	t    testing.TB
	resp *http.Response
	sc   *bufio.Scanner
	n    int
	size int // bytes read so far, newlines included
}

func (h *testHost) start(ctx context.Context, req any) *stream {
	h.t.Helper()
	body, _ := json.Marshal(req)
	r, err := http.NewRequestWithContext(ctx, "POST", h.URL()+"/execute", bytes.NewReader(body))
	if err != nil {
		h.t.Fatal(err)
	}
	r.Header.Set("Content-Type", "application/json")
	resp, err := h.client.Do(r)
	if err != nil {
		h.t.Fatalf("POST /execute: %v", err)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		h.t.Fatalf("POST /execute: status %d: %s", resp.StatusCode, b)
	}
	h.t.Cleanup(func() { resp.Body.Close() })
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	return &stream{t: h.t, resp: resp, sc: sc}
}

// next returns the next line, or nil at the end of the body.
func (s *stream) next() line {
	s.t.Helper()
	if !s.sc.Scan() {
		if err := s.sc.Err(); err != nil {
			s.t.Fatalf("read stream: %v", err)
		}
		return nil
	}
	l := checkLine(s.t, s.n, s.sc.Bytes())
	s.n++
	s.size += len(s.sc.Bytes()) + 1 // the scanner drops the "\n"
	return l
}

// until reads lines until one of type typ and returns it; it fails the test
// when the stream ends first.
func (s *stream) until(typ string) line {
	s.t.Helper()
	for {
		l := s.next()
		if l == nil {
			s.t.Fatalf("stream ended before a %q line", typ)
		}
		if l.typ() == typ {
			return l
		}
	}
}

// rest reads the stream to its end and returns the remaining lines.
func (s *stream) rest() []line {
	s.t.Helper()
	var out []line
	for l := s.next(); l != nil; l = s.next() {
		out = append(out, l)
	}
	if len(out) == 0 || out[len(out)-1].typ() != "end_of_execution" {
		s.t.Fatalf("stream did not end with end_of_execution: %v", out)
	}
	return out
}

func ofType(lines []line, typ string) []line {
	var out []line
	for _, l := range lines {
		if l.typ() == typ {
			out = append(out, l)
		}
	}
	return out
}

func stdout(lines []line) string {
	var b strings.Builder
	for _, l := range ofType(lines, "stdout") {
		b.WriteString(l.str("text"))
	}
	return b.String()
}

// mainResult is the text of the main result, failing when there is none.
func mainResult(t testing.TB, lines []line) string {
	t.Helper()
	for _, l := range ofType(lines, "result") {
		if l["is_main_result"] == true {
			return l.str("text")
		}
	}
	t.Fatalf("no main result in %v", lines)
	return ""
}

// onlyError returns the one error line, failing unless there is exactly one.
func onlyError(t testing.TB, lines []line) line {
	t.Helper()
	errs := ofType(lines, "error")
	if len(errs) != 1 {
		t.Fatalf("want exactly one error line, got %d: %v", len(errs), lines)
	}
	return errs[0]
}

func noError(t testing.TB, lines []line) {
	t.Helper()
	if errs := ofType(lines, "error"); len(errs) > 0 {
		t.Fatalf("unexpected error line: %v", errs)
	}
}

type contextInfo struct {
	ID       string `json:"id"`
	Language string `json:"language"`
	Cwd      string `json:"cwd"`
	Family   string `json:"family"`
}

func (h *testHost) contexts() []contextInfo {
	h.t.Helper()
	status, body := h.do("GET", "/contexts", "")
	if status != http.StatusOK {
		h.t.Fatalf("GET /contexts: %d %s", status, body)
	}
	var out []contextInfo
	if err := json.Unmarshal([]byte(body), &out); err != nil {
		h.t.Fatalf("GET /contexts: %v: %s", err, body)
	}
	return out
}

func (h *testHost) createContext(body string) contextInfo {
	h.t.Helper()
	status, text := h.do("POST", "/contexts", body)
	if status != http.StatusOK {
		h.t.Fatalf("POST /contexts %s: %d %s", body, status, text)
	}
	var c contextInfo
	if err := json.Unmarshal([]byte(text), &c); err != nil {
		h.t.Fatalf("POST /contexts: %v: %s", err, text)
	}
	return c
}

// defaultID is the id of language's default context (listed first).
func (h *testHost) defaultID(language string) string {
	h.t.Helper()
	for _, c := range h.contexts() {
		if c.Language == language {
			return c.ID
		}
	}
	h.t.Fatalf("no %s context listed", language)
	return ""
}

// requireContextGone checks that every route naming context id answers 404
// "Context <id> not found", as after a delete.
func (h *testHost) requireContextGone(id string) {
	h.t.Helper()
	notFound := "Context " + id + " not found"
	for _, req := range []struct{ method, path, body string }{
		{"POST", "/execute", fmt.Sprintf(`{"code":"1","context_id":%q}`, id)},
		{"POST", "/contexts/" + id + "/restart", ""},
		{"POST", "/contexts/" + id + "/interrupt", ""},
		{"DELETE", "/contexts/" + id, ""},
	} {
		if status, body := h.do(req.method, req.path, req.body); status != 404 || body != notFound {
			h.t.Errorf("%s %s after delete: %d %q, want 404 %q", req.method, req.path, status, body, notFound)
		}
	}
}

// env is a getenv over m, for settings.Load.
func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}
