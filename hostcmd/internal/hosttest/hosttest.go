// Package hosttest starts whole kernelhost hosts in-process for the host's
// end-to-end test packages (hostcmd/server and hostcmd/e2e/...): a host on a
// free port with the real subprocess transport, linked in or through the
// real plugin, and the client side of its HTTP API (requests, the NDJSON
// /execute stream checked against its framing rules, the contexts routes).
// A test package's TestMain calls Main, which builds what the hosts load.
package hosttest

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
	"sync"
	"testing"
	"time"

	"github.com/kernelhost/kernelhost/hostcmd/server"
	"github.com/kernelhost/kernelhost/hostcmd/settings"
	"github.com/kernelhost/kernelhost/internal/testkit"
	"github.com/kernelhost/kernelhost/plugins/policy"
	"github.com/kernelhost/kernelhost/transports/subprocess"
)

// Made once per test binary in the temporary directory Main makes: the
// real transport plugins, by Main, and the policy modules the policy tests
// load, by the first test that asks for one (the other packages' binaries
// do not build them). Read through the accessors below.
var (
	dir       string // Main's temporary directory
	pluginDir string // kernelhost-transport-* executables
	// Compiled policy code shared by the tests' hosts: denylist.wasm is
	// compiled once per run, not once per host (seconds under -race).
	policyCache string

	denylistOnce sync.Once
	denylist     string // the example Go policy (denylist.wasm)
	denylistErr  error

	loopOnce sync.Once
	loopWasm string // a hostile module that spins when it sees env vars
	loopErr  error
)

// PluginDir is the directory of the built kernelhost-transport-* plugins.
func PluginDir() string { return pluginDir }

// Denylist is the path of the example Go policy module, denylist.wasm,
// built and compiled into the policy cache by the first caller: the
// parallel tests that start hosts with it at once then only instantiate it,
// instead of each compiling it beside the others.
func Denylist(t testing.TB) string {
	t.Helper()
	denylistOnce.Do(func() {
		denylist = filepath.Join(dir, "denylist.wasm")
		if denylistErr = testkit.Denylist(denylist); denylistErr != nil {
			denylistErr = fmt.Errorf("build denylist.wasm: %w", denylistErr)
			return
		}
		denylistErr = compilePolicy(denylist)
	})
	if denylistErr != nil {
		t.Fatal(denylistErr)
	}
	return denylist
}

// LoopWasm is the path of a hostile policy module that spins when it sees
// environment variables, built by the first caller; without wat2wasm the
// test is skipped (it fails when CI is set).
func LoopWasm(t testing.TB) string {
	t.Helper()
	loopOnce.Do(func() {
		loopWasm = filepath.Join(dir, "loop.wasm")
		loopErr = testkit.Wat("plugins/policy/testdata/loop.wat", loopWasm)
	})
	switch {
	case errors.Is(loopErr, testkit.ErrNoWat2wasm):
		testkit.Missing(t, loopErr)
	case loopErr != nil:
		t.Fatal(loopErr)
	}
	return loopWasm
}

// PolicyOptions are the policy host options of every test host.
func PolicyOptions() policy.Options {
	return policy.Options{
		// Starting a Go policy instance takes well under the default 10 s, but
		// not always under -race on a loaded machine.
		StartTimeout: 30 * time.Second,
		CacheDir:     policyCache,
	}
}

// Main is the TestMain of a package that starts hosts: it builds the
// transport plugins (testkit.Plugins), then runs the tests (testkit.Main).
// It does not return.
func Main(m *testing.M) {
	testkit.Main(m, func(tmp string) error {
		dir = tmp
		policyCache = filepath.Join(dir, "wazero-cache")
		var err error
		if pluginDir, err = testkit.Plugins(); err != nil {
			return fmt.Errorf("build the transport plugins: %w", err)
		}
		return nil
	})
}

// compilePolicy loads the module at path once, so that its compiled code is
// in policyCache before any test's host loads it.
func compilePolicy(path string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	chain, err := policy.Load(ctx, []policy.ModuleConfig{{Path: path}}, PolicyOptions())
	if err != nil {
		return fmt.Errorf("compile %s: %w", path, err)
	}
	return chain.Close(ctx)
}

