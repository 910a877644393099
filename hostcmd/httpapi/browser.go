package httpapi

import (
	"fmt"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/kernelhost/kernelhost/core"
	"github.com/kernelhost/kernelhost/hostcmd/settings"
)

// What a web page may do with the host, as Jupyter Server decides it
// (docs/RATIONALE.md, "Browsers"): a page's own requests reach a host on
// 127.0.0.1 just as well as the SDKs do, so without these checks any page
// the user opened could run code.
//
//   - Host: only a loopback name or address, or a name of AllowedHosts, may
//     be what the client thinks it is talking to. A DNS-rebinding page talks
//     to 127.0.0.1 under its own name, and is refused (Jupyter's
//     local_hostnames / allow_remote_access).
//   - Origin: a request a browser sent for a page of another origin is
//     refused unless AllowedOrigins lists that origin, which then gets CORS
//     (Jupyter's allow_origin). Without the list there is no CORS at all.
//   - /execute wants Content-Type: application/json, so a page cannot send
//     it as a "simple" request (text/plain, forms) that skips the preflight
//     (requireJSON).
//
// The SDKs outside a browser send no Origin, and Host localhost:49999
// (E2B_DEBUG), 127.0.0.1:PORT (E2B_SANDBOX_URL) or 49999-<sandbox>.e2b.app
// through E2B's proxy: all allowed by default.

// browserGuard applies the Host and Origin checks and answers CORS.
type browserGuard struct {
	hosts     []string        // "name" or "*.suffix"
	anyHost   bool            // "*" among them
	origins   map[string]bool // "scheme://host[:port]", lower case
	anyOrigin bool            // "*": every origin, CORS without credentials
	log       *slog.Logger
}

func newBrowserGuard(hosts, origins []string, log *slog.Logger) *browserGuard {
	g := &browserGuard{origins: map[string]bool{}, log: log}
	for _, h := range hosts {
		h = strings.ToLower(h)
		g.anyHost = g.anyHost || h == "*"
		g.hosts = append(g.hosts, h)
	}
	for _, o := range origins {
		o = strings.ToLower(strings.TrimSuffix(o, "/"))
		g.anyOrigin = g.anyOrigin || o == "*"
		g.origins[o] = true
	}
	return g
}

// corsMethods are the API's methods; corsExposed the response headers a
// page may read (the execution id for a re-attach, the request id, the MCP
// session's id that a browser MCP client sends back).
const (
	corsMethods = "DELETE, GET, OPTIONS, POST"
	corsExposed = executionIDHeader + ", " + requestIDHeader + ", " + mcpSessionIDHeader
)

func (g *browserGuard) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !g.hostAllowed(r.Host) {
			g.log.InfoContext(r.Context(), "request refused: Host not allowed", "host", core.Clip(r.Host), "path", core.Clip(r.URL.Path), "remote_addr", r.RemoteAddr)
			writeText(w, http.StatusForbidden, fmt.Sprintf("Forbidden: Host %s is neither a loopback name or address nor allowed (setting %s)", core.Quote(r.Host), settings.EnvVar("allowed-hosts")))
			return
		}
		origin := r.Header.Get("Origin")
		if origin == "" { // not a browser's cross-origin request
			next.ServeHTTP(w, r)
			return
		}
		if !g.originAllowed(origin) {
			if sameOrigin(origin, r.Host) {
				next.ServeHTTP(w, r)
				return
			}
			g.log.InfoContext(r.Context(), "request refused: cross-origin", "origin", core.Clip(origin), "path", core.Clip(r.URL.Path), "remote_addr", r.RemoteAddr)
			writeText(w, http.StatusForbidden, fmt.Sprintf("Forbidden: cross-origin request from %s (setting %s lists the origins allowed)", core.Quote(origin), settings.EnvVar("allowed-origins")))
			return
		}
		h := w.Header()
		if g.anyOrigin {
			h.Set("Access-Control-Allow-Origin", "*")
		} else {
			h.Set("Access-Control-Allow-Origin", origin)
			h.Add("Vary", "Origin")
		}
		// No Access-Control-Allow-Credentials: the host uses no cookies, and
		// a page sends the token as a header it sets itself.
		if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
			h.Set("Access-Control-Allow-Methods", corsMethods)
			if req := r.Header.Get("Access-Control-Request-Headers"); req != "" {
				h.Set("Access-Control-Allow-Headers", req)
			}
			h.Set("Access-Control-Max-Age", "600")
			w.WriteHeader(http.StatusOK)
			return
		}
		h.Set("Access-Control-Expose-Headers", corsExposed)
		next.ServeHTTP(w, r)
	})
}

// hostAllowed: a loopback address, localhost or a name under .localhost
// (RFC 6761: they resolve to loopback and never through DNS), or a name of
// the allowed list.
func (g *browserGuard) hostAllowed(hostport string) bool {
	if g.anyHost {
		return true
	}
	name := hostName(hostport)
	if ip := net.ParseIP(name); ip != nil {
		return ip.IsLoopback()
	}
	if name == "localhost" || strings.HasSuffix(name, ".localhost") {
		return true
	}
	for _, h := range g.hosts {
		if suffix, ok := strings.CutPrefix(h, "*"); ok && strings.HasPrefix(suffix, ".") {
			if strings.HasSuffix(name, suffix) && len(name) > len(suffix) {
				return true
			}
		} else if name == h {
			return true
		}
	}
	return false
}

// hostName is the host of a Host header without its port and brackets, in
// lower case and without a final dot: "[::1]:80" → "::1".
func hostName(hostport string) string {
	h := hostport
	if host, _, err := net.SplitHostPort(hostport); err == nil {
		h = host
	}
	h = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
	return strings.TrimSuffix(strings.ToLower(h), ".")
}

func (g *browserGuard) originAllowed(origin string) bool {
	return g.anyOrigin || g.origins[strings.ToLower(origin)]
}

// sameOrigin: the page that sent the request was served from this very host
// (Origin's host and port are those of the Host header), as Jupyter allows.
func sameOrigin(origin, host string) bool {
	u, err := url.Parse(origin)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "" && strings.EqualFold(u.Host, host)
}

// requireJSON answers 415 unless the request's Content-Type is
// application/json (parameters such as charset allowed): what the official
// SDKs send on /execute, and what no page can send cross-origin without a
// preflight.
func requireJSON(w http.ResponseWriter, r *http.Request) bool {
	ct := r.Header.Get("Content-Type")
	if mt, _, err := mime.ParseMediaType(ct); err == nil && mt == "application/json" {
		return true
	}
	writeText(w, http.StatusUnsupportedMediaType, fmt.Sprintf("Unsupported Content-Type %s: send the JSON body with Content-Type: application/json", core.Quote(ct)))
	return false
}
