package server

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/kernelhost/kernelhost/core"
	"github.com/kernelhost/kernelhost/plugins/policy"
)

// EnvPrefix prefixes the environment variable of every setting: the flag
// -default-cwd is also KERNELHOST_DEFAULT_CWD.
const EnvPrefix = "KERNELHOST_"

// Config is the host's configuration. Zero values get the defaults of Load.
type Config struct {
	Addr       string // listen address
	DefaultCwd string // cwd of contexts created without one
	// Workspace is where contexts start when DefaultCwd is not a directory
	// (outside an E2B sandbox /home/user rarely is); created if missing,
	// never the host's own working directory. "": DefaultWorkspace().
	Workspace        string
	GlobalEnv        map[string]string // env vars every context gets
	DisconnectPolicy core.DisconnectPolicy
	InterruptGrace   time.Duration
	QueueDepth       int
	// MaxEnvVars and MaxEnvBytes bound one execution's env_vars: their
	// number and the bytes of their names and values (400 past them).
	MaxEnvVars     int
	MaxEnvBytes    int
	MaxBodyBytes   int64
	MaxOutputBytes int
	// ReplayBytes and ReplayTTL bound what is kept of an execution for a
	// client that re-attaches (GET /executions/{id}/stream): its newest
	// outputs up to ReplayBytes, for ReplayTTL after it ended.
	ReplayBytes int
	ReplayTTL   time.Duration
	Keepalive   time.Duration // silence on a stream before a keepalive line
	// MaxContexts bounds the live contexts (each one an interpreter); past
	// it POST /contexts answers 429. 0: DefaultMaxContexts; negative: no limit.
	MaxContexts int
	// ExecutionTimeout is the host default bound on an execution's run on the
	// kernel (an /execute body's "timeout" overrides it). 0: none.
	ExecutionTimeout time.Duration
	// HTTP server timeouts (0: the Default* below). ReadTimeout bounds reading
	// a request's headers and body, not the response: /execute streams as long
	// as the code runs.
	ReadHeaderTimeout, ReadTimeout, IdleTimeout time.Duration
	// WriteTimeout bounds each write of a response stream: a client that
	// takes none of it for this long is cut (the disconnect policy applies;
	// the execution can be re-attached). 0: DefaultWriteTimeout.
	WriteTimeout time.Duration
	// MaxBufferedBytes bounds the output buffered for slow clients across
	// all executions (MaxOutputBytes is per execution); past it the streams
	// furthest behind are cut, their executions going on to be re-attached.
	// 0: the engine's default (256 MiB); negative: no bound.
	MaxBufferedBytes int
	// AccessToken, when set, is required as "Authorization: Bearer <token>"
	// (see AccessTokenScope and docs/operating.md). Empty: no check.
	AccessToken string
	// AccessTokenScope is where AccessToken is required: ScopeAll (every
	// route but /health) or ScopeExecute (only /execute, where the official
	// SDKs can present it as X-Access-Token). Default ScopeAll.
	AccessTokenScope string
	// AllowedHosts are the names a request's Host may be besides loopback
	// names and addresses: "name", "*.suffix" or "*" (any; the check is
	// off). nil: DefaultAllowedHosts. A DNS-rebinding page is refused.
	AllowedHosts []string
	// AllowedOrigins are the browser origins ("https://app.example.com")
	// that get CORS; a request with another Origin (not the host's own) is
	// refused. "*": every origin. Empty: no CORS.
	AllowedOrigins []string
	Interpreters   Interpreters
	Logger         *slog.Logger

	// TransportName picks the transport plugin: the executable
	// PluginDir/kernelhost-transport-<TransportName>. Default "subprocess".
	TransportName string
	// PluginDir holds the transport plugins. Default: DefaultPluginDir().
	PluginDir string
	// Jupyter is passed to the jupyter transport plugin.
	Jupyter Jupyter
	// Policies lists the env-var policy modules (docs/policy-abi.md): .wasm
	// paths separated by commas, or "@FILE" for a file listing them that is
	// read again at every ReloadPolicies. Empty: no policy.
	Policies string
	// PolicyOptions tune the policy host; the zero value is its defaults
	// (1 s per call, 2 s to start an instance, 32 MiB per instance).
	PolicyOptions policy.Options
	// LookupEnv finds a policy module's KERNELHOST_POLICY_CONFIG_<NAME>.
	// Default: no such variables (each module's .config file, if any).
	LookupEnv func(string) (string, bool)

	// DefaultStartRetry is how long the start of the default contexts keeps
	// being retried, with backoff, after a failure (a slow or busy cluster)
	// before start-up fails; /health says what it waits for. 0: the first
	// failure ends start-up.
	DefaultStartRetry time.Duration

	// PprofAddr, when set, serves net/http/pprof on a listener of its own at
	// this address (never on Addr). It should be a loopback address:
	// profiles reveal memory contents. Empty: off.
	PprofAddr string
	// DisableMetrics leaves out /metrics and the engine's Observer
	// (BenchmarkMetricsCost compares the two).
	DisableMetrics bool
	// NoKernelCgroups keeps the subprocess transport from giving each
	// interpreter a cgroup of its own (where cgroup v2 is writable): delete,
	// restart and shutdown then end an interpreter's descendants by its
	// process tree, and the plugin, a child subreaper, ends those it adopted
	// when it stops.
	NoKernelCgroups bool

	// Transport, if set, is used instead of launching a plugin (tests run
	// transports in-process this way). The caller owns it.
	Transport core.Transport
}