// ContextNetwork is the -context-network of the tests' hosts (Start):
// none, a network namespace of its own with loopback only. Most tests are
// not about a context's network, and under isolated, the host's default,
// each sandboxed context starts pasta, ~140 ms of CPU. A test about the
// network, or one that needs the default host, adds DefaultNetwork; a test
// that links in a transport of its own gives it ContextNetwork.
const ContextNetwork = subprocess.NetworkNone

// DefaultNetwork gives the host the default -context-network (isolated:
// pasta, outbound network), for tests about a context's network or whose
// checks count on the default. It must come first among Start's options:
// it makes Start's linked-in transport (InProcess) anew, and InProcess and
// OnDebianPython read the setting.
func DefaultNetwork(c *settings.Config) {
	delete(c.TransportSettings, subprocess.SettingContextNetwork)
	InProcess(c)
}

// InProcess runs the subprocess transport linked into the test binary.
func InProcess(c *settings.Config) {
	c.Transport = subprocess.New(subprocess.Options{Sandbox: subprocess.SandboxOptions{Writable: []string{c.DefaultCwd, c.TransportSettings[subprocess.SettingSandboxWritable]},
		Network: c.TransportSettings[subprocess.SettingContextNetwork]}})
}

// OnDebianPython runs the subprocess transport, linked in, on Debian's python3.
func OnDebianPython(c *settings.Config) {
	c.Transport = subprocess.New(subprocess.Options{Interpreters: map[string]string{"python": testkit.DebianPython},
		Sandbox: subprocess.SandboxOptions{Network: c.TransportSettings[subprocess.SettingContextNetwork]}})
}

// NeedSandbox skips a test that needs interpreters in sandboxes where bwrap
// cannot make them (it fails instead when CI is set).
func NeedSandbox(t testing.TB) {
	t.Helper()
	if on, why, _ := subprocess.New(subprocess.Options{}).Sandboxed(); !on {
		testkit.Missingf(t, "no sandbox for interpreters here: %s", why)
	}
}

// ViaPlugin runs the subprocess transport through the plugin boundary, as
// the kernelhost binary does: the real kernelhost-transport-subprocess,
// with its defaults but one: no python fork template (-python-preload=off),
// as the linked-in transport of InProcess has none. A template imports the
// data stack, about a CPU-second per host, and most of the hosts of these
// tests started one that no test looked at (their contexts were forked
// from it or not, as its preload raced their first request). A test about
// the template, or about what goes with the plugin, adds WithForkTemplate
// after ViaPlugin.
func ViaPlugin(c *settings.Config) {
	viaPlugin(c, "subprocess")
	c.SetTransportSetting("python-preload", "off")
}

// WithForkTemplate gives a ViaPlugin host the plugin's default
// -python-preload=auto back: a python fork template that preloads the data
// stack, from which new python contexts are forked once it is ready. For
// tests of the template and of what must go with the plugin (a killed or
// stopped plugin leaves no template behind either).
func WithForkTemplate(c *settings.Config) {
	c.SetTransportSetting("python-preload", "auto")
}

// WithSmallForkTemplate is WithForkTemplate with a template that preloads
// json alone: for tests of what goes with the template's process (a killed
// plugin's), to which the data stack's import, about 2 CPU-s a template on
// CI's machine, adds nothing.
func WithSmallForkTemplate(c *settings.Config) {
	c.SetTransportSetting("python-preload", "json")
}

// viaPlugin runs the transport named name through its plugin, with the
// plugin's defaults.
func viaPlugin(c *settings.Config, name string) {
	c.Transport = nil
	c.PluginDir = pluginDir
	c.TransportName = name
}

