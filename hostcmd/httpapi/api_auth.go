package httpapi

import (
	"crypto/subtle"
	"net/http"
	"strings"

	"github.com/kernelhost/kernelhost/core"
	"github.com/kernelhost/kernelhost/hostcmd/settings"
)

// authorize requires the access token, when one is configured, on every
// route but /health (readiness probes carry no credentials), or with
// settings.ScopeExecute only on the execution routes: /execute, /executions/...
// (an execution's output and its live stream are as private as the code
// that made them) and /mcp (which runs code). CORS preflights never carry credentials and are answered
// by cors before this. The comparison takes constant time.
//
// "Authorization: Bearer <token>" works on every route. On /execute,
// "X-Access-Token: <token>" works too: it is the one credential the official
// SDKs send (their envd access token, only on /execute; docs/api-contract.md §1.1),
// so a host whose token is the sandbox's envd token and whose scope is
// execute serves the SDKs unchanged. The sandbox API's paths are treated
// as /execute is (sandboxapi.go).
func (a *API) authorize(next http.Handler) http.Handler {
	if len(a.token) == 0 {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The sandbox API (its own listener, or its paths here) runs
		// commands and reads files: it takes the token in either scope,
		// and as X-Access-Token too, the header its SDK calls send.
		isExecute := r.URL.Path == "/execute" || a.isSandboxAPI(r.URL.Path)
		isExecution := isExecute || strings.HasPrefix(r.URL.Path, "/executions/") || r.URL.Path == "/mcp"
		if r.URL.Path == "/health" || (a.tokenScope == settings.ScopeExecute && !isExecution) {
			next.ServeHTTP(w, r)
			return
		}
		if a.tokenMatches(bearer(r.Header.Get("Authorization"))) ||
			(isExecute && a.tokenMatches(r.Header.Get("X-Access-Token"))) {
			next.ServeHTTP(w, r)
			return
		}
		// The log names the route, never the presented value.
		a.log.InfoContext(r.Context(), "request refused: missing or wrong access token", "method", r.Method, "path", core.Clip(r.URL.Path), "remote_addr", r.RemoteAddr)
		w.Header().Set("WWW-Authenticate", `Bearer realm="kernelhost"`)
		writeText(w, http.StatusUnauthorized, "Unauthorized: send the host's access token as \"Authorization: Bearer <token>\" (setting "+settings.EnvVar("access-token")+")")
	})
}

// isSandboxAPI says whether a path is the sandbox API's (on its own
// listener or the code API's), when the sandbox API is on.
func (a *API) isSandboxAPI(p string) bool {
	return a.sandbox != nil && IsSandboxAPIPath(p)
}

// tokenMatches compares in constant time (for equal lengths; the length of
// the token is not a secret worth a timing-safe comparison of lengths).
func (a *API) tokenMatches(got string) bool {
	return got != "" && subtle.ConstantTimeCompare([]byte(got), a.token) == 1
}

// bearer returns the credentials of an "Authorization: Bearer x" header
// (the scheme is case-insensitive, RFC 7235), or "".
func bearer(h string) string {
	scheme, cred, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimSpace(cred)
}

// IsSandboxAPIPath says whether a request to the code API's listener is the
// sandbox API's (its paths do not collide with the code API's; /health
// stays the code API's).
func IsSandboxAPIPath(p string) bool {
	return p == "/files" || p == "/envs" ||
		strings.HasPrefix(p, "/filesystem.Filesystem/") || strings.HasPrefix(p, "/process.Process/")
}
