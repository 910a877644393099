// Package server is the kernelhost host: from a settings.Config it launches
// the transport plugin, loads the env-var policies, builds the engine,
// serves the code-interpreter HTTP API (docs/api-contract.md), the MCP tools
// and the sandbox API, and shuts everything down in order. The binary in
// hostcmd is a thin main around it; tests and benchmarks start it in-process.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/kernelhost/kernelhost/core"
	"github.com/kernelhost/kernelhost/core/engine"
	"github.com/kernelhost/kernelhost/hostcmd/httpapi"
	"github.com/kernelhost/kernelhost/hostcmd/settings"
	"github.com/kernelhost/kernelhost/plugins/transportplugin/pluginhost"
	"github.com/kernelhost/kernelhost/transports/kernelpy"
)

// Host is a running kernelhost: an engine behind an HTTP server.
type Host struct {
	Engine *engine.Engine

	log      *slog.Logger
	plugin   *pluginhost.Supervised // nil when settings.Config.Transport was given
	bounds   settings.KernelBounds  // on the plugin's kernel starts; zero: the defaults
	policies *policies              // nil without settings.Config.Policies
	api      *httpapi.API
	metrics  *httpapi.Metrics // nil: settings.Config.DisableMetrics
	srv      *http.Server
	ln       net.Listener
	front    *httpapi.Front // what srv serves
	served   chan error     // Serve's result
	pprof    *pprofServer   // nil without settings.Config.PprofAddr
	sandbox  *sandboxAPI    // nil without settings.Config.SandboxAPIAddr
	shutdown atomic.Bool

	// startRetryUntil ends the retries of start-up (settings.Config.DefaultStartRetry):
	// the transport plugin's start, then the default contexts'.
	startRetryUntil time.Time
}

// kernelSetup is the kernel-side python the engine gives every new python
// kernel (charts, data, images: package kernelpy): the subprocess driver
// has it already, a Jupyter kernel is sent it. A variable only so that a
// benchmark can start a host without it, side by side.
var kernelSetup = func(language string) engine.KernelSetup {
	return engine.KernelSetup{Check: kernelpy.Check(language), Load: kernelpy.Setup(language)}
}

// Start loads the policies, launches the transport plugin (unless
// cfg.Transport is set), listens on cfg.Addr, starts serving and creates the
// default contexts (python and javascript, those the transport has). /health
// answers 200 only once they exist. Start returns when the defaults are
// ready, or with an error after cleaning up.
func Start(ctx context.Context, cfg settings.Config) (*Host, error) {
	return start(ctx, cfg, true)
}

// StartInProcess is Start without the HTTP server: the same engine,
// plugins, policies and default contexts, used in-process (`kernelhost mcp`
// serves them over stdio with MCPServer). cfg.Addr is not listened on, so
// it runs beside a `kernelhost serve` on the same settings.
func StartInProcess(ctx context.Context, cfg settings.Config) (*Host, error) {
	return start(ctx, cfg, false)
}

func start(ctx context.Context, cfg settings.Config, listen bool) (*Host, error) {
	cfg = settings.WithDefaults(cfg)
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	// Lines logged with a request's context carry its ids (requestlog.go).
	log := slog.New(httpapi.RequestIDHandler{Handler: cfg.Logger.Handler()})
	cfg.Logger = log
	if cfg.Transport == nil {
		cfg.KeepTransportDescription()
	}
	cwd, err := resolveDefaultCwd(cfg, log)
	if err != nil {
		return nil, err
	}
	h := &Host{log: log, served: make(chan error, 1), startRetryUntil: time.Now().Add(cfg.DefaultStartRetry)}
	if listen {
		if err := h.listen(cfg); err != nil {
			return nil, err
		}
	}
	if err := h.assemble(ctx, cfg, cwd, listen); err != nil {
		h.release()
		return nil, err
	}
	info := h.Engine.Transport().Info()
	if listen {
		log.Info("listening", "addr", h.Addr(), "transport", info.Name, "languages", info.Languages)
	} else {
		log.Info("started in-process", "transport", info.Name, "languages", info.Languages)
	}

	defaults := defaultLanguages(info, log)
	if err := startDefaults(ctx, h.Engine, defaults, h.startRetryUntil, h.api, log); err != nil {
		stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = h.Shutdown(stopCtx)
		return nil, fmt.Errorf("start the default contexts %v: %w", defaults, err)
	}
	h.api.SetReady(true)
	log.Info("ready", "default_contexts", defaults, "default_cwd", cwd.dir)
	return h, nil
}