// EachTransport runs f once per way the host gets its transport: linked in
// and through the plugin boundary, side by side (each has a host of its
// own). f passes start's options to Start.
func EachTransport(t *testing.T, f func(t *testing.T, start func(...func(*settings.Config)) *Host)) {
	for _, mode := range []struct {
		name string
		set  func(*settings.Config)
	}{{"in-process", InProcess}, {"plugin", ViaPlugin}} {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			f(t, func(configure ...func(*settings.Config)) *Host {
				t.Helper()
				return Start(t, append([]func(*settings.Config){mode.set}, configure...)...)
			})
		})
	}
}

// Host is a host started in-process on a free port, with the real
// subprocess transport (linked in unless the test asks for the plugin), and
// an HTTP client of its own.
type Host struct {
	*server.Host
	t      testing.TB
	client *http.Client
	cwd    string // the default cwd
}

// Start starts a host for one test; it is shut down when the test ends.
func Start(t testing.TB, configure ...func(*settings.Config)) *Host {
	t.Helper()
	cwd := t.TempDir() // registered first, so removed after the host stopped
	cfg := settings.Config{
		Addr:          "127.0.0.1:0",
		DefaultCwd:    cwd,
		Logger:        slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		PolicyOptions: PolicyOptions(),
		// The test's temporary directories (cwd's parent holds them all)
		// are writable in its sandboxes: its code may wait for a file the
		// test makes there, or write one the test reads. The contexts'
		// network is ContextNetwork unless the test says DefaultNetwork.
		TransportSettings: map[string]string{subprocess.SettingSandboxWritable: filepath.Dir(cwd), subprocess.SettingContextNetwork: ContextNetwork},
	}
	InProcess(&cfg)
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
	th := &Host{Host: h, t: t, client: &http.Client{Transport: tr}, cwd: cfg.DefaultCwd}
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

// Attach is a Host for h, a host the test started (and shuts down) itself,
// whose default cwd is cwd.
func Attach(t testing.TB, h *server.Host, cwd string) *Host {
	return &Host{Host: h, t: t, client: &http.Client{}, cwd: cwd}
}

// Client is the host's HTTP client, for requests Do does not make.
func (h *Host) Client() *http.Client { return h.client }

// Cwd is the host's default cwd, a temporary directory of the test.
func (h *Host) Cwd() string { return h.cwd }

// requestGuard bounds one request of Do, so that a request the host never
// answers fails the test instead of hanging it. It is no measure of the host:
// it leaves room for the host's own recovery on a loaded machine, such as
// the Jupyter transport replacing a kernel that never came up (an ipykernel
// whose port was taken as it started hangs in its exit, and the server holds
// its websocket): judged after twice the transport's answer timeout (30 s),
// then a new kernel's start.
const requestGuard = 90 * time.Second

// Do sends one request and returns the status and the whole body.
func (h *Host) Do(method, path string, body string) (int, string) {
	h.t.Helper()
	status, _, text := h.DoWith(method, path, body, nil)
	return status, text
}

// DoWith is Do with extra request headers, returning the response's too.
func (h *Host) DoWith(method, path, body string, headers map[string]string) (int, http.Header, string) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), requestGuard)
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

// Line is one decoded NDJSON line of an /execute stream.
type Line map[string]any

// Type is the line's type ("stdout", "result", "end_of_execution", ...).
func (l Line) Type() string { s, _ := l["type"].(string); return s }

// Str is the line's string field k, "" when it has none.
func (l Line) Str(k string) string { s, _ := l[k].(string); return s }

// Run executes req (marshalled to JSON) and returns the stream's lines,
// checked against the framing rules. A non-200 answer fails the test.
func (h *Host) Run(req any) []Line {
	h.t.Helper()
	body, err := json.Marshal(req)
	if err != nil {
		h.t.Fatal(err)
	}
	status, text := h.Do("POST", "/execute", string(body))
	if status != http.StatusOK {
		h.t.Fatalf("POST /execute %s: status %d: %s", body, status, text)
	}
	return ParseStream(h.t, []byte(text))
}

