package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"github.com/kernelhost/kernelhost/docs"
	"github.com/kernelhost/kernelhost/hostcmd/httpapi"
	"github.com/kernelhost/kernelhost/hostcmd/internal/hosttest"
	"github.com/kernelhost/kernelhost/hostcmd/settings"
	"github.com/kernelhost/kernelhost/transports/subprocess"
)

// The route table of api.go and docs/openapi.json describe the same API:
// every registered route is documented and every documented operation is
// registered (path parameters compared by name).
func TestRoutesMatchOpenAPI(t *testing.T) {
	t.Parallel()
	d := loadAPIDoc(t)
	registered := make(map[string]bool)
	for _, r := range httpapi.RouteTable() {
		registered[openAPIPath(r)] = true
	}
	documented := make(map[string]bool)
	for path, item := range d.doc.Paths.Map() {
		for method := range item.Operations() {
			documented[method+" "+path] = true
		}
	}
	for _, r := range slices.Sorted(maps.Keys(registered)) {
		if !documented[r] {
			t.Errorf("%s is registered (routes in hostcmd/httpapi/api.go) but not described in docs/openapi.json", r)
		}
	}
	for _, r := range slices.Sorted(maps.Keys(documented)) {
		if !registered[r] {
			t.Errorf("%s is described in docs/openapi.json but not registered (routes in hostcmd/httpapi/api.go)", r)
		}
	}
}

// openAPIPath turns a ServeMux route ("GET /a/{id}") into OpenAPI's path
// syntax: a wildcard {name...} is {name}, the end anchor {$} is dropped.
func openAPIPath(route string) string {
	return strings.ReplaceAll(strings.ReplaceAll(route, "...}", "}"), "{$}", "")
}