// assemble builds the host's parts in order: the metrics, the policies (a
// broken module is the cheapest failure), the transport, the engine, the
// API and its listener (if listen), pprof. On failure the caller releases
// what it built.
func (h *Host) assemble(ctx context.Context, cfg settings.Config, cwd defaultCwd, listen bool) error {
	var met *httpapi.Metrics
	if !cfg.DisableMetrics {
		// The engine is set before the server serves, so before any scrape.
		met = httpapi.NewMetrics(func() int { return len(h.Engine.Contexts()) })
	}
	h.metrics = met
	var envPolicy engine.EnvPolicy
	if cfg.Policies != "" {
		pols, err := loadPolicies(ctx, cfg.Policies, cfg.LookupEnv, cfg.PolicyOptions)
		if err != nil {
			return fmt.Errorf("load the env-var policies: %w", err)
		}
		h.policies, envPolicy = pols, pols
		if met != nil {
			envPolicy = met.ObservePolicy(pols)
		}
		h.log.Info("env-var policies loaded", "modules", pols.modules())
	}
	// Pooled interpreters (the subprocess plugin's) start where contexts
	// start by default.
	cfg.DefaultCwd = cwd.dir
	transport, err := h.transport(ctx, cfg, met)
	if err != nil {
		return err
	}
	if met != nil {
		met.ObserveTransport(transport, h.log)
	}
	if h.Engine, err = engine.NewEngine(engineConfig(cfg, transport, met, envPolicy, cwd, h.bounds)); err != nil {
		return fmt.Errorf("create the engine: %w", err)
	}
	h.api = httpapi.New(cfg, h.Engine, met)
	if !listen {
		return nil
	}
	if cfg.SandboxAPIAddr != "" {
		if err := h.startSandboxAPI(cfg, cwd.dir); err != nil {
			return err
		}
	}
	h.front.Serve(h.api.Handler())
	if cfg.PprofAddr != "" {
		if h.pprof, err = startPprof(cfg.PprofAddr, h.log); err != nil {
			return err
		}
	}
	return nil
}

// listen opens cfg.Addr and serves it (front): /health answers from here on.
func (h *Host) listen(cfg settings.Config) error {
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.Addr, err)
	}
	h.ln, h.front = ln, httpapi.NewFront(cfg)
	h.srv = newHTTPServer(cfg, h.front)
	go func() { h.served <- h.srv.Serve(ln) }()
	return nil
}

// transport is cfg.Transport, else the transport plugin it launches (which h
// then owns).
func (h *Host) transport(ctx context.Context, cfg settings.Config, met *httpapi.Metrics) (core.Transport, error) {
	if cfg.Transport != nil {
		return cfg.Transport, nil
	}
	var onRestart func()
	if met != nil {
		onRestart = met.PluginRestarted
	}
	// A plugin's start includes its configure, where the jupyter plugin
	// first reaches its gateway: one that is not up yet is retried as a
	// failed start of the default contexts is.
	delay := defaultStartFirstDelay
	for attempt := 1; ; attempt++ {
		p, bounds, err := launchTransport(ctx, cfg, onRestart)
		if err == nil {
			h.plugin, h.bounds = p, bounds
			return p, nil
		}
		if ctx.Err() != nil || !time.Now().Add(delay).Before(h.startRetryUntil) {
			return nil, err
		}
		h.log.Warn("the transport plugin did not start; retrying", "attempt", attempt, "retry_in", delay, "err", err)
		if h.front != nil {
			h.front.SetStarting(fmt.Sprintf("waiting to retry the transport plugin's start: attempt %d failed: %v", attempt, err))
		}
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		}
		delay = min(2*delay, defaultStartMaxDelay)
	}
}