// Jupyter are the settings of the jupyter transport plugin; empty values
// leave the plugin's own defaults.
type Jupyter struct {
	URL, Token string
	// KernelEnv is the "env" of every kernel-start request (Enterprise
	// Gateway's KERNEL_USERNAME, KERNEL_NAMESPACE, …).
	KernelEnv map[string]string
	// StartTimeout, ConnectTimeout and RestartTimeout bound a kernel's start
	// request, its websocket's opening and a restart (jupyter.Config); the
	// host's own bounds on starts and restarts follow them (kernelBounds).
	StartTimeout, ConnectTimeout, RestartTimeout time.Duration
	// CAFile, ClientCert and ClientKey are PEM files (a private CA, mutual
	// TLS); InsecureSkipVerify accepts any server certificate (logged loudly).
	CAFile, ClientCert, ClientKey string
	InsecureSkipVerify            bool
	// Headers are added to every request to the server (an auth proxy);
	// KernelNames maps a language to a kernel spec name.
	Headers, KernelNames map[string]string
	// KeepAlive, when positive, keeps the kernels from being culled as idle
	// while their contexts exist (jupyter.Config.KeepAlive).
	KeepAlive time.Duration
}

// Interpreters are the interpreter executables the subprocess transport runs.
type Interpreters struct {
	Python, Node, Bash, R, Java string
}

// Defaults.
const (
	DefaultAddr         = "127.0.0.1:49999"
	DefaultCwd          = "/home/user"
	DefaultMaxBodyBytes = 16 << 20
	DefaultKeepalive    = 5 * time.Second
	DefaultTransport    = "subprocess"
	DefaultMaxContexts  = 64
	DefaultMaxEnvVars   = 1000
	DefaultMaxEnvBytes  = 1 << 20
	// DefaultJupyterKernelTimeout is the default of the jupyter-*-timeout
	// settings, jupyter.DefaultKernelTimeout (not imported: the host does
	// not link the transport it runs as a plugin).
	DefaultJupyterKernelTimeout = 2 * time.Minute

	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultReadTimeout       = 60 * time.Second
	// Upstream keeps idle connections 640 s; SDKs pool connections and an
	// earlier close races with reuse (ECONNRESET in the client).
	DefaultIdleTimeout = 640 * time.Second
	// A stream's client that takes no bytes for this long is gone (a
	// vanished peer, or one that stopped reading).
	DefaultWriteTimeout = 30 * time.Second
)

// Access token scopes.
const (
	ScopeAll     = "all"
	ScopeExecute = "execute"
)

// DefaultPluginDir finds the transport plugins of the running executable
// EXE: EXE's directory/plugins (bin/plugins for bin/kernelhost as make builds
// them), else EXE's directory/../lib/kernelhost/plugins (as make install lays
// them out: PREFIX/bin/kernelhost, PREFIX/lib/kernelhost/plugins). When
// neither is a directory it is the first, so a start-up error names where
// make puts them.
func DefaultPluginDir() string {
	exe, err := os.Executable()
	if err != nil {
		return "plugins"
	}
	return PluginDirFor(exe)
}