// Real traffic on a real host (subprocess transport, a real policy module)
// matches the document: every response's status, headers and body, every
// line of every /execute stream, and the document refuses a request exactly
// when the host refuses it for its shape (422).
func TestOpenAPIMatchesTraffic(t *testing.T) {
	t.Parallel()
	const limit = 64 << 10
	h := hosttest.Start(t, func(c *settings.Config) {
		c.MaxBodyBytes = limit
		c.Keepalive = 100 * time.Millisecond // so that a short sleep shows keepalive lines
		c.Policies = hosttest.Denylist(t)    // refuses LD_PRELOAD: a 403
	})
	c := newConformance(t, h, "")

	t.Run("health", func(t *testing.T) {
		c.exchange(t, call{"GET", "/health", "", nil, 200})
	})
	t.Run("openapi.json is the embedded document", func(t *testing.T) {
		if body, _ := c.exchange(t, call{"GET", "/openapi.json", "", nil, 200}); string(body) != docs.OpenAPI() {
			t.Fatal("GET /openapi.json served something else than docs/openapi.json")
		}
	})

	rich := `class Rich:
    def _repr_html_(self): return "<b>rich</b>"
    def _repr_markdown_(self): return "**rich**"
    def _repr_latex_(self): return r"$\text{rich}$"
    def _repr_json_(self): return {"a": [1, 2.0, None]}
    def _repr_svg_(self): return "<svg xmlns='http://www.w3.org/2000/svg'/>"
    def _repr_png_(self): return b"\x89PNG\r\n\x1a\n"
    def _repr_javascript_(self): return "void 0"
display({"text/plain": "custom", "application/vnd.kernelhost.test+json": {"k": None}}, raw=True)
Rich()`
	for _, tc := range []struct{ name, path, body string }{
		{"stdout and stderr", "/execute", `{"code":"import sys\nprint('out')\nprint('err', file=sys.stderr)"}`},
		{"python SDK shape", "/execute?source=ci", `{"code":"1+1","context_id":null,"language":null,"env_vars":null}`},
		{"rich results", "/execute", jsonObject("code", rich)},
		{"raises", "/execute", `{"code":"raise ValueError('boom')"}`},
		{"bash", "/execute", `{"code":"echo hi; echo oops >&2","language":"bash"}`},
		{"env vars", "/execute", `{"code":"import os; os.environ['KH_X']","env_vars":{"KH_X":"v\u00e9"}}`},
		{"keepalive", "/execute", `{"code":"import time; time.sleep(0.5)"}`},
		{"execution timeout", "/execute", `{"code":"import time; time.sleep(30)","timeout":0.3}`},
		{"largest timeout", "/execute", fmt.Sprintf(`{"code":"1","timeout":%.0f}`, httpapi.MaxTimeoutSeconds)},
		{"unknown field", "/execute", `{"code":"1","future_field":{"x":[1]}}`},
	} {
		t.Run("execute "+tc.name, func(t *testing.T) {
			c.exchange(t, call{"POST", tc.path, tc.body, nil, 200})
		})
	}

	for _, tc := range []struct {
		name, path, body string
		status           int
	}{
		{"malformed JSON", "/execute", `{"code":`, 422},
		{"not an object", "/execute", `["1"]`, 422},
		{"no code", "/execute", `{}`, 422},
		{"null code", "/execute", `{"code":null}`, 422},
		{"code not a string", "/execute", `{"code":1}`, 422},
		{"context_id not a string", "/execute", `{"code":"1","context_id":5}`, 422},
		{"env vars not an object", "/execute", `{"code":"1","env_vars":[]}`, 422},
		{"env value not a string", "/execute", `{"code":"1","env_vars":{"A":1}}`, 422},
		{"env value null", "/execute", `{"code":"1","env_vars":{"A":null}}`, 422},
		{"negative timeout", "/execute", `{"code":"1","timeout":-1}`, 422},
		{"timeout not a number", "/execute", `{"code":"1","timeout":"5"}`, 422},
		{"timeout too large", "/execute", fmt.Sprintf(`{"code":"1","timeout":%.0f}`, httpapi.MaxTimeoutSeconds+1), 422},
		{"context_id and language", "/execute", `{"code":"1","context_id":"x","language":"python"}`, 400},
		{"invalid env key", "/execute", `{"code":"1","env_vars":{"A-B":"x"}}`, 400},
		{"policy refuses", "/execute", `{"code":"1","env_vars":{"LD_PRELOAD":"x.so"}}`, 403},
		{"unknown context", "/execute", `{"code":"1","context_id":"nope"}`, 404},
		{"oversized body", "/execute", jsonObject("code", strings.Repeat("x", limit)), 413},
		{"context: malformed JSON", "/contexts", `{"language":`, 422},
		{"context: cwd not a string", "/contexts", `{"cwd":1}`, 422},
		{"context: not a directory", "/contexts", `{"cwd":"/no/such/kh-dir"}`, 400},
		{"context: unknown language", "/contexts", `{"language":"cobol"}`, 400},
		{"context: oversized body", "/contexts", jsonObject("cwd", strings.Repeat("x", limit)), 413},
	} {
		t.Run("refused "+tc.name, func(t *testing.T) {
			c.exchange(t, call{"POST", tc.path, tc.body, nil, tc.status})
		})
	}
	// The browser checks (browser.go): a form-typed body, a foreign Origin.
	c.exchange(t, call{"POST", "/execute", `{"code":"1"}`, http.Header{"Content-Type": {"text/plain"}}, 415})
	for _, r := range [][2]string{{"POST", "/execute"}, {"GET", "/contexts"}, {"POST", "/contexts"}, {"DELETE", "/contexts/nope"}} {
		c.exchange(t, call{r[0], r[1], `{"code":"1"}`, http.Header{"Origin": {"http://evil.test"}}, 403})
	}

	t.Run("contexts", func(t *testing.T) {
		c.exchange(t, call{"GET", "/contexts", "", nil, 200})
		var ids []string
		for _, body := range []string{"", `{}`, `{"language":"python","cwd":null,"future_field":1}`} {
			_, _, created := c.exchangeJSON(t, call{"POST", "/contexts", body, nil, 200})
			ids = append(ids, created["id"].(string))
		}
		c.exchange(t, call{"POST", "/contexts/" + ids[0] + "/interrupt", "", nil, 200})
		c.exchange(t, call{"POST", "/contexts/" + ids[0] + "/restart", "", nil, 200})
		// A fork: of python, where interpreters are not sandboxed (this
		// host has no fork template, whose contexts alone can be copied in
		// a sandbox); never of bash.
		forked := http.StatusOK
		if sandboxed, _, _ := h.Engine.Transport().(*subprocess.Transport).Sandboxed(); sandboxed {
			forked = http.StatusNotImplemented
		}
		c.exchange(t, call{"POST", "/execute", `{"code":"x = 1","context_id":"` + ids[1] + `"}`, nil, 200})
		if forked == http.StatusOK {
			_, _, fork := c.exchangeJSON(t, call{"POST", "/contexts/" + ids[1] + "/fork", "", nil, forked})
			ids = append(ids, fork["id"].(string))
		} else {
			c.exchange(t, call{"POST", "/contexts/" + ids[1] + "/fork", "", nil, forked})
		}
		_, _, bash := c.exchangeJSON(t, call{"POST", "/contexts", `{"language":"bash"}`, nil, 200})
		ids = append(ids, bash["id"].(string))
		c.exchange(t, call{"POST", "/contexts/" + bash["id"].(string) + "/fork", "", nil, 501})
		c.exchange(t, call{"POST", "/contexts/nope/fork", "", nil, 404})
		for _, id := range ids {
			c.exchange(t, call{"DELETE", "/contexts/" + id, "", nil, 200})
			c.exchange(t, call{"DELETE", "/contexts/" + id, "", nil, 404})
		}
		c.exchange(t, call{"POST", "/contexts/nope/restart", "", nil, 404})
		c.exchange(t, call{"POST", "/contexts/nope/interrupt", "", nil, 404})
	})

	t.Run("executions", func(t *testing.T) {
		c.exchange(t, call{"POST", "/execute?seq=true", `{"code":"print(1)\n2"}`, nil, 200})
		id := c.header.Get("X-Execution-Id")
		c.exchange(t, call{"GET", "/executions/" + id, "", nil, 200})
		_, lines := c.exchange(t, call{"GET", "/executions/" + id + "/stream?after=1", "", nil, 200})
		if len(lines) == 0 || lines[0]["seq"] != 2.0 {
			t.Fatalf("resumed after 1: %v", lines)
		}
		c.exchange(t, call{"GET", "/executions/" + id + "/stream?after=99", "", nil, 400})
		c.exchange(t, call{"GET", "/executions/" + id + "/stream?after=x", "", nil, 422})
		c.exchange(t, call{"GET", "/executions/nope", "", nil, 404})
		c.exchange(t, call{"GET", "/executions/nope/stream", "", nil, 404})
	})

	t.Run("unknown route", func(t *testing.T) {
		c.routeError(t, call{"GET", "/nope", "", nil, 404}, "RouteNotFound")
		c.routeError(t, call{"POST", "/contexts/x/y/z", "", nil, 404}, "RouteNotFound")
	})
	t.Run("wrong method", func(t *testing.T) {
		for _, tc := range []struct{ method, path string }{
			{"GET", "/execute"},
			{"DELETE", "/health"},
			{"PUT", "/contexts"},
			{"GET", "/contexts/x/restart"},
		} {
			c.routeError(t, call{tc.method, tc.path, "", nil, 405}, "MethodNotAllowed")
		}
	})

	c.requireAllLineTypes(t)
	c.logUnreached(t)
}

