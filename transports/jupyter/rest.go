package jupyter

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/gorilla/websocket"
)

// client is the REST and websocket client for one server.
type client struct {
	base   *url.URL // always ends in "/"
	token  string
	http   *http.Client
	httpTr *http.Transport
	cfg    Config
}

func newClient(cfg Config) (*client, error) {
	base, err := url.Parse(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("jupyter URL %q: %w", cfg.URL, err)
	}
	if base.Scheme != "http" && base.Scheme != "https" {
		return nil, fmt.Errorf("jupyter URL %q: scheme must be http or https", cfg.URL)
	}
	if !strings.HasSuffix(base.Path, "/") {
		base.Path += "/"
	}
	tlsCfg, err := tlsConfig(cfg)
	if err != nil {
		return nil, err
	}
	cfg.TLSClientConfig = tlsCfg
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = tlsCfg
	return &client{
		base:   base,
		token:  cfg.Token,
		http:   &http.Client{Transport: tr},
		httpTr: tr,
		cfg:    cfg,
	}, nil
}

// apiError is a non-2xx answer from the server.
type apiError struct {
	Method, Path string
	Status       int
	Message      string
}

func (e *apiError) Error() string {
	msg := fmt.Sprintf("jupyter %s %s: %d %s", e.Method, e.Path, e.Status, http.StatusText(e.Status))
	if e.Message != "" {
		msg += ": " + e.Message
	}
	return msg
}

// requestTimeout bounds each REST call the server answers from its own
// bookkeeping (version, kernel specs, a kernel's model, interrupt):
// milliseconds normally, but a loaded gateway is slower; a server that has
// not answered in 30 s is not going to, and no call may hold a start, an
// execution or the host's exit for ever. The start, the restart and the
// delete have their own bounds (Config.StartTimeout, Config.RestartTimeout,
// deleteAnswerTimeout).
const requestTimeout = 30 * time.Second

// do sends one REST call bounded by requestTimeout; in (if not nil) is sent
// as JSON and out (if not nil) receives the JSON answer.
func (c *client) do(ctx context.Context, method, path string, in, out any) error {
	return c.doWithin(ctx, requestTimeout, method, path, in, out)
}

// doWithin is do bounded by within (and ctx). A call that outlives within
// fails saying so.
func (c *client) doWithin(ctx context.Context, within time.Duration, method, path string, in, out any) error {
	outer := ctx
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	err := c.send(ctx, method, path, in, out)
	if err != nil && ctx.Err() != nil && outer.Err() == nil {
		// %v, not %w: see ownTimeout.
		return fmt.Errorf("jupyter %s %s: %w within %v: %v", method, path, errNoAnswer, within, ownTimeout(err))
	}
	return err
}

// errNoAnswer: a REST call outlived its own bound (doWithin).
var errNoAnswer = errors.New("no answer")

func (c *client) send(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base.JoinPath(path).String(), body)
	if err != nil {
		return err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	c.auth(req.Header)
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("jupyter %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		var m struct {
			Message string `json:"message"`
		}
		if json.Unmarshal(b, &m) != nil || m.Message == "" {
			m.Message = strings.TrimSpace(string(b))
		}
		return &apiError{Method: method, Path: path, Status: resp.StatusCode, Message: m.Message}
	}
	if out == nil {
		_, err = io.Copy(io.Discard, resp.Body)
		return err
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("jupyter %s %s: decode answer: %w", method, path, err)
	}
	return nil
}

func (c *client) auth(h http.Header) {
	if c.token != "" {
		h.Set("Authorization", "token "+c.token)
	}
	for k, v := range c.cfg.Headers {
		h.Set(k, v)
	}
}

// ownTimeout is err, the error under one of this transport's own bounds
// that ran out (start, connect, restart timeout), for the text of the error
// that says which: those errors print it with %v instead of wrapping it,
// because a caller reads a wrapped context.DeadlineExceeded as its own
// deadline and words it so (the plugin boundary answered "did not answer
// in time (call deadline 1m0s)" for a 2 s restart timeout).
func ownTimeout(err error) string { return err.Error() }