// release closes what assemble built, newest first, when Start fails before
// the host serves.
func (h *Host) release() {
	closeCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if h.pprof != nil {
		h.pprof.close()
	}
	if h.sandbox != nil {
		h.sandbox.close()
	}
	if h.srv != nil {
		_ = h.srv.Close() // and its listener
		<-h.served
	}
	if h.Engine != nil {
		_ = h.Engine.Close(context.Background())
	}
	if h.plugin != nil {
		_ = h.plugin.Close()
	}
	if h.policies != nil {
		_ = h.policies.close(closeCtx)
	}
}

// engineConfig is the engine's configuration: cfg's settings (every one set,
// withDefaults) and the parts the host built.
func engineConfig(cfg settings.Config, transport core.Transport, met *httpapi.Metrics, policy engine.EnvPolicy, cwd defaultCwd, bounds settings.KernelBounds) engine.Config {
	// A nil *metrics must not become a non-nil engine.Observer.
	var observer engine.Observer
	if met != nil {
		observer = met
	}
	globals := cfg.GlobalEnv
	return engine.Config{
		Transport:           transport,
		Observer:            observer,
		Policy:              policy,
		Logger:              cfg.Logger,
		DefaultCwd:          cwd.dir,
		DefaultCwdOnKernel:  cwd.onKernel,
		DefaultCwdFallbacks: cwd.fallbacks,
		GlobalEnv:           func(context.Context) (map[string]string, error) { return globals, nil },
		KernelSetup:         kernelSetup,
		QueueDepth:          cfg.QueueDepth,
		MaxOutputBytes:      cfg.MaxOutputBytes,
		MaxBufferedBytes:    cfg.MaxBufferedBytes, // negative: no bound, as in settings.Config
		ReplayBytes:         cfg.ReplayBytes,
		ReplayTTL:           cfg.ReplayTTL,
		DisconnectPolicy:    cfg.DisconnectPolicy,
		InterruptGrace:      cfg.InterruptGrace,
		MaxContexts:         max(cfg.MaxContexts, 0), // the engine's 0 is "no limit", settings.Config's -1
		ExecutionTimeout:    cfg.ExecutionTimeout,
		MaxEnvVars:          cfg.MaxEnvVars,
		MaxEnvBytes:         cfg.MaxEnvBytes,
		StartTimeout:        bounds.EngineStart,
	}
}

// newHTTPServer serves handler with cfg's timeouts.
func newHTTPServer(cfg settings.Config, handler http.Handler) *http.Server {
	return &http.Server{
		Handler:           handler,
		IdleTimeout:       cfg.IdleTimeout,
		ReadHeaderTimeout: cfg.ReadHeaderTimeout,
		// ReadTimeout covers headers and body; net/http lifts it once the
		// body is read, so streams are not cut (TestReadTimeoutDoesNotCutStreams).
		ReadTimeout: cfg.ReadTimeout,
		ErrorLog:    slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelWarn),
		// No WriteTimeout: /execute streams for as long as the code runs;
		// each of a stream's writes has its own deadline (settings.Config.WriteTimeout).
	}
}

// defaultLanguages are the languages of the default contexts: the SDKs
// expect python and javascript (docs/api-contract.md §8.3); a transport
// without them (e.g. the example bash plugin) gets none.
func defaultLanguages(info core.TransportInfo, log *slog.Logger) []string {
	var defaults []string
	for _, lang := range []string{"python", "javascript"} {
		if slices.Contains(info.Languages, lang) {
			defaults = append(defaults, lang)
		}
	}
	if len(defaults) == 0 {
		log.Warn("the transport has neither python nor javascript: no default contexts", "languages", info.Languages)
	}
	return defaults
}

// Backoff between attempts to start the default contexts.
const (
	defaultStartFirstDelay = time.Second
	defaultStartMaxDelay   = 30 * time.Second
)

// startDefaults starts the default contexts, retrying a failure with backoff
// until deadline (a slow cluster, a gateway that is still coming up) and
// telling /health what it waits for. Contexts already started are kept.
func startDefaults(ctx context.Context, eng *engine.Engine, defaults []string, deadline time.Time, a *httpapi.API, log *slog.Logger) error {
	delay := defaultStartFirstDelay
	for attempt := 1; ; attempt++ {
		a.SetStarting(fmt.Sprintf("starting the default contexts %v (attempt %d)", defaults, attempt))
		err := eng.StartDefaults(ctx, defaults...)
		if err == nil || ctx.Err() != nil || !time.Now().Add(delay).Before(deadline) {
			return err
		}
		log.Warn("the default contexts did not start; retrying", "attempt", attempt, "retry_in", delay, "err", err)
		a.SetStarting(fmt.Sprintf("waiting to retry the default contexts %v: attempt %d failed: %v", defaults, attempt, err))
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
		delay = min(2*delay, defaultStartMaxDelay)
	}
}