// With an access token (scope all) the document's security requirements
// hold on real traffic: the host answers 401 exactly where the document
// refuses the credentials, /health needs none, X-Access-Token counts on
// /execute only.
func TestOpenAPISecurityMatchesTraffic(t *testing.T) {
	t.Parallel()
	const token = "openapi-test-token"
	defaults := 1
	if _, err := exec.LookPath("node"); err == nil {
		defaults = 2
	}
	h := hosttest.Start(t, func(c *settings.Config) {
		c.AccessToken = token
		c.AccessTokenScope = settings.ScopeAll
		c.MaxContexts = defaults // POST /contexts past the limit: a 429
	})
	c := newConformance(t, h, token)
	creds := map[string]http.Header{
		"no token":       {},
		"bearer":         {"Authorization": {"Bearer " + token}},
		"wrong bearer":   {"Authorization": {"Bearer not-" + token}},
		"X-Access-Token": {"X-Access-Token": {token}},
	}
	for _, tc := range []struct {
		method, path, body, creds string
		status                    int
	}{
		{"GET", "/health", "", "no token", 200},
		{"GET", "/openapi.json", "", "no token", 401},
		{"GET", "/openapi.json", "", "bearer", 200},
		{"GET", "/openapi.json", "", "X-Access-Token", 401},
		{"GET", "/contexts", "", "no token", 401},
		{"GET", "/contexts", "", "wrong bearer", 401},
		{"GET", "/contexts", "", "bearer", 200},
		{"POST", "/contexts", `{}`, "no token", 401},
		{"POST", "/contexts", `{}`, "X-Access-Token", 401},
		{"POST", "/contexts", `{}`, "bearer", 429},
		{"POST", "/execute", `{"code":"1"}`, "no token", 401},
		{"POST", "/execute", `{"code":"1"}`, "wrong bearer", 401},
		{"POST", "/execute", `{"code":"1"}`, "bearer", 200},
		{"POST", "/execute", `{"code":"1"}`, "X-Access-Token", 200},
		{"POST", "/contexts/nope/restart", "", "no token", 401},
		{"POST", "/contexts/nope/restart", "", "bearer", 404},
		{"POST", "/contexts/nope/interrupt", "", "X-Access-Token", 401},
		{"POST", "/contexts/nope/interrupt", "", "bearer", 404},
		{"DELETE", "/contexts/nope", "", "no token", 401},
		{"DELETE", "/contexts/nope", "", "bearer", 404},
		{"GET", "/executions/nope", "", "no token", 401},
		{"GET", "/executions/nope", "", "bearer", 404},
		{"GET", "/executions/nope/stream", "", "X-Access-Token", 401},
		{"GET", "/executions/nope/stream", "", "bearer", 404},
	} {
		t.Run(tc.method+" "+tc.path+" "+tc.creds, func(t *testing.T) {
			c.exchange(t, call{tc.method, tc.path, tc.body, creds[tc.creds], tc.status})
		})
	}
	c.logUnreached(t)
}

