package server_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/kernelhost/kernelhost/hostcmd/internal/hosttest"
	"github.com/kernelhost/kernelhost/hostcmd/settings"
)

// browserRequest sends one request with the given headers (Host among
// them) and returns the status, the response headers and the body.
func browserRequest(t *testing.T, h *hosttest.Host, method, path, body string, headers map[string]string) (int, http.Header, string) {
	t.Helper()
	status, hdr, text := h.DoWith(method, path, body, headers)
	return status, hdr, text
}

// Any web page could run code on a default host (issue 11 item 1): cors()
// echoed every Origin with credentials allowed, /execute took a text/plain
// body (a "simple" request, no preflight) and the Host header was never
// checked (DNS rebinding). Now: no CORS unless an origin is allowed, a
// foreign Origin is refused, a Host that is not a loopback name or address
// or an allowed name is refused, and /execute wants application/json.
func TestBrowserDriveByIsRefused(t *testing.T) {
	t.Parallel()
	h := hosttest.Start(t)
	const code = `{"code":"1+1"}`

	t.Run("content type", func(t *testing.T) {
		for _, ct := range []string{"text/plain", "text/plain;charset=UTF-8", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", ""} {
			status, _, body := browserRequest(t, h, "POST", "/execute", code, map[string]string{"Content-Type": ct})
			if status != http.StatusUnsupportedMediaType || !strings.Contains(body, "application/json") {
				t.Errorf("Content-Type %q: %d %q, want 415 naming application/json", ct, status, body)
			}
		}
		// What the official SDKs send, and its spelling variants.
		for _, ct := range []string{"application/json", "application/json; charset=utf-8", "Application/JSON"} {
			status, _, body := browserRequest(t, h, "POST", "/execute", code, map[string]string{"Content-Type": ct})
			if status != 200 || hosttest.MainResult(t, hosttest.ParseStream(t, []byte(body))) != "2" {
				t.Errorf("Content-Type %q: %d %q, want 200", ct, status, body)
			}
		}
	})

	t.Run("foreign origin", func(t *testing.T) {
		for _, r := range [][3]string{
			{"POST", "/execute", code},
			{"GET", "/contexts", ""},
			{"POST", "/contexts/nope/restart", ""},
			{"OPTIONS", "/execute", ""},
		} {
			status, hdr, body := browserRequest(t, h, r[0], r[1], r[2], map[string]string{
				"Origin": "http://evil.test", "Access-Control-Request-Method": "POST"})
			if status != http.StatusForbidden || hdr.Get("Access-Control-Allow-Origin") != "" || hdr.Get("Access-Control-Allow-Credentials") != "" {
				t.Errorf("%s %s from http://evil.test: %d %v %q, want 403 without CORS headers", r[0], r[1], status, hdr, body)
			}
		}
		// Same origin (what a page served from the host itself would send).
		if status, _, body := browserRequest(t, h, "GET", "/contexts", "", map[string]string{"Origin": "http://" + h.Addr()}); status != 200 {
			t.Errorf("same origin: %d %q", status, body)
		}
	})

	t.Run("host", func(t *testing.T) {
		for _, host := range []string{"evil.test", "evil.test:49999", "localhost.evil.test", "10.1.2.3:49999", "e2b.app.evil.test"} {
			for _, path := range []string{"/execute", "/contexts", "/health"} {
				method, body := "GET", ""
				if path == "/execute" {
					method, body = "POST", code
				}
				status, _, text := browserRequest(t, h, method, path, body, map[string]string{"Host": host})
				if status != http.StatusForbidden || !strings.Contains(text, settings.EnvVar("allowed-hosts")) {
					t.Errorf("Host %s, %s: %d %q, want 403 naming the setting", host, path, status, text)
				}
			}
		}
		// Loopback names and addresses, and E2B's sandbox names (what the
		// SDKs send: localhost:49999 with E2B_DEBUG, 49999-<sandbox>.e2b.app
		// through E2B's proxy).
		for _, host := range []string{"localhost:49999", "LOCALHOST", "127.0.0.1", "127.8.9.1:80", "[::1]:49999", "kernel.localhost", "49999-i0abc.e2b.app", "49999-i0abc.e2b.dev:443"} {
			if status, _, text := browserRequest(t, h, "GET", "/health", "", map[string]string{"Host": host}); status != 200 {
				t.Errorf("Host %s: %d %q, want 200", host, status, text)
			}
		}
	})
}

// Origins and host names the operator allows get through: an allowed
// origin gets CORS (its own origin echoed, never credentials), "*" any.
func TestBrowserAllowedOriginsAndHosts(t *testing.T) {
	t.Parallel()
	h := hosttest.Start(t, func(c *settings.Config) {
		c.AllowedOrigins = []string{"http://app.test:3000"}
		c.AllowedHosts = []string{"kh.internal", "*.sandboxes.test"}
	})
	status, hdr, body := browserRequest(t, h, "OPTIONS", "/execute", "", map[string]string{
		"Origin": "http://app.test:3000", "Access-Control-Request-Method": "POST",
		"Access-Control-Request-Headers": "content-type,x-access-token"})
	if status/100 != 2 || hdr.Get("Access-Control-Allow-Origin") != "http://app.test:3000" ||
		!strings.Contains(strings.ToLower(hdr.Get("Access-Control-Allow-Headers")), "x-access-token") ||
		hdr.Get("Access-Control-Allow-Credentials") != "" {
		t.Fatalf("preflight from an allowed origin: %d %v %q", status, hdr, body)
	}
	status, hdr, body = browserRequest(t, h, "POST", "/execute", `{"code":"1+1"}`, map[string]string{"Origin": "http://app.test:3000"})
	if status != 200 || hdr.Get("Access-Control-Allow-Origin") != "http://app.test:3000" || !strings.Contains(hdr.Get("Vary"), "Origin") ||
		!strings.Contains(hdr.Get("Access-Control-Expose-Headers"), "X-Execution-Id") {
		t.Fatalf("execute from an allowed origin: %d %v %q", status, hdr, body)
	}
	for _, origin := range []string{"http://app.test", "https://app.test:3000", "null"} {
		if status, _, _ := browserRequest(t, h, "GET", "/contexts", "", map[string]string{"Origin": origin}); status != http.StatusForbidden {
			t.Errorf("Origin %s: %d, want 403", origin, status)
		}
	}
	for host, want := range map[string]int{"kh.internal:8080": 200, "a.sandboxes.test": 200, "sandboxes.test": 403, "49999-x.e2b.app": 403, "localhost": 200} {
		if status, _, _ := browserRequest(t, h, "GET", "/health", "", map[string]string{"Host": host}); status != want {
			t.Errorf("Host %s: %d, want %d", host, status, want)
		}
	}

	any := hosttest.Start(t, func(c *settings.Config) { c.AllowedOrigins = []string{"*"}; c.AllowedHosts = []string{"*"} })
	status, hdr, _ = browserRequest(t, any, "GET", "/contexts", "", map[string]string{"Origin": "http://anywhere.test", "Host": "anywhere.test"})
	if status != 200 || hdr.Get("Access-Control-Allow-Origin") != "*" {
		t.Fatalf(`allowed origins and hosts "*": %d %v`, status, hdr)
	}
}