// ParseStream decodes a finished stream and checks the framing
// rules of docs/api-contract.md §5.1: ASCII only, no blank lines, every line a JSON object with a type,
// end_of_execution last and only last.
func ParseStream(t testing.TB, raw []byte) []Line {
	t.Helper()
	if len(raw) == 0 || raw[len(raw)-1] != '\n' {
		t.Fatalf("stream does not end with a newline: %q", raw)
	}
	var lines []Line
	for i, l := range bytes.Split(raw[:len(raw)-1], []byte("\n")) {
		lines = append(lines, checkLine(t, i, l))
	}
	for i, l := range lines {
		if last := i == len(lines)-1; (l.Type() == "end_of_execution") != last {
			t.Fatalf("end_of_execution must be the last line and only the last: line %d of %d is %q", i, len(lines), l.Type())
		}
	}
	return lines
}

func checkLine(t testing.TB, i int, raw []byte) Line {
	t.Helper()
	if len(bytes.TrimSpace(raw)) == 0 {
		t.Fatalf("line %d is blank", i)
	}
	for _, c := range raw {
		if c >= 0x80 || c < 0x20 {
			t.Fatalf("line %d has a byte %#x that is not printable ASCII: %q", i, c, raw)
		}
	}
	var l Line
	if err := json.Unmarshal(raw, &l); err != nil {
		t.Fatalf("line %d is not a JSON object: %v: %q", i, err, raw)
	}
	if l.Type() == "" {
		t.Fatalf("line %d has no type: %q", i, raw)
	}
	return l
}

// Stream reads the lines of an execution while it runs (Host.Start).
type Stream struct {
	t    testing.TB
	resp *http.Response
	sc   *bufio.Scanner
	n    int
	size int // bytes read so far, newlines included
}

// Start starts an execution and returns a reader of its lines, for tests
// that act while it runs. Cancelling ctx drops the connection.
func (h *Host) Start(ctx context.Context, req any) *Stream {
	h.t.Helper()
	body, err := json.Marshal(req)
	if err != nil {
		h.t.Fatal(err)
	}
	s, _ := h.Open(ctx, "POST", "/execute", string(body))
	return s
}

// Open sends a request whose answer is a stream (status 200 required) and
// returns a reader of it with the response's X-Execution-Id.
func (h *Host) Open(ctx context.Context, method, path, body string) (*Stream, string) {
	h.t.Helper()
	r, err := http.NewRequestWithContext(ctx, method, h.URL()+path, strings.NewReader(body))
	if err != nil {
		h.t.Fatal(err)
	}
	r.Header.Set("Content-Type", "application/json")
	resp, err := h.client.Do(r)
	if err != nil {
		h.t.Fatalf("%s %s: %v", method, path, err)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		h.t.Fatalf("%s %s: status %d: %s", method, path, resp.StatusCode, b)
	}
	h.t.Cleanup(func() { resp.Body.Close() })
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	return &Stream{t: h.t, resp: resp, sc: sc}, resp.Header.Get("X-Execution-Id")
}

// Close drops the connection before the stream's end (the test's cleanup
// closes it too).
func (s *Stream) Close() error { return s.resp.Body.Close() }

// Scanner is the scanner Next reads from, to change its buffer.
func (s *Stream) Scanner() *bufio.Scanner { return s.sc }

// Size is the number of bytes read so far, newlines included.
func (s *Stream) Size() int { return s.size }