// apiDoc is docs/openapi.json as kin-openapi reads it, with a router that
// finds the documented operation of a request.
type apiDoc struct {
	doc    *openapi3.T
	router routers.Router
}

func loadAPIDoc(t testing.TB) *apiDoc {
	t.Helper()
	doc, err := openapi3.NewLoader().LoadFromData([]byte(docs.OpenAPI()))
	if err != nil {
		t.Fatalf("load docs/openapi.json: %v", err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("docs/openapi.json is not a valid OpenAPI document: %v", err)
	}
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		t.Fatalf("router for docs/openapi.json: %v", err)
	}
	return &apiDoc{doc: doc, router: router}
}

// call is one request of a test and the status it must get.
type call struct {
	method, path, body string
	header             http.Header // added to Content-Type: application/json (the SDKs send it everywhere)
	status             int
}

// conformance sends real requests to a host and checks each exchange
// against the document, recording what the traffic covered.
type conformance struct {
	*apiDoc
	h       *hosttest.Host
	token   string                    // the host's access token; "" for none
	seen    map[string]bool           // stream line types validated
	reached map[string]map[string]int // documented "METHOD /path" -> status -> count
	header  http.Header               // the last exchange's response header
}

func newConformance(t testing.TB, h *hosttest.Host, token string) *conformance {
	return &conformance{apiDoc: loadAPIDoc(t), h: h, token: token, seen: map[string]bool{}, reached: map[string]map[string]int{}}
}