// tlsConfig is cfg.TLSClientConfig (or a new one) with the CA file, the
// client certificate and InsecureSkipVerify of cfg applied; nil when none is
// set.
func tlsConfig(cfg Config) (*tls.Config, error) {
	if cfg.CAFile == "" && cfg.ClientCertFile == "" && cfg.ClientKeyFile == "" && !cfg.InsecureSkipVerify {
		return cfg.TLSClientConfig, nil
	}
	t := &tls.Config{MinVersion: tls.VersionTLS12}
	if cfg.TLSClientConfig != nil {
		t = cfg.TLSClientConfig.Clone()
	}
	if cfg.CAFile != "" {
		pem, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return nil, fmt.Errorf("jupyter CA file: %w", err)
		}
		pool := t.RootCAs
		if pool == nil {
			if pool, err = x509.SystemCertPool(); err != nil {
				pool = x509.NewCertPool()
			}
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("jupyter CA file %s: no PEM certificate in it", cfg.CAFile)
		}
		t.RootCAs = pool
	}
	if (cfg.ClientCertFile == "") != (cfg.ClientKeyFile == "") {
		return nil, errors.New("jupyter client certificate: give both the certificate and its key file")
	}
	if cfg.ClientCertFile != "" {
		cert, err := tls.LoadX509KeyPair(cfg.ClientCertFile, cfg.ClientKeyFile)
		if err != nil {
			return nil, fmt.Errorf("jupyter client certificate: %w", err)
		}
		t.Certificates = append(t.Certificates, cert)
	}
	t.InsecureSkipVerify = t.InsecureSkipVerify || cfg.InsecureSkipVerify
	return t, nil
}

type kernelSpecs struct {
	Default     string `json:"default"`
	Kernelspecs map[string]struct {
		Name string `json:"name"`
		Spec struct {
			Language    string `json:"language"`
			DisplayName string `json:"display_name"`
		} `json:"spec"`
	} `json:"kernelspecs"`
}

func (c *client) kernelSpecs(ctx context.Context) (kernelSpecs, error) {
	var ks kernelSpecs
	err := c.do(ctx, http.MethodGet, "api/kernelspecs", nil, &ks)
	return ks, err
}

// version names the server and its version, for TransportInfo. GET api
// gives the version of the server's Jupyter API (notebook or
// jupyter-server); Enterprise Gateway adds its own as gateway_version. Kernel
// Gateway says nothing of itself, but it serves no api/status, which Jupyter
// Server (and the notebook server) do.
func (c *client) version(ctx context.Context) (string, error) {
	var v struct {
		Version        string `json:"version"`
		GatewayVersion string `json:"gateway_version"`
	}
	if err := c.do(ctx, http.MethodGet, "api", nil, &v); err != nil {
		return "", err
	}
	if v.GatewayVersion != "" {
		return "enterprise-gateway " + v.GatewayVersion + " (api " + v.Version + ")", nil
	}
	err := c.do(ctx, http.MethodGet, "api/status", nil, nil)
	var ae *apiError
	if errors.As(err, &ae) && ae.Status == http.StatusNotFound {
		return "kernel-gateway (api " + v.Version + ")", nil
	}
	return "jupyter-server " + v.Version, nil
}

type kernelModel struct {
	ID          string `json:"id"`
	Name        string `json:"name"`
	Connections int    `json:"connections"`
	// The server updates both from the kernel's IOPub messages (its
	// activity watch): last_activity on each, execution_state on status
	// messages. Until the kernel sent one they are what the server set at
	// the start, "starting" and the start's time.
	LastActivity   string `json:"last_activity"`
	ExecutionState string `json:"execution_state"`
}

// sentSince says the server has seen the kernel send something on IOPub
// since it gave model at, the kernel's start: the kernel runs and its
// sockets are connected.
func (m kernelModel) sentSince(at kernelModel) bool {
	return (m.LastActivity != "" && m.LastActivity != at.LastActivity) ||
		(m.ExecutionState != "" && m.ExecutionState != "starting")
}

// listTimeout bounds GET api/kernels: the list only serves to find the
// kernel of an abandoned start (reap.go), so a gateway that is slow to list
// (or never answers) must not hold up the start that asks for it.
const listTimeout = 5 * time.Second

func (c *client) listKernels(ctx context.Context) ([]kernelModel, error) {
	var ks []kernelModel
	err := c.doWithin(ctx, listTimeout, http.MethodGet, "api/kernels", nil, &ks)
	return ks, err
}

// startRequest is the body of POST api/kernels.
type startRequest struct {
	Name string            `json:"name"`
	Env  map[string]string `json:"env,omitempty"`
}

