package server_test

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kernelhost/kernelhost/hostcmd/internal/hosttest"
	"github.com/kernelhost/kernelhost/hostcmd/settings"
)

// TestSandboxAPIServedBesideTheAPI: the sandbox API on its own listener and
// under its paths on the API's, behind the same token (as the SDKs send it,
// X-Access-Token, or as Bearer) and Host check; its files are the default
// context's (one machine, one view); /metrics counts its bytes.
func TestSandboxAPIServedBesideTheAPI(t *testing.T) {
	hosttest.NeedSandbox(t)
	h := hosttest.Start(t, func(c *settings.Config) {
		c.SandboxAPIAddr = "127.0.0.1:0"
		c.AccessToken = "tok"
	})
	sandboxURL := "http://" + h.SandboxAPIAddr()
	send := func(method, url, body string, headers map[string]string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, url, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range headers {
			if k == "Host" {
				req.Host = v
				continue
			}
			req.Header.Set(k, v)
		}
		resp, err := h.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	xToken := map[string]string{"X-Access-Token": "tok", "Content-Type": "application/octet-stream"}
	if code, _ := send("GET", sandboxURL+"/health", "", nil); code != 204 {
		t.Errorf("/health without a token: %d, want 204", code)
	}
	for _, base := range []string{sandboxURL, h.URL()} {
		for name, headers := range map[string]map[string]string{
			"no token":    nil,
			"wrong token": {"X-Access-Token": "nope"},
			"basic auth":  {"Authorization": "Basic dXNlcjo="},
		} {
			if code, body := send("POST", base+"/files?path=x.txt", "x", headers); code != 401 {
				t.Errorf("%s, upload with %s: %d %s, want 401", base, name, code, body)
			}
			if code, _ := send("POST", base+"/process.Process/List", "{}", headers); code != 401 {
				t.Errorf("%s, process List with %s: %d, want 401", base, name, code)
			}
		}
		if code, _ := send("GET", base+"/files?path=x.txt", "", map[string]string{"X-Access-Token": "tok", "Host": "evil.example"}); code != 403 {
			t.Errorf("%s: a foreign Host got %d, want 403", base, code)
		}
	}
	if code, body := send("POST", sandboxURL+"/files?path=data.csv", "a,b\n1,2\n", xToken); code != 200 {
		t.Fatalf("upload: %d %s", code, body)
	}
	if b, err := os.ReadFile(filepath.Join(h.Cwd(), "data.csv")); err != nil || string(b) != "a,b\n1,2\n" {
		t.Fatalf("the upload is not in the default cwd: %q %v", b, err)
	}
	bearer := map[string]string{"Authorization": "Bearer tok", "Content-Type": "application/json"}
	_, out := send("POST", h.URL()+"/execute", `{"code": "print(open('data.csv').read().count(','))"}`, bearer)
	if got := hosttest.Stdout(hosttest.ParseStream(t, []byte(out))); got != "2\n" {
		t.Errorf("the default context reads %q, want 2", got)
	}
	send("POST", h.URL()+"/execute", `{"code": "open('out.txt', 'w').write('from python')"}`, bearer)
	if code, body := send("GET", h.URL()+"/files?path=out.txt", "", map[string]string{"Authorization": "Bearer tok"}); code != 200 || body != "from python" {
		t.Errorf("download on the API's address: %d %q", code, body)
	}
	_, metrics := send("GET", h.URL()+"/metrics", "", map[string]string{"Authorization": "Bearer tok"})
	for _, want := range []string{`kernelhost_sandbox_file_bytes_total{direction="upload"} 8`, `kernelhost_sandbox_file_bytes_total{direction="download"} 11`, "kernelhost_sandbox_commands_total 0"} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics has no %q", want)
		}
	}
}

// TestSandboxAPIAddrSetting: `kernelhost serve` listens on 49983 unless told
// otherwise; "off" turns it off; a settings.Config built in code leaves it off.
func TestSandboxAPIAddrSetting(t *testing.T) {
	for args, want := range map[string]string{
		"":                           settings.DefaultSandboxAPIAddr,
		"-sandbox-api-addr=off":      "",
		"-sandbox-api-addr=[::1]:81": "[::1]:81",
	} {
		var argv []string
		if args != "" {
			argv = []string{args}
		}
		c, err := settings.Load("kernelhost", argv, func(string) string { return "" }, io.Discard)
		if err != nil || c.SandboxAPIAddr != want {
			t.Errorf("settings.Load(%q): SandboxAPIAddr %q (%v), want %q", args, c.SandboxAPIAddr, err, want)
		}
	}
}