func (c *conformance) newRequest(t testing.TB, ctx context.Context, tc call) *http.Request {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, tc.method, c.h.URL()+tc.path, strings.NewReader(tc.body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range tc.header {
		req.Header[k] = v
	}
	return req
}

// send makes the request and reads the whole response.
func (c *conformance) send(t testing.TB, ctx context.Context, tc call) (*http.Response, []byte) {
	t.Helper()
	resp, err := c.h.Client().Do(c.newRequest(t, ctx, tc))
	if err != nil {
		t.Fatalf("%s %s: %v", tc.method, tc.path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", tc.method, tc.path, err)
	}
	if resp.StatusCode != tc.status {
		t.Fatalf("%s %s %.200s: status %d %.300q, want %d", tc.method, tc.path, tc.body, resp.StatusCode, body, tc.status)
	}
	return resp, body
}

// exchange sends tc and checks it against the document:
//   - the response (status, headers, body, and each line of an NDJSON
//     stream) matches the documented response of its status;
//   - the document refuses the request exactly when the host refused it for
//     its shape or credentials (422, 415, 401), and accepts every other.
//
// It returns the body and, for a stream, its lines.
func (c *conformance) exchange(t testing.TB, tc call) ([]byte, []hosttest.Line) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	resp, body := c.send(t, ctx, tc)
	c.header = resp.Header

	// The validator reads a request of its own: the first body is spent.
	in := c.requestInput(t, c.newRequest(t, ctx, tc))
	reqErr := openapi3filter.ValidateRequest(ctx, in)
	refused := resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusUnprocessableEntity ||
		resp.StatusCode == http.StatusUnsupportedMediaType
	switch {
	case refused && reqErr == nil:
		t.Errorf("%s %s %.200s: the host refused it (%d) but docs/openapi.json accepts it", tc.method, tc.path, tc.body, resp.StatusCode)
	case !refused && reqErr != nil:
		t.Errorf("%s %s %.200s: the host accepted its shape (%d) but docs/openapi.json refuses it: %v", tc.method, tc.path, tc.body, resp.StatusCode, reqErr)
	}
	op := in.Route.Method + " " + in.Route.Path
	if c.reached[op] == nil {
		c.reached[op] = map[string]int{}
	}
	c.reached[op][fmt.Sprint(resp.StatusCode)]++
	return body, c.checkResponse(t, in, resp, body)
}

// exchangeJSON is exchange for a JSON object answer, decoded.
func (c *conformance) exchangeJSON(t testing.TB, tc call) ([]byte, []hosttest.Line, map[string]any) {
	t.Helper()
	body, lines := c.exchange(t, tc)
	var v map[string]any
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatalf("%s %s: %v: %s", tc.method, tc.path, err, body)
	}
	return body, lines, v
}

// requestInput finds the documented operation of req; a request of a test
// that the document does not route fails the test.
func (c *conformance) requestInput(t testing.TB, req *http.Request) *openapi3filter.RequestValidationInput {
	t.Helper()
	route, params, err := c.router.FindRoute(req)
	if err != nil {
		t.Fatalf("%s %s is not in docs/openapi.json: %v", req.Method, req.URL.Path, err)
	}
	return &openapi3filter.RequestValidationInput{
		Request:    req,
		PathParams: params,
		Route:      route,
		Options:    &openapi3filter.Options{AuthenticationFunc: c.authenticate},
	}
}

// authenticate checks a documented security scheme the way the host does:
// the request must carry the host's token there. A host without a token
// requires nothing.
func (c *conformance) authenticate(_ context.Context, in *openapi3filter.AuthenticationInput) error {
	if c.token == "" {
		return nil
	}
	r := in.RequestValidationInput.Request
	var got string
	switch s := in.SecurityScheme; {
	case s.Type == "http" && strings.EqualFold(s.Scheme, "bearer"):
		if scheme, cred, ok := strings.Cut(r.Header.Get("Authorization"), " "); ok && strings.EqualFold(scheme, "bearer") {
			got = cred
		}
	case s.Type == "apiKey" && s.In == "header":
		got = r.Header.Get(s.Name)
	default:
		return fmt.Errorf("security scheme %q (%s): this test does not know how to check it", in.SecuritySchemeName, s.Type)
	}
	if got != c.token {
		return fmt.Errorf("no valid credential for %q", in.SecuritySchemeName)
	}
	return nil
}

// checkResponse validates the response against the document; a stream's
// body is validated line by line against the documented line schema. It
// returns the stream's lines.
func (c *conformance) checkResponse(t testing.TB, in *openapi3filter.RequestValidationInput, resp *http.Response, body []byte) []hosttest.Line {
	t.Helper()
	what := fmt.Sprintf("%s %s: %d response", in.Request.Method, in.Request.URL.Path, resp.StatusCode)
	out := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in,
		Status:                 resp.StatusCode,
		Header:                 resp.Header,
		Options:                &openapi3filter.Options{IncludeResponseStatus: true},
	}
	var stream *openapi3.MediaType
	if documented := in.Route.Operation.Responses.Status(resp.StatusCode); documented != nil {
		if mt := documented.Value.Content.Get("application/x-ndjson"); mt != nil {
			stream = mt
			// NDJSON is not one JSON value: the validator checks status and
			// headers, the lines are checked below.
			out.Options.ExcludeResponseBody = true
			if got := resp.Header.Get("Content-Type"); documented.Value.Content.Get(got) != mt {
				t.Errorf("%s: Content-Type %q, documented application/x-ndjson", what, got)
			}
		}
	}
	out.SetBodyBytes(body)
	if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
		t.Errorf("%s does not match docs/openapi.json: %v\nbody: %.500s", what, err, body)
	}
	if stream == nil {
		return nil
	}
	lines := hosttest.ParseStream(t, body)
	for i, l := range lines {
		if err := stream.Schema.Value.VisitJSON(map[string]any(l), openapi3.VisitAsResponse()); err != nil {
			t.Errorf("%s: line %d %v does not match docs/openapi.json: %v", what, i, l, err)
		}
		c.seen[l.Type()] = true
	}
	return lines
}