// PluginDirFor is DefaultPluginDir for the executable at exe.
func PluginDirFor(exe string) string {
	dir := filepath.Dir(exe)
	candidates := []string{
		filepath.Join(dir, "plugins"),
		filepath.Join(dir, "..", "lib", "kernelhost", "plugins"),
	}
	for _, c := range candidates {
		if fi, err := os.Stat(c); err == nil && fi.IsDir() {
			return filepath.Clean(c)
		}
	}
	return candidates[0]
}

// Load reads the configuration from command-line flags, KERNELHOST_*
// environment variables and the TOML config file named by -config (or
// KERNELHOST_CONFIG), in that precedence, over the defaults (see parseSources).
// name heads the usage -help prints to stderr. getenv is os.Getenv outside
// tests.
func Load(name string, args []string, getenv func(string) string, stderr io.Writer) (Config, error) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	// Errors are returned, not printed with the whole usage after them; the
	// usage goes to stderr for -help only.
	fs.SetOutput(io.Discard)
	var (
		c                            Config
		envFile, envInline           string
		policy, logFormat, logLevel  string
		jupyterKernelEnv             string
		jupyterHeaders, kernelNames  string
		allowedHosts, allowedOrigins string
		kernelCgroups                bool
	)
	fs.String(ConfigFlag, "", "TOML file of settings, one key per flag name (queue-depth = 8); flags and environment variables win over it")
	fs.StringVar(&c.Addr, "addr", DefaultAddr, "listen address (host:port)")
	fs.StringVar(&c.DefaultCwd, "default-cwd", DefaultCwd, "working directory of contexts created without one; when it is not a directory, the workspace")
	fs.StringVar(&c.Workspace, "workspace", "", "directory contexts start in when default-cwd is not a directory, created (0700) if missing; empty: $XDG_DATA_HOME/kernelhost/workspace, else ~/.local/share/kernelhost/workspace")
	fs.StringVar(&envFile, "env-file", "", "path of a JSON object of global env vars every context gets")
	fs.StringVar(&envInline, "env", "", "JSON object of global env vars every context gets (wins over -env-file for the same key)")
	fs.StringVar(&policy, "disconnect-policy", string(core.DisconnectInterrupt), "what happens to running code when its client leaves: interrupt or continue")
	fs.DurationVar(&c.InterruptGrace, "interrupt-grace", 5*time.Second, "after an interrupt that was ignored this long, the context is restarted")
	fs.IntVar(&c.QueueDepth, "queue-depth", 32, "executions that may wait per context before requests get 429")
	fs.IntVar(&c.MaxEnvVars, "max-env-vars", DefaultMaxEnvVars, "env_vars one execution may set (400 above): each costs the interpreter a setenv, linear in its environment's size")
	fs.IntVar(&c.MaxEnvBytes, "max-env-bytes", DefaultMaxEnvBytes, "bytes of one execution's env_vars, names and values together (400 above)")
	fs.Int64Var(&c.MaxBodyBytes, "max-body-bytes", DefaultMaxBodyBytes, "largest request body accepted (413 above)")
	fs.IntVar(&c.MaxOutputBytes, "max-output-bytes", 64<<20, "output buffered per execution for a slow client before it is dropped")
	fs.IntVar(&c.MaxBufferedBytes, "max-buffered-bytes", 256<<20, "output buffered for slow clients across all executions; past it the stream furthest behind is cut (its execution goes on and can be re-attached); 0: no bound")
	fs.IntVar(&c.ReplayBytes, "replay-bytes", 256<<10, "newest output kept per execution for a client that re-attaches (GET /executions/{id}/stream); each output counts its text and about 200 bytes")
	fs.DurationVar(&c.ReplayTTL, "replay-ttl", 5*time.Minute, "how long a finished execution stays available to GET /executions/{id} and re-attaching")
	fs.DurationVar(&c.Keepalive, "keepalive", DefaultKeepalive, "silence on an /execute stream before a keepalive line")
	fs.IntVar(&c.MaxContexts, "max-contexts", DefaultMaxContexts, "live contexts at most (each is an interpreter); beyond it POST /contexts gets 429; 0: no limit")
	fs.DurationVar(&c.ExecutionTimeout, "execution-timeout", 0, "default bound on an execution's run (an /execute body's \"timeout\" in seconds overrides it); the stream ends with an ExecutionTimeout error and the code is interrupted; 0: none")
	fs.DurationVar(&c.ReadHeaderTimeout, "read-header-timeout", DefaultReadHeaderTimeout, "time a client has to send a request's headers")
	fs.DurationVar(&c.ReadTimeout, "read-timeout", DefaultReadTimeout, "time a client has to send a request's headers and body (not the response: streams last as long as the code)")
	fs.DurationVar(&c.WriteTimeout, "write-timeout", DefaultWriteTimeout, "a stream's client that takes none of a write for this long is cut (the disconnect policy applies; the execution can be re-attached)")
	fs.DurationVar(&c.IdleTimeout, "idle-timeout", DefaultIdleTimeout, "an idle keep-alive connection is closed after this")
	fs.StringVar(&c.AccessToken, "access-token", "", "if set, clients must send \"Authorization: Bearer <token>\" (prefer the environment variable: flags show in ps); see -access-token-scope")
	fs.StringVar(&c.AccessTokenScope, "access-token-scope", ScopeAll, "where the access token is required: all (every route but /health) or execute (only /execute, which also accepts it as X-Access-Token as the official SDKs send it, and /executions/...)")
	fs.StringVar(&allowedHosts, "allowed-hosts", strings.Join(DefaultAllowedHosts, ","), "host names a request's Host header may name besides loopback names and addresses (DNS-rebinding protection), separated by commas: name, *.suffix, or * for any")
	fs.StringVar(&allowedOrigins, "allowed-origins", "", "browser origins allowed to call the API, with CORS (scheme://host[:port], separated by commas, or * for any); a request from another origin is refused; empty: no CORS")
	fs.StringVar(&c.Interpreters.Python, "python", "python3", "Python interpreter")
	fs.StringVar(&c.Interpreters.Node, "node", "node", "Node.js interpreter (javascript contexts)")
	fs.StringVar(&c.Interpreters.Bash, "bash", "bash", "bash interpreter")
	fs.BoolVar(&kernelCgroups, "kernel-cgroups", true, "subprocess transport: a cgroup per interpreter where cgroup v2 is writable, so delete, restart and shutdown end every process it started; false: its process tree only")
	fs.StringVar(&c.Interpreters.R, "rscript", "Rscript", "R's Rscript (r contexts; Debian r-base-core)")
	fs.StringVar(&c.Interpreters.Java, "java", "java", "a JDK's java, with javac beside it (java contexts, through jshell; Debian default-jdk-headless)")
	fs.StringVar(&c.TransportName, "transport", DefaultTransport, "transport plugin: subprocess (local interpreters), jupyter, or NAME for PLUGIN_DIR/kernelhost-transport-NAME")
	fs.StringVar(&c.PluginDir, "plugin-dir", DefaultPluginDir(), "directory of the transport plugins (make plugins builds them into bin/plugins)")
	fs.StringVar(&c.Jupyter.URL, "jupyter-url", "", "jupyter transport: the Jupyter Server's base URL (plugin default http://127.0.0.1:8888/)")
	fs.StringVar(&c.Jupyter.Token, "jupyter-token", "", "jupyter transport: the server's token (prefer the environment variable: flags show in ps)")
	fs.StringVar(&jupyterKernelEnv, "jupyter-kernel-env", "", "jupyter transport: JSON object sent as the \"env\" of every kernel-start request: Enterprise Gateway's KERNEL_USERNAME, KERNEL_NAMESPACE, KERNEL_LAUNCH_TIMEOUT and other KERNEL_* values (Kernel Gateway passes KERNEL_* into the kernel's environment)")
	fs.DurationVar(&c.Jupyter.StartTimeout, "jupyter-start-timeout", DefaultJupyterKernelTimeout, "jupyter transport: bound on a kernel-start request (Enterprise Gateway answers it once the remote kernel is up); a kernel created after its start was abandoned is deleted")
	fs.DurationVar(&c.Jupyter.ConnectTimeout, "jupyter-connect-timeout", DefaultJupyterKernelTimeout, "jupyter transport: bound on opening a kernel's websocket (the server holds it until the kernel answers: a slow kernel start shows here)")
	fs.DurationVar(&c.Jupyter.RestartTimeout, "jupyter-restart-timeout", DefaultJupyterKernelTimeout, "jupyter transport: bound on a kernel restart, until the new kernel answers")
	fs.StringVar(&c.Jupyter.CAFile, "jupyter-ca-file", "", "jupyter transport: PEM file of CA certificates trusted for the server besides the system's (a gateway with a private CA)")
	fs.StringVar(&c.Jupyter.ClientCert, "jupyter-client-cert", "", "jupyter transport: PEM client certificate for servers that require one (with -jupyter-client-key)")
	fs.StringVar(&c.Jupyter.ClientKey, "jupyter-client-key", "", "jupyter transport: PEM key of -jupyter-client-cert")
	fs.BoolVar(&c.Jupyter.InsecureSkipVerify, "jupyter-insecure-skip-verify", false, "jupyter transport: accept any server certificate; anyone on the path can read the token and the code: for testing a set-up only (logged as a warning)")
	fs.StringVar(&jupyterHeaders, "jupyter-headers", "", "jupyter transport: JSON object of headers added to every request to the server (an auth proxy in front of a gateway); prefer the environment variable if they hold secrets")
	fs.StringVar(&kernelNames, "jupyter-kernel-names", "", "jupyter transport: JSON object mapping a language to the kernel spec to start for it ({\"python\":\"python_kubernetes\"}); otherwise the server's default spec of that language, else the first by name")
	fs.DurationVar(&c.Jupyter.KeepAlive, "jupyter-keep-alive", 0, "jupyter transport: if set, every kernel gets a kernel_info_request this often, so a server that culls idle kernels (cull_idle_timeout) keeps them while their contexts exist; set it below the cull timeout; 0: off")
	fs.DurationVar(&c.DefaultStartRetry, "default-start-retry", 0, "how long a failed start of the default contexts is retried (backoff 1s doubling to 30s) before start-up fails; /health says what it waits for; 0: fail at once")
	fs.StringVar(&c.Policies, "policies", "", "env-var policy modules: .wasm paths separated by commas, or @FILE listing them; SIGHUP reloads them")
	fs.StringVar(&logFormat, "log-format", "text", "log format: text or json")
	fs.StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.StringVar(&c.PprofAddr, "pprof-addr", "", "if set, serve net/http/pprof (/debug/pprof/) on this separate address; use a loopback address (profiles show memory contents); empty: off")
	fs.Usage = func() {}
	if err := parseSources(fs, args, getenv); errors.Is(err, flag.ErrHelp) {
		printUsage(stderr, fs, name)
		return Config{}, err
	} else if err != nil {
		return Config{}, err
	}

	c.NoKernelCgroups = !kernelCgroups
	var err error
	if c.DisconnectPolicy, err = core.ParseDisconnectPolicy(policy); err != nil {
		return Config{}, err
	}
	if c.GlobalEnv, err = loadGlobalEnv(envFile, envInline); err != nil {
		return Config{}, err
	}
	if c.Jupyter.KernelEnv, err = parseEnvObject("jupyter-kernel-env", jupyterKernelEnv); err != nil {
		return Config{}, err
	}
	if c.Jupyter.Headers, err = parseEnvObject("jupyter-headers", jupyterHeaders); err != nil {
		return Config{}, err
	}
	if c.Jupyter.KernelNames, err = parseEnvObject("jupyter-kernel-names", kernelNames); err != nil {
		return Config{}, err
	}
	if c.MaxBodyBytes <= 0 {
		return Config{}, fmt.Errorf("max-body-bytes must be positive, got %d", c.MaxBodyBytes)
	}
	c.AllowedHosts, c.AllowedOrigins = parseList(allowedHosts), parseList(allowedOrigins)
	if c.AllowedHosts == nil {
		c.AllowedHosts = []string{} // only loopback names and addresses
	}
	if err := checkAllowedHosts(c.AllowedHosts); err != nil {
		return Config{}, err
	}
	if err := checkAllowedOrigins(c.AllowedOrigins); err != nil {
		return Config{}, err
	}
	if err := checkTransportName(c.TransportName); err != nil {
		return Config{}, err
	}
	if err := checkLimits(c); err != nil {
		return Config{}, err
	}
	if c.MaxContexts == 0 {
		c.MaxContexts = -1 // the flag's "no limit" is Config's negative
	}
	if c.MaxBufferedBytes == 0 {
		c.MaxBufferedBytes = -1 // the same for the buffer of slow clients
	}
	// An empty variable counts as unset for policy configs too, like every
	// other setting here.
	c.LookupEnv = func(k string) (string, bool) { v := getenv(k); return v, v != "" }
	if c.Logger, err = newLogger(stderr, logFormat, logLevel); err != nil {
		return Config{}, err
	}
	return c, nil
}