// createKernel sends the start request, bounded by within (see
// Transport.createKernel for why it is longer than StartTimeout).
func (c *client) createKernel(ctx context.Context, name string, within time.Duration) (kernelModel, error) {
	var k kernelModel
	err := c.doWithin(ctx, within, http.MethodPost, "api/kernels", startRequest{Name: name, Env: c.cfg.KernelEnv}, &k)
	if err == nil && k.ID == "" {
		err = errors.New("jupyter POST api/kernels: answer has no kernel id")
	}
	return k, err
}

func (c *client) interruptKernel(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodPost, "api/kernels/"+url.PathEscape(id)+"/interrupt", nil, nil)
}

func (c *client) restartKernel(ctx context.Context, id string) error {
	return c.doWithin(ctx, c.cfg.RestartTimeout, http.MethodPost, "api/kernels/"+url.PathEscape(id)+"/restart", nil, nil)
}

// deleteKernel sends one DELETE of kernel id, bounded by
// deleteAnswerTimeout.
func (c *client) deleteKernel(ctx context.Context, id string) error {
	return c.doWithin(ctx, c.cfg.deleteAnswerTimeout, http.MethodDelete, "api/kernels/"+url.PathEscape(id), nil, nil)
}

// kernelGone reports whether the server says it has no kernel id (404 to
// GET api/kernels/{id}, within listTimeout); any other answer, or none,
// leaves the kernel counted as there.
func (c *client) kernelGone(ctx context.Context, id string) bool {
	err := c.doWithin(ctx, listTimeout, http.MethodGet, "api/kernels/"+url.PathEscape(id), nil, nil)
	var ae *apiError
	return errors.As(err, &ae) && ae.Status == http.StatusNotFound
}

// errKernelGone says the server no longer knows the kernel: reconnecting is
// pointless.
var errKernelGone = errors.New("the Jupyter server no longer has this kernel")

// dialChannels opens the kernel's channels websocket.
func (c *client) dialChannels(ctx context.Context, kernelID, session string) (*websocket.Conn, error) {
	u := *c.base
	if u.Scheme == "https" {
		u.Scheme = "wss"
	} else {
		u.Scheme = "ws"
	}
	u.Path += "api/kernels/" + url.PathEscape(kernelID) + "/channels"
	u.RawQuery = url.Values{"session_id": {session}}.Encode()

	// The dialer heeds ctx only while connecting: the server may then hold
	// the upgrade (until its kernel answers), so ctx's end cuts the
	// connection's deadline until the handshake is over.
	dial := dialFunc(!c.cfg.DisableQuickAck)
	var stopCut func() bool
	d := &websocket.Dialer{
		NetDialContext: func(dctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := dial(dctx, network, addr)
			if err == nil {
				stopCut = context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
			}
			return conn, err
		},
		TLSClientConfig:  c.cfg.TLSClientConfig,
		HandshakeTimeout: c.cfg.ConnectTimeout,
		// The read buffer is what a single read syscall can fill; large
		// outputs arrive in fewer reads with a larger one.
		ReadBufferSize:  64 << 10,
		WriteBufferSize: 64 << 10,
	}
	if c.cfg.Protocol == ProtocolAuto {
		d.Subprotocols = []string{subprotocolV1}
	}
	h := http.Header{}
	c.auth(h)
	ws, resp, err := d.DialContext(ctx, u.String(), h)
	if stopCut != nil {
		stopCut()
	}
	if err != nil {
		if resp != nil && resp.StatusCode == http.StatusNotFound {
			return nil, fmt.Errorf("connect to kernel %s: %w", kernelID, errKernelGone)
		}
		if resp != nil {
			return nil, fmt.Errorf("connect to kernel %s: %s: %w", kernelID, resp.Status, err)
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() && ctx.Err() == nil {
			// The server holds the upgrade until the kernel answers.
			return nil, fmt.Errorf("connect to kernel %s: the kernel did not answer within the connect timeout (%v): %v", kernelID, c.cfg.ConnectTimeout, ownTimeout(err))
		}
		return nil, fmt.Errorf("connect to kernel %s: %w", kernelID, err)
	}
	return ws, nil
}

// dialFunc returns the TCP dialer for websockets, re-arming TCP_QUICKACK after
// each read when quickAck is set (see quickack_linux.go).
func dialFunc(quickAck bool) func(ctx context.Context, network, addr string) (net.Conn, error) {
	d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := d.DialContext(ctx, network, addr)
		if err != nil || !quickAck {
			return conn, err
		}
		return withQuickAck(conn), nil
	}
}