// PluginPID is the transport plugin's process id, 0 when the transport is
// in-process or the plugin is restarting.
func (h *Host) PluginPID() int {
	if h.plugin == nil {
		return 0
	}
	return h.plugin.PID()
}

// ErrNoPolicies is ReloadPolicies's answer when no policies are configured.
var ErrNoPolicies = errors.New("no env-var policies configured (" + settings.EnvVar("policies") + ")")

// ReloadPolicies reads the policy list (an @FILE setting's file), every
// module and every module config again, and returns the modules now in use.
// On failure the policies in use stay and the error names the file.
func (h *Host) ReloadPolicies(ctx context.Context) ([]string, error) {
	if h.policies == nil {
		return nil, ErrNoPolicies
	}
	return h.policies.reload(ctx)
}

// SandboxAPIAddr is the address of the sandbox API's listener, "" when it
// is off.
func (h *Host) SandboxAPIAddr() string {
	if h.sandbox == nil {
		return ""
	}
	return h.sandbox.addr()
}

// PprofAddr is the address of the pprof listener, "" when it is off.
func (h *Host) PprofAddr() string {
	if h.pprof == nil {
		return ""
	}
	return h.pprof.addr()
}

// MCPServer is a new MCP server with the host's tools (package mcpserver)
// on its engine, for a transport of the caller's: `kernelhost mcp` runs it
// on stdio. /mcp serves its own.
func (h *Host) MCPServer() *mcp.Server {
	return httpapi.NewMCPServer(h.Engine, h.metrics, h.log)
}

// Addr is the address the host listens on ("" for StartInProcess's).
func (h *Host) Addr() string {
	if h.ln == nil {
		return ""
	}
	return h.ln.Addr().String()
}

// URL is the host's base URL.
func (h *Host) URL() string { return "http://" + h.Addr() }

// Shutdown stops accepting connections, ends in-flight streams (each gets an
// error line and end_of_execution), stops every interpreter, waits for the
// handlers, then stops the transport plugin and releases the policies, all
// bounded by ctx.
func (h *Host) Shutdown(ctx context.Context) error {
	if h.shutdown.Swap(true) {
		return nil
	}
	// Streams whose clients stalled get a short last chance to take their
	// final lines, not WriteTimeout: they would hold the shutdown.
	h.api.BeginShutdown()
	// http.Server.Shutdown closes the listeners at once, then waits for active
	// connections to go idle; those are the streams that engine.Close ends
	// and MCP sessions, closed once the engine ended their calls.
	srvDone := make(chan error, 1)
	if h.srv != nil {
		go func() { srvDone <- h.srv.Shutdown(ctx) }()
	} else {
		srvDone <- nil
		h.served <- http.ErrServerClosed
	}
	if h.sandbox != nil {
		// Its commands and streams end with the host.
		h.sandbox.close()
	}
	engineErr := h.Engine.Close(ctx)
	h.api.CloseMCP()
	srvErr := <-srvDone
	if serveErr := <-h.served; !errors.Is(serveErr, http.ErrServerClosed) {
		srvErr = errors.Join(srvErr, serveErr)
	}
	if srvErr != nil {
		// Streams still open after the deadline: cut them.
		_ = h.srv.Close()
	}
	if h.pprof != nil {
		// Profiles in progress (a 30 s CPU profile) are cut: shutting down.
		h.pprof.close()
	}
	// After the engine: the kernels live in the plugin process.
	var pluginErr, policyErr error
	if h.plugin != nil {
		pluginErr = h.plugin.Close()
	}
	if h.policies != nil {
		policyErr = h.policies.close(ctx)
	}
	h.log.Info("stopped")
	return errors.Join(engineErr, srvErr, pluginErr, policyErr)
}