// routeError sends a request that no route takes and checks the answer
// against the document's component response (RouteNotFound,
// MethodNotAllowed): the document has no such path (404), or has it with
// other methods, those of the Allow header (405). It returns the headers.
func (c *conformance) routeError(t testing.TB, tc call, component string) http.Header {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, body := c.send(t, ctx, tc)

	documentedMethods := c.methodsOf(t, ctx, tc.path)
	if tc.status == http.StatusNotFound && len(documentedMethods) > 0 {
		t.Errorf("%s %s: the host has no such path but docs/openapi.json has it for %v", tc.method, tc.path, documentedMethods)
	}
	if tc.status == http.StatusMethodNotAllowed {
		// net/http allows HEAD wherever GET is; OpenAPI leaves it implicit.
		allowed := strings.Split(resp.Header.Get("Allow"), ", ")
		allowed = slices.DeleteFunc(allowed, func(m string) bool { return m == http.MethodHead })
		if slices.Sort(allowed); !slices.Equal(allowed, documentedMethods) {
			t.Errorf("%s %s: Allow %q, but docs/openapi.json has the path for %v", tc.method, tc.path, resp.Header.Get("Allow"), documentedMethods)
		}
	}

	documented := c.doc.Components.Responses[component]
	if documented == nil {
		t.Fatalf("docs/openapi.json has no components.responses.%s", component)
	}
	route := &routers.Route{Spec: c.doc, Method: tc.method, Path: tc.path, Operation: &openapi3.Operation{
		Responses: openapi3.NewResponses(openapi3.WithStatus(tc.status, documented)),
	}}
	out := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: c.newRequest(t, ctx, tc), Route: route},
		Status:                 resp.StatusCode,
		Header:                 resp.Header,
		Options:                &openapi3filter.Options{IncludeResponseStatus: true},
	}
	out.SetBodyBytes(body)
	if err := openapi3filter.ValidateResponse(ctx, out); err != nil {
		t.Errorf("%s %s: %d response does not match components.responses.%s: %v\nbody: %s", tc.method, tc.path, resp.StatusCode, component, err, body)
	}
	return resp.Header
}

// methodsOf returns, sorted, the methods for which the document routes path.
func (c *conformance) methodsOf(t testing.TB, ctx context.Context, path string) []string {
	t.Helper()
	var out []string
	for _, method := range []string{"DELETE", "GET", "PATCH", "POST", "PUT"} {
		if _, _, err := c.router.FindRoute(c.newRequest(t, ctx, call{method: method, path: path})); err == nil {
			out = append(out, method)
		}
	}
	return out
}

// requireAllLineTypes fails unless the traffic showed every line type the
// document maps, so that no line schema goes unchecked.
func (c *conformance) requireAllLineTypes(t testing.TB) {
	t.Helper()
	for typ := range c.doc.Components.Schemas["StreamLine"].Value.Discriminator.Mapping {
		if !c.seen[typ] {
			t.Errorf("no %q line was seen: its schema in docs/openapi.json was not checked against real output", typ)
		}
	}
}

// logUnreached lists the documented statuses the traffic did not produce
// (e.g. 408, 500, 503), for whoever extends this test.
func (c *conformance) logUnreached(t testing.TB) {
	t.Helper()
	var missed []string
	for path, item := range c.doc.Paths.Map() {
		for method, op := range item.Operations() {
			for status := range op.Responses.Map() {
				if c.reached[method+" "+path][status] == 0 {
					missed = append(missed, method+" "+path+" "+status)
				}
			}
		}
	}
	slices.Sort(missed)
	t.Logf("documented responses this traffic did not produce: %s", strings.Join(missed, ", "))
}

// jsonObject is {"key": value}.
func jsonObject(key, value string) string {
	b, err := json.Marshal(map[string]string{key: value})
	if err != nil {
		panic(err)
	}
	return string(b)
}