// Next returns the next line, or nil at the end of the body.
func (s *Stream) Next() Line {
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

// Until reads lines until one of type typ and returns it; it fails the test
// when the stream ends first.
func (s *Stream) Until(typ string) Line {
	s.t.Helper()
	for {
		l := s.Next()
		if l == nil {
			s.t.Fatalf("stream ended before a %q line", typ)
		}
		if l.Type() == typ {
			return l
		}
	}
}

// StdoutLine reads stdout lines until their text ends a line, and returns
// the text: ipykernel may send print's text and its newline as two messages.
func (s *Stream) StdoutLine() string {
	s.t.Helper()
	var b strings.Builder
	for !strings.HasSuffix(b.String(), "\n") {
		b.WriteString(s.Until("stdout").Str("text"))
	}
	return b.String()
}

// Rest reads the stream to its end and returns the remaining lines.
func (s *Stream) Rest() []Line {
	s.t.Helper()
	var out []Line
	for l := s.Next(); l != nil; l = s.Next() {
		out = append(out, l)
	}
	if len(out) == 0 || out[len(out)-1].Type() != "end_of_execution" {
		s.t.Fatalf("stream did not end with end_of_execution: %v", out)
	}
	return out
}

// OfType is the lines of type typ.
func OfType(lines []Line, typ string) []Line {
	var out []Line
	for _, l := range lines {
		if l.Type() == typ {
			out = append(out, l)
		}
	}
	return out
}

// Stdout is the text of the stdout lines, joined.
func Stdout(lines []Line) string {
	var b strings.Builder
	for _, l := range OfType(lines, "stdout") {
		b.WriteString(l.Str("text"))
	}
	return b.String()
}

// MainResult is the text of the main result, failing when there is none.
func MainResult(t testing.TB, lines []Line) string {
	t.Helper()
	for _, l := range OfType(lines, "result") {
		if l["is_main_result"] == true {
			return l.Str("text")
		}
	}
	t.Fatalf("no main result in %v", lines)
	return ""
}

// OnlyError returns the one error line, failing unless there is exactly one.
func OnlyError(t testing.TB, lines []Line) Line {
	t.Helper()
	errs := OfType(lines, "error")
	if len(errs) != 1 {
		t.Fatalf("want exactly one error line, got %d: %v", len(errs), lines)
	}
	return errs[0]
}

// NoError fails the test when there is an error line.
func NoError(t testing.TB, lines []Line) {
	t.Helper()
	if errs := OfType(lines, "error"); len(errs) > 0 {
		t.Fatalf("unexpected error line: %v", errs)
	}
}

// ContextInfo is a context as the contexts routes describe it.
type ContextInfo struct {
	ID       string `json:"id"`
	Language string `json:"language"`
	Cwd      string `json:"cwd"`
	Family   string `json:"family"`
}

// Contexts lists the host's contexts (GET /contexts).
func (h *Host) Contexts() []ContextInfo {
	h.t.Helper()
	status, body := h.Do("GET", "/contexts", "")
	if status != http.StatusOK {
		h.t.Fatalf("GET /contexts: %d %s", status, body)
	}
	var out []ContextInfo
	if err := json.Unmarshal([]byte(body), &out); err != nil {
		h.t.Fatalf("GET /contexts: %v: %s", err, body)
	}
	return out
}

// CreateContext creates a context from a POST /contexts body.
func (h *Host) CreateContext(body string) ContextInfo {
	h.t.Helper()
	status, text := h.Do("POST", "/contexts", body)
	if status != http.StatusOK {
		h.t.Fatalf("POST /contexts %s: %d %s", body, status, text)
	}
	var c ContextInfo
	if err := json.Unmarshal([]byte(text), &c); err != nil {
		h.t.Fatalf("POST /contexts: %v: %s", err, text)
	}
	return c
}

// DefaultID is the id of language's default context (listed first).
func (h *Host) DefaultID(language string) string {
	h.t.Helper()
	for _, c := range h.Contexts() {
		if c.Language == language {
			return c.ID
		}
	}
	h.t.Fatalf("no %s context listed", language)
	return ""
}

// RequireContextGone checks that every route naming context id answers 404
// "Context <id> not found", as after a delete.
func (h *Host) RequireContextGone(id string) {
	h.t.Helper()
	notFound := "Context " + id + " not found"
	for _, req := range []struct{ method, path, body string }{
		{"POST", "/execute", fmt.Sprintf(`{"code":"1","context_id":%q}`, id)},
		{"POST", "/contexts/" + id + "/restart", ""},
		{"POST", "/contexts/" + id + "/interrupt", ""},
		{"DELETE", "/contexts/" + id, ""},
	} {
		if status, body := h.Do(req.method, req.path, req.body); status != 404 || body != notFound {
			h.t.Errorf("%s %s after delete: %d %q, want 404 %q", req.method, req.path, status, body, notFound)
		}
	}
}

// Env is a getenv over m, for settings.Load.
func Env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}