// defaultCwd is the engine's default cwd and, when it is checked where the
// kernels run (core/engine settings.Config.DefaultCwdOnKernel), the directories to
// try after it there.
type defaultCwd struct {
	dir       string
	onKernel  bool
	fallbacks []string
}

// resolveDefaultCwd keeps the configured default cwd when it is a
// directory (made absolute), and otherwise uses the workspace (default
// DefaultWorkspace()), creating it: outside an E2B sandbox /home/user usually
// does not exist, and the host's own working directory (for make run, the
// repository) is no place for user code's files.
//
// A transport whose kernels may run on another machine (the jupyter
// transport: a gateway on a cluster; remoteKernels) has directories the
// host cannot see: there the kernel checks, when a context starts, the
// default cwd and then the workspace (which exists there when the server
// runs beside the host), and else stays in its own working directory. The
// host creates the workspace when it can, but fails for neither.
func resolveDefaultCwd(cfg settings.Config, log *slog.Logger) (defaultCwd, error) {
	if remoteKernels(cfg) {
		if !filepath.IsAbs(cfg.DefaultCwd) {
			return defaultCwd{}, fmt.Errorf("the default cwd %s must be an absolute path with the %s transport: the kernels may run on another machine (setting %s)", cfg.DefaultCwd, cfg.TransportName, settings.EnvVar("default-cwd"))
		}
		d := defaultCwd{dir: cfg.DefaultCwd, onKernel: true}
		if ws, err := makeWorkspace(cfg.DefaultCwd, cfg.Workspace); err != nil {
			log.Info("no workspace to fall back on where the kernels run", "err", err)
		} else if ws != cfg.DefaultCwd {
			d.fallbacks = []string{ws}
		}
		return d, nil
	}
	if fi, err := os.Stat(cfg.DefaultCwd); err == nil && fi.IsDir() {
		dir, err := filepath.Abs(cfg.DefaultCwd)
		return defaultCwd{dir: dir}, err
	}
	ws, err := makeWorkspace(cfg.DefaultCwd, cfg.Workspace)
	if err != nil {
		return defaultCwd{}, err
	}
	log.Info("the default cwd is not a directory; contexts start in the workspace", "configured", cfg.DefaultCwd, "default_cwd", ws)
	return defaultCwd{dir: ws}, nil
}

// remoteKernels says whether the transport's kernels may run on another
// machine, as the transport says (core.TransportInfo.RemoteKernels), or, for
// a plugin not started yet, its description. A plugin that cannot describe
// itself counts as local here: launching it reports why.
func remoteKernels(cfg settings.Config) bool {
	if cfg.Transport != nil {
		return cfg.Transport.Info().RemoteKernels
	}
	d, err := cfg.TransportDescription()
	return err == nil && d.RemoteKernels
}

// makeWorkspace creates the workspace (default DefaultWorkspace()) and
// returns its absolute path.
func makeWorkspace(cwd, workspace string) (string, error) {
	if workspace == "" {
		workspace = DefaultWorkspace()
	}
	if workspace == "" {
		return "", fmt.Errorf("the default cwd %s is not a directory, and there is no workspace to use instead: neither XDG_DATA_HOME nor HOME is set; set %s or %s", cwd, settings.EnvVar("default-cwd"), settings.EnvVar("workspace"))
	}
	ws, err := filepath.Abs(workspace)
	if err != nil {
		return "", fmt.Errorf("workspace %s: %w", workspace, err)
	}
	// 0700: the files of user code are nobody else's business.
	if err := os.MkdirAll(ws, 0o700); err != nil {
		return "", fmt.Errorf("create the workspace (setting %s): %w", settings.EnvVar("workspace"), err)
	}
	return ws, nil
}

// DefaultWorkspace is the workspace when the setting is empty:
// $XDG_DATA_HOME/kernelhost/workspace, else ~/.local/share/kernelhost/workspace
// (the XDG base directory default), "" without either variable.
func DefaultWorkspace() string {
	if data := os.Getenv("XDG_DATA_HOME"); filepath.IsAbs(data) {
		return filepath.Join(data, "kernelhost", "workspace")
	}
	if home := os.Getenv("HOME"); home != "" {
		return filepath.Join(home, ".local", "share", "kernelhost", "workspace")
	}
	return ""
}
