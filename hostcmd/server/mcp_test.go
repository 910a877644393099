package server_test

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/kernelhost/kernelhost/hostcmd/internal/hosttest"
	"github.com/kernelhost/kernelhost/hostcmd/mcpserver/mcptest"
	"github.com/kernelhost/kernelhost/hostcmd/settings"
	"github.com/kernelhost/kernelhost/internal/testkit"
)

// /mcp through the Go SDK's client over streamable HTTP. The TypeScript
// SDK's client does the same in hostcmd/sdktest/sdk-mcp.test.mjs, and
// `kernelhost mcp` (stdio) is tested in hostcmd/mcp_test.go.

const mcpToken = "mcp-test-token"

func withToken(c *settings.Config) { c.AccessToken = mcpToken }

// headerTransport adds headers (and a Host) to every request of an MCP
// client, on connections of its own that cut closes.
type headerTransport struct {
	headers map[string]string
	host    string
	tr      *http.Transport

	mu    sync.Mutex
	conns []net.Conn
}

func newHeaderTransport(headers map[string]string, host string) *headerTransport {
	ht := &headerTransport{headers: headers, host: host}
	ht.tr = &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err == nil {
			ht.mu.Lock()
			ht.conns = append(ht.conns, c)
			ht.mu.Unlock()
		}
		return c, err
	}}
	return ht
}

func (ht *headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range ht.headers {
		r.Header.Set(k, v)
	}
	if ht.host != "" {
		r.Host = ht.host
	}
	return ht.tr.RoundTrip(r)
}

// cut closes every connection: the client vanished (no cancellation, no
// DELETE).
func (ht *headerTransport) cut() {
	ht.mu.Lock()
	defer ht.mu.Unlock()
	for _, c := range ht.conns {
		_ = c.Close()
	}
}

// connectMCP opens a session of a mcptest client on h's /mcp with headers.
func connectMCP(t testing.TB, h *hosttest.Host, headers map[string]string, host string) (*mcp.ClientSession, <-chan string, error) {
	s, progress, _, err := connectMCPVia(t, h, newHeaderTransport(headers, host))
	return s, progress, err
}

func connectMCPVia(t testing.TB, h *hosttest.Host, ht *headerTransport) (*mcp.ClientSession, <-chan string, *headerTransport, error) {
	t.Helper()
	client, progress := mcptest.NewClient()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := client.Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint:   h.URL() + "/mcp",
		HTTPClient: &http.Client{Transport: ht},
		MaxRetries: -1,
	}, nil)
	if err == nil {
		t.Cleanup(func() { _ = s.Close(); ht.tr.CloseIdleConnections() })
	}
	return s, progress, ht, err
}

func TestMCPOverHTTP(t *testing.T) {
	t.Parallel()
	testkit.NeedPythonModules(t, testkit.DebianPython, "matplotlib")
	testkit.NeedCommand(t, "node", "nodejs")
	testkit.NeedCommand(t, "Rscript", "r-base-core")
	h := hosttest.Start(t, hosttest.OnDebianPython, withToken)
	s, progress, err := connectMCP(t, h, map[string]string{"Authorization": "Bearer " + mcpToken}, "")
	if err != nil {
		t.Fatal(err)
	}
	mcptest.Tools(t, s, progress)
	checkToolLanguages(t, s, h.Engine.Transport().Info().Languages)
}

// checkToolLanguages checks that the tools that take a language, and the
// server's instructions, name the languages the host's transport runs.
func checkToolLanguages(t *testing.T, s *mcp.ClientSession, languages []string) {
	t.Helper()
	if len(languages) < 3 {
		t.Fatalf("the transport lists %v: too few to tell a list from a word", languages)
	}
	list := strings.Join(languages[:len(languages)-1], ", ") + " or " + languages[len(languages)-1]
	tools, err := s.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range tools.Tools {
		if tool.Name != "run_code" && tool.Name != "create_context" {
			continue
		}
		b, _ := json.Marshal(tool.InputSchema)
		var schema struct {
			Properties map[string]struct{ Description string } `json:"properties"`
		}
		if err := json.Unmarshal(b, &schema); err != nil {
			t.Fatal(err)
		}
		if d := schema.Properties["language"].Description; !strings.HasSuffix(d, ": "+list) {
			t.Errorf("%s's language is described as %q, want it to end with the transport's languages, %s", tool.Name, d, list)
		}
	}
	and := strings.Replace(list, " or ", " and ", 1)
	if in := s.InitializeResult().Instructions; !strings.Contains(in, and) {
		t.Errorf("the instructions %q do not name the transport's languages, %s", in, and)
	}
}

func TestMCPRefusals(t *testing.T) {
	t.Parallel()
	h := hosttest.Start(t, withToken)
	for name, c := range map[string]struct {
		headers map[string]string
		host    string
		want    string
	}{
		"no token":       {nil, "", "401"},
		"wrong token":    {map[string]string{"Authorization": "Bearer wrong"}, "", "401"},
		"foreign origin": {map[string]string{"Authorization": "Bearer " + mcpToken, "Origin": "https://evil.example"}, "", "403"},
		"foreign host":   {map[string]string{"Authorization": "Bearer " + mcpToken}, "evil.example:80", "403"},
	} {
		t.Run(name, func(t *testing.T) {
			_, _, err := connectMCP(t, h, c.headers, c.host)
			if err == nil || !strings.Contains(err.Error(), c.want) && !strings.Contains(err.Error(), http.StatusText(map[string]int{"401": 401, "403": 403}[c.want])) {
				t.Fatalf("connect: %v, want a refusal %s", err, c.want)
			}
		})
	}
	// The same request with the token, Host and no Origin is served.
	if _, _, err := connectMCP(t, h, map[string]string{"Authorization": "Bearer " + mcpToken}, ""); err != nil {
		t.Fatal(err)
	}
	// Scope execute, which leaves /contexts open, still guards /mcp: it
	// runs code.
	scoped := hosttest.Start(t, withToken, func(c *settings.Config) { c.AccessTokenScope = settings.ScopeExecute })
	if _, _, err := connectMCP(t, scoped, nil, ""); err == nil || !strings.Contains(err.Error(), "Unauthorized") && !strings.Contains(err.Error(), "401") {
		t.Fatalf("scope execute, no token: %v, want 401", err)
	}
}

// A client that goes away in the middle of a call: the host cancels the
// call for it (the code is interrupted), and the context serves the next
// client with its state.
func TestMCPClientLeavesMidRun(t *testing.T) {
	t.Parallel()
	h := hosttest.Start(t)
	first, progress, conns, err := connectMCPVia(t, h, newHeaderTransport(nil, ""))
	if err != nil {
		t.Fatal(err)
	}
	mcptest.Run(t, first, map[string]any{"code": "survivor = 'still here'"})
	_, done := mcptest.StartSpinning(t, first, progress)
	// The client vanishes: its connections close, without a cancellation
	// or a DELETE.
	conns.cut()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("the call did not end with its connection")
	}
	second, _, err := connectMCP(t, h, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	res := mcptest.Run(t, second, map[string]any{"code": "survivor"})
	if !strings.Contains(mcptest.Texts(res), "still here") {
		t.Fatalf("the context lost its state: %s", mcptest.Texts(res))
	}
}