// checkTransportName accepts plugin names only, not paths: the plugin is
// always looked up in the plugin directory.
func checkTransportName(name string) error {
	if name == "" {
		return fmt.Errorf("%s is empty: want subprocess, jupyter or a plugin name", EnvVar("transport"))
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') || name == "." || name == ".." {
			return fmt.Errorf("transport %q: want a plugin name (letters, digits, - _ .), not a path; put the plugin in %s", name, EnvVar("plugin-dir"))
		}
	}
	return nil
}

// checkLimits refuses negative limits and timeouts (0 means "none" or
// "default" as each setting says) and an unknown token scope.
func checkLimits(c Config) error {
	if c.ExecutionTimeout < 0 {
		return fmt.Errorf("%s must not be negative, got %v", EnvVar("execution-timeout"), c.ExecutionTimeout)
	}
	// No "none" for the HTTP timeouts: without them one client holds a
	// connection and a goroutine for ever (slowloris).
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{{"read-header-timeout", c.ReadHeaderTimeout}, {"read-timeout", c.ReadTimeout}, {"idle-timeout", c.IdleTimeout}, {"write-timeout", c.WriteTimeout}} {
		if d.v <= 0 {
			return fmt.Errorf("%s must be positive, got %v", EnvVar(d.flag), d.v)
		}
	}
	if c.MaxContexts < 0 {
		return fmt.Errorf("%s must not be negative, got %d", EnvVar("max-contexts"), c.MaxContexts)
	}
	if c.MaxBufferedBytes < 0 {
		return fmt.Errorf("%s must not be negative, got %d", EnvVar("max-buffered-bytes"), c.MaxBufferedBytes)
	}
	for _, l := range []struct {
		flag string
		v    int
	}{{"max-env-vars", c.MaxEnvVars}, {"max-env-bytes", c.MaxEnvBytes}} {
		if l.v <= 0 {
			return fmt.Errorf("%s must be positive, got %d", EnvVar(l.flag), l.v)
		}
	}
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{{"jupyter-start-timeout", c.Jupyter.StartTimeout}, {"jupyter-connect-timeout", c.Jupyter.ConnectTimeout},
		{"jupyter-restart-timeout", c.Jupyter.RestartTimeout}} {
		if d.v <= 0 {
			return fmt.Errorf("%s must be positive, got %v", EnvVar(d.flag), d.v)
		}
	}
	if c.Jupyter.KeepAlive < 0 {
		return fmt.Errorf("%s must not be negative, got %v", EnvVar("jupyter-keep-alive"), c.Jupyter.KeepAlive)
	}
	if c.DefaultStartRetry < 0 {
		return fmt.Errorf("%s must not be negative, got %v", EnvVar("default-start-retry"), c.DefaultStartRetry)
	}
	// A token with surrounding spaces never matches what a client's header
	// parser hands over. The message does not echo the token.
	if strings.TrimSpace(c.AccessToken) != c.AccessToken {
		return fmt.Errorf("%s has leading or trailing white space", EnvVar("access-token"))
	}
	if c.AccessTokenScope != ScopeAll && c.AccessTokenScope != ScopeExecute {
		return fmt.Errorf("%s %q: want %s or %s", EnvVar("access-token-scope"), c.AccessTokenScope, ScopeAll, ScopeExecute)
	}
	return nil
}

// EnvVar is the environment variable of a flag: -default-cwd → KERNELHOST_DEFAULT_CWD.
func EnvVar(flagName string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

func loadGlobalEnv(file, inline string) (map[string]string, error) {
	env := map[string]string{}
	if file != "" {
		data, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("read global env file: %w", err)
		}
		if err := json.Unmarshal(data, &env); err != nil {
			return nil, fmt.Errorf("global env file %s: want a JSON object of strings: %w", file, err)
		}
	}
	m, err := parseEnvObject("env", inline)
	if err != nil {
		return nil, err
	}
	for k, v := range m {
		env[k] = v
	}
	return env, nil
}

// parseEnvObject parses the JSON object of strings of setting flagName; an
// empty value is nil.
func parseEnvObject(flagName, value string) (map[string]string, error) {
	if value == "" {
		return nil, nil
	}
	var m map[string]string
	if err := json.Unmarshal([]byte(value), &m); err != nil {
		// The value may hold secrets: name the setting, not the text.
		return nil, fmt.Errorf("%s: want a JSON object of strings: %w", EnvVar(flagName), err)
	}
	return m, nil
}

func newLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("log level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("log format %q: want text or json", format)
}
