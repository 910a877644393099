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
	"github.com/kernelhost/kernelhost/core/engine"
	"github.com/kernelhost/kernelhost/plugins/policy"
)

// EnvPrefix prefixes the environment variable of every setting: the flag
// -default-cwd is also KERNELHOST_DEFAULT_CWD.
const EnvPrefix = "KERNELHOST_"

// Config is the host's configuration. A zero field takes its setting's default
// (settingsTable; Load starts from the same defaults); "no limit" is -1.
type Config struct {
	Addr       string // listen address
	DefaultCwd string // cwd of contexts created without one
	// Workspace is where contexts start when DefaultCwd is not a directory
	// (outside an E2B sandbox /home/user rarely is); created if missing,
	// never the host's own working directory. "": DefaultWorkspace().
	Workspace        string
	GlobalEnv        map[string]string // env vars every context gets
	DisconnectPolicy engine.DisconnectPolicy
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
	// 0: the default (256 MiB); negative: no bound.
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
	// (1 s per call, 10 s to start an instance, 32 MiB per instance).
	PolicyOptions policy.Options
	// LookupEnv finds a policy module's KERNELHOST_POLICY_CONFIG_<NAME>.
	// Default: no such variables (each module's .config file, if any).
	LookupEnv func(string) (string, bool)

	// DefaultStartRetry is how long start-up keeps being retried, with
	// backoff, after a failure (a gateway not up yet, a slow or busy
	// cluster): the transport plugin's start, then the default contexts'
	// (/health says what it waits for). 0: the first failure ends start-up.
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
	// Sandbox is the subprocess transport's sandbox mode: auto (""), on or
	// off (subprocess.SandboxOptions).
	Sandbox string
	// SandboxWritable lists, separated by commas, host paths every sandbox
	// may write besides the default cwd, the context's cwd and the user's
	// ~/.local, ~/.cache (but its kernelhost directory) and ~/.npm.
	SandboxWritable string
	// InterpreterPool sizes the subprocess transport's warm pools of ready
	// interpreters: "language=size" pairs separated by commas.
	InterpreterPool string
	// PythonPreload is what the python fork server preloads
	// (subprocess.ParsePreload): auto, off, or module names.
	PythonPreload string
	// MaxMessageBytes caps one message of a subprocess interpreter (one
	// output message, one result, one batch of them): past it the output
	// is cut with a notice and the execution goes on.
	MaxMessageBytes int
	// ContextMemory, ContextPids and ContextCPUWeight bound each subprocess
	// interpreter (subprocess.Limits): a size ("512MiB"), processes, and a
	// cgroup CPU weight (1-10000); empty or 0: none.
	ContextMemory    string
	ContextPids      int
	ContextCPUWeight int

	// Transport, if set, is used instead of launching a plugin (tests run
	// transports in-process this way). The caller owns it.
	Transport core.Transport

	// Settings Load turns into GlobalEnv and Logger.
	envFile, envInline, logFormat, logLevel string
	// The token files Load reads into AccessToken and Jupyter.Token.
	accessTokenFile, jupyterTokenFile string
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
	DefaultMaxBodyBytes = 16 << 20
	// DefaultMaxMessageBytes is the subprocess transport's own default
	// (subprocess.DefaultMaxMessageBytes).
	DefaultMaxMessageBytes = 16 << 20
	DefaultKeepalive       = 5 * time.Second
	DefaultTransport       = "subprocess"
	DefaultMaxContexts     = 64
	// DefaultJupyterURL is where the jupyter transport finds its server.
	DefaultJupyterURL = "http://127.0.0.1:8888/"
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

// The settings table: every setting of the host, once. Each row names the
// setting (its flag; its environment variable is EnvVar(name), its config
// file key the name), its default, its help, its check, where Config holds
// it and which transport plugin receives it. From it come the flags (Load),
// the environment variables and config file keys (parseSources), -help
// (printUsage), the defaults of a Config built in code (withDefaults), the
// validation (validate) and the settings a plugin receives (pluginSettings).
// docs/operating.md's table is checked against it (TestOperatingDocSettings).
//
// A row's T is the flag's Go type (string, int, int64, bool or
// time.Duration), so flag parses it and -help names its type as for any
// flag. In Config the zero value of a setting means its default (Config{}
// is a host with every default); settings that Config holds in another form
// (a JSON object, a list, "no limit") convert in load and out.
// engineDefaults are the engine's own defaults, the defaults of the
// settings that configure it.
var engineDefaults = engine.Defaults()

var settingsTable = []setting{
	&row[string]{name: ConfigFlag, help: "TOML file of settings, one key per flag name (queue-depth = 8); flags and environment variables win over it"},
	&row[string]{name: "addr", def: DefaultAddr, help: "listen address (host:port)",
		field: func(c *Config) *string { return &c.Addr }},
	// The subprocess plugin gets it for its warm pools (the resolved one:
	// Start), whose interpreters start there.
	&row[string]{name: "default-cwd", def: engineDefaults.DefaultCwd, help: "working directory of contexts created without one; when it is not a directory, the workspace",
		field: func(c *Config) *string { return &c.DefaultCwd }, transport: "subprocess"},
	&row[string]{name: "workspace", help: "directory contexts start in when default-cwd is not a directory, created (0700) if missing; empty: $XDG_DATA_HOME/kernelhost/workspace, else ~/.local/share/kernelhost/workspace",
		field: func(c *Config) *string { return &c.Workspace }},
	&row[string]{name: "env-file", help: "path of a JSON object of global env vars every context gets",
		field: func(c *Config) *string { return &c.envFile }},
	&row[string]{name: "env", help: "JSON object of global env vars every context gets (wins over -env-file for the same key)",
		field: func(c *Config) *string { return &c.envInline }},
	&row[string]{name: "disconnect-policy", def: string(engineDefaults.DisconnectPolicy), help: "what happens to running code when its client leaves: interrupt or continue",
		load: func(c *Config, v string) (err error) {
			c.DisconnectPolicy, err = engine.ParseDisconnectPolicy(v)
			return err
		},
		out: func(c *Config) string { return string(c.DisconnectPolicy) }},
	&row[time.Duration]{name: "interrupt-grace", def: engineDefaults.InterruptGrace, help: "after an interrupt that was ignored this long, the context is restarted",
		field: func(c *Config) *time.Duration { return &c.InterruptGrace }, check: positive[time.Duration]},
	&row[int]{name: "queue-depth", def: engineDefaults.QueueDepth, help: "executions that may wait per context before requests get 429",
		field: func(c *Config) *int { return &c.QueueDepth }, check: positive[int]},
	&row[int]{name: "max-env-vars", def: engineDefaults.MaxEnvVars, help: "env_vars one execution may set (400 above): each costs the interpreter a setenv, linear in its environment's size",
		field: func(c *Config) *int { return &c.MaxEnvVars }, check: positive[int]},
	&row[int]{name: "max-env-bytes", def: engineDefaults.MaxEnvBytes, help: "bytes of one execution's env_vars, names and values together (400 above)",
		field: func(c *Config) *int { return &c.MaxEnvBytes }, check: positive[int]},
	&row[int64]{name: "max-body-bytes", def: DefaultMaxBodyBytes, help: "largest request body accepted (413 above)",
		field: func(c *Config) *int64 { return &c.MaxBodyBytes }, check: positive[int64]},
	&row[int]{name: "max-output-bytes", def: engineDefaults.MaxOutputBytes, help: "output buffered per execution for a slow client before it is dropped",
		field: func(c *Config) *int { return &c.MaxOutputBytes }, check: positive[int]},
	noLimit("max-buffered-bytes", engineDefaults.MaxBufferedBytes, "output buffered for slow clients across all executions; past it the stream furthest behind is cut (its execution goes on and can be re-attached); 0: no bound",
		func(c *Config) *int { return &c.MaxBufferedBytes }),
	&row[int]{name: "replay-bytes", def: engineDefaults.ReplayBytes, help: "newest output kept per execution for a client that re-attaches (GET /executions/{id}/stream); each output counts its text and about 200 bytes",
		field: func(c *Config) *int { return &c.ReplayBytes }, check: positive[int]},
	&row[time.Duration]{name: "replay-ttl", def: engineDefaults.ReplayTTL, help: "how long a finished execution stays available to GET /executions/{id} and re-attaching",
		field: func(c *Config) *time.Duration { return &c.ReplayTTL }, check: positive[time.Duration]},
	&row[time.Duration]{name: "keepalive", def: DefaultKeepalive, help: "silence on an /execute stream before a keepalive line",
		field: func(c *Config) *time.Duration { return &c.Keepalive }, check: positive[time.Duration]},
	noLimit("max-contexts", DefaultMaxContexts, "live contexts at most (each is an interpreter); beyond it POST /contexts gets 429; 0: no limit",
		func(c *Config) *int { return &c.MaxContexts }),
	&row[time.Duration]{name: "execution-timeout", help: "default bound on an execution's run (an /execute body's \"timeout\" in seconds overrides it); the stream ends with an ExecutionTimeout error and the code is interrupted; 0: none",
		field: func(c *Config) *time.Duration { return &c.ExecutionTimeout }, check: notNegative[time.Duration]},
	// No "none" for the HTTP timeouts: without them one client holds a
	// connection and a goroutine for ever (slowloris).
	&row[time.Duration]{name: "read-header-timeout", def: DefaultReadHeaderTimeout, help: "time a client has to send a request's headers",
		field: func(c *Config) *time.Duration { return &c.ReadHeaderTimeout }, check: positive[time.Duration]},
	&row[time.Duration]{name: "read-timeout", def: DefaultReadTimeout, help: "time a client has to send a request's headers and body (not the response: streams last as long as the code)",
		field: func(c *Config) *time.Duration { return &c.ReadTimeout }, check: positive[time.Duration]},
	&row[time.Duration]{name: "write-timeout", def: DefaultWriteTimeout, help: "a stream's client that takes none of a write for this long is cut (the disconnect policy applies; the execution can be re-attached)",
		field: func(c *Config) *time.Duration { return &c.WriteTimeout }, check: positive[time.Duration]},
	&row[time.Duration]{name: "idle-timeout", def: DefaultIdleTimeout, help: "an idle keep-alive connection is closed after this",
		field: func(c *Config) *time.Duration { return &c.IdleTimeout }, check: positive[time.Duration]},
	&row[string]{name: "access-token", help: "if set, clients must send \"Authorization: Bearer <token>\" (prefer the environment variable: flags show in ps); see -access-token-scope",
		field: func(c *Config) *string { return &c.AccessToken }, check: checkAccessToken},
	&row[string]{name: "access-token-file", help: "file holding the access token (trailing line breaks dropped), instead of -access-token: nothing shows it in ps or /proc/<pid>/environ (systemd: LoadCredential=access-token:/path and KERNELHOST_ACCESS_TOKEN_FILE=%d/access-token)",
		field: func(c *Config) *string { return &c.accessTokenFile }},
	&row[string]{name: "access-token-scope", def: ScopeAll, help: "where the access token is required: all (every route but /health) or execute (only /execute, which also accepts it as X-Access-Token as the official SDKs send it, /executions/... and /mcp)",
		field: func(c *Config) *string { return &c.AccessTokenScope }, check: checkTokenScope},
	list("allowed-hosts", DefaultAllowedHosts, "host names a request's Host header may name besides loopback names and addresses (DNS-rebinding protection), separated by commas: name, *.suffix, or * for any",
		func(c *Config) *[]string { return &c.AllowedHosts }, checkAllowedHosts),
	list("allowed-origins", nil, "browser origins allowed to call the API, with CORS (scheme://host[:port], separated by commas, or * for any); a request from another origin is refused; empty: no CORS",
		func(c *Config) *[]string { return &c.AllowedOrigins }, checkAllowedOrigins),

	// The subprocess transport's.
	&row[string]{name: "python", def: "python3", help: "Python interpreter", transport: "subprocess",
		field: func(c *Config) *string { return &c.Interpreters.Python }},
	&row[string]{name: "node", def: "node", help: "Node.js interpreter (javascript contexts)", transport: "subprocess",
		field: func(c *Config) *string { return &c.Interpreters.Node }},
	&row[string]{name: "bash", def: "bash", help: "bash interpreter", transport: "subprocess",
		field: func(c *Config) *string { return &c.Interpreters.Bash }},
	&row[string]{name: "rscript", def: "Rscript", help: "R's Rscript (r contexts; Debian r-base-core)", transport: "subprocess",
		field: func(c *Config) *string { return &c.Interpreters.R }},
	&row[string]{name: "java", def: "java", help: "a JDK's java, with javac beside it (java contexts, through jshell; Debian default-jdk-headless)", transport: "subprocess",
		field: func(c *Config) *string { return &c.Interpreters.Java }},
	&row[string]{name: "interpreter-pool", def: "python=1,javascript=1", help: "subprocess transport: ready interpreters kept per language for new contexts and restarts (python, javascript and typescript in any cwd, others in the default cwd), as language=size pairs separated by commas (python=2,javascript=1,r=1); languages not named have none; python=0,javascript=0 turns them off", transport: "subprocess",
		field: func(c *Config) *string { return &c.InterpreterPool }},
	&row[string]{name: "python-preload", def: "auto", help: "subprocess transport: python contexts are forked from a template interpreter that imported these modules (names separated by commas), so a new context starts with them loaded and shares their memory; auto: those of numpy, pandas, matplotlib.pyplot (its inline backend) and IPython that are installed; off: no template. Off while interpreters are sandboxed", transport: "subprocess",
		field: func(c *Config) *string { return &c.PythonPreload }},
	&row[int]{name: "max-message-bytes", def: DefaultMaxMessageBytes, help: "subprocess transport: largest message an interpreter may send (one output write, one result or display, one batch of them); past it the output is cut, with a notice in the stream saying how much was dropped, and the execution goes on with its state", transport: "subprocess",
		field: func(c *Config) *int { return &c.MaxMessageBytes }, check: checkMaxMessageBytes},
	negated("kernel-cgroups", "subprocess transport: a cgroup per interpreter where cgroup v2 is writable, so delete, restart and shutdown end every process it started; false: its process tree only", "subprocess",
		func(c *Config) *bool { return &c.NoKernelCgroups }),
	&row[string]{name: "sandbox", def: "auto", help: "subprocess transport: each interpreter in a bubblewrap sandbox of its own (own PID, IPC and mount namespaces, own /tmp, the host's files read-only but the writable paths): auto (where bwrap works here, else a warning), on (no interpreter without one) or off", transport: "subprocess",
		field: func(c *Config) *string { return &c.Sandbox }, check: checkSandbox},
	&row[string]{name: "sandbox-writable", help: "subprocess transport: host paths, separated by commas, that every sandbox may write besides the default cwd, the context's cwd and the user's ~/.local, ~/.cache and ~/.npm (a pip or conda prefix, a shared data directory)", transport: "subprocess",
		field: func(c *Config) *string { return &c.SandboxWritable }},
	&row[string]{name: "context-memory", transport: "subprocess", help: "subprocess transport: memory one context's interpreter and everything it starts may use (512MiB, 2G; empty: no limit), in its cgroup; past it the interpreter is killed, the execution ends with MemoryLimitExceeded and the context restarts without its state; no interpreter starts where no memory cgroup controller can apply it",
		field: func(c *Config) *string { return &c.ContextMemory }},
	&row[int]{name: "context-pids", transport: "subprocess", help: "subprocess transport: processes and threads one context's interpreter may have at once, itself included (0: no limit); past it fork fails; no interpreter starts where no pids cgroup controller can apply it",
		field: func(c *Config) *int { return &c.ContextPids }, check: notNegative[int]},
	&row[int]{name: "context-cpu-weight", transport: "subprocess", help: "subprocess transport: one context's share of the CPU when several are busy, 1-10000 as cgroup v2's cpu.weight (100 is everyone's default; 0: not set); no interpreter starts where no cpu cgroup controller can apply it",
		field: func(c *Config) *int { return &c.ContextCPUWeight }, check: notNegative[int]},

	&row[string]{name: "transport", def: DefaultTransport, help: "transport plugin: subprocess (local interpreters), jupyter, or NAME for PLUGIN_DIR/kernelhost-transport-NAME",
		field: func(c *Config) *string { return &c.TransportName }, check: checkTransportName},
	&row[string]{name: "plugin-dir", def: DefaultPluginDir(), help: "directory of the transport plugins (make plugins builds them into bin/plugins)",
		field: func(c *Config) *string { return &c.PluginDir }},

	// The jupyter transport's.
	&row[string]{name: "jupyter-url", def: DefaultJupyterURL, help: "jupyter transport: the Jupyter Server's base URL", transport: "jupyter",
		field: func(c *Config) *string { return &c.Jupyter.URL }},
	&row[string]{name: "jupyter-token", help: "jupyter transport: the server's token (prefer the environment variable: flags show in ps)", transport: "jupyter",
		field: func(c *Config) *string { return &c.Jupyter.Token }},
	&row[string]{name: "jupyter-token-file", help: "jupyter transport: file holding the server's token (trailing line breaks dropped), instead of -jupyter-token",
		field: func(c *Config) *string { return &c.jupyterTokenFile }},
	jsonObject("jupyter-kernel-env", "jupyter transport: JSON object sent as the \"env\" of every kernel-start request: Enterprise Gateway's KERNEL_USERNAME, KERNEL_NAMESPACE, KERNEL_LAUNCH_TIMEOUT and other KERNEL_* values (Kernel Gateway passes KERNEL_* into the kernel's environment)",
		func(c *Config) *map[string]string { return &c.Jupyter.KernelEnv }),
	&row[time.Duration]{name: "jupyter-start-timeout", def: DefaultJupyterKernelTimeout, help: "jupyter transport: bound on a kernel-start request (Enterprise Gateway answers it once the remote kernel is up); a kernel created after its start was abandoned is deleted", transport: "jupyter",
		field: func(c *Config) *time.Duration { return &c.Jupyter.StartTimeout }, check: positive[time.Duration]},
	&row[time.Duration]{name: "jupyter-connect-timeout", def: DefaultJupyterKernelTimeout, help: "jupyter transport: bound on opening a kernel's websocket (the server holds it until the kernel answers: a slow kernel start shows here)", transport: "jupyter",
		field: func(c *Config) *time.Duration { return &c.Jupyter.ConnectTimeout }, check: positive[time.Duration]},
	&row[time.Duration]{name: "jupyter-restart-timeout", def: DefaultJupyterKernelTimeout, help: "jupyter transport: bound on a kernel restart, until the new kernel answers", transport: "jupyter",
		field: func(c *Config) *time.Duration { return &c.Jupyter.RestartTimeout }, check: positive[time.Duration]},
	&row[string]{name: "jupyter-ca-file", help: "jupyter transport: PEM file of CA certificates trusted for the server besides the system's (a gateway with a private CA)", transport: "jupyter",
		field: func(c *Config) *string { return &c.Jupyter.CAFile }},
	&row[string]{name: "jupyter-client-cert", help: "jupyter transport: PEM client certificate for servers that require one (with -jupyter-client-key)", transport: "jupyter",
		field: func(c *Config) *string { return &c.Jupyter.ClientCert }},
	&row[string]{name: "jupyter-client-key", help: "jupyter transport: PEM key of -jupyter-client-cert", transport: "jupyter",
		field: func(c *Config) *string { return &c.Jupyter.ClientKey }},
	&row[bool]{name: "jupyter-insecure-skip-verify", help: "jupyter transport: accept any server certificate; anyone on the path can read the token and the code: for testing a set-up only (logged as a warning)", transport: "jupyter",
		field: func(c *Config) *bool { return &c.Jupyter.InsecureSkipVerify }},
	jsonObject("jupyter-headers", "jupyter transport: JSON object of headers added to every request to the server (an auth proxy in front of a gateway); prefer the environment variable if they hold secrets",
		func(c *Config) *map[string]string { return &c.Jupyter.Headers }),
	jsonObject("jupyter-kernel-names", "jupyter transport: JSON object mapping a language to the kernel spec to start for it ({\"python\":\"python_kubernetes\"}); otherwise the server's default spec of that language, else the first by name",
		func(c *Config) *map[string]string { return &c.Jupyter.KernelNames }),
	&row[time.Duration]{name: "jupyter-keep-alive", help: "jupyter transport: if set, every kernel gets a kernel_info_request this often, so a server that culls idle kernels (cull_idle_timeout) keeps them while their contexts exist; set it below the cull timeout; 0: off", transport: "jupyter",
		field: func(c *Config) *time.Duration { return &c.Jupyter.KeepAlive }, check: notNegative[time.Duration]},

	&row[time.Duration]{name: "default-start-retry", help: "how long a failed start-up is retried (the transport plugin's start, e.g. a Jupyter gateway not up yet, then the default contexts; backoff 1s doubling to 30s) before it fails; /health says what it waits for; 0: fail at once",
		field: func(c *Config) *time.Duration { return &c.DefaultStartRetry }, check: notNegative[time.Duration]},
	&row[string]{name: "policies", help: "env-var policy modules: .wasm paths separated by commas, or @FILE listing them; SIGHUP reloads them",
		field: func(c *Config) *string { return &c.Policies }},
	&row[string]{name: "log-format", def: "text", help: "log format: text or json",
		field: func(c *Config) *string { return &c.logFormat }},
	&row[string]{name: "log-level", def: "info", help: "log level: debug, info, warn or error",
		field: func(c *Config) *string { return &c.logLevel }},
	&row[string]{name: "pprof-addr", help: "if set, serve net/http/pprof (/debug/pprof/) on this separate address; use a loopback address (profiles show memory contents); empty: off",
		field: func(c *Config) *string { return &c.PprofAddr }},
}

// Load reads the configuration from command-line flags, KERNELHOST_*
// environment variables and the TOML config file named by -config (or
// KERNELHOST_CONFIG), in that precedence, over the defaults (see parseSources):
// the settings of settingsTable. name heads the usage -help prints to
// stderr. getenv is os.Getenv outside tests.
func Load(name string, args []string, getenv func(string) string, stderr io.Writer) (Config, error) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	// Errors are returned, not printed with the whole usage after them; the
	// usage goes to stderr for -help only.
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	table := settingsTable
	apply := make([]func(*Config) error, len(table))
	for i, s := range table {
		apply[i] = s.register(fs)
	}
	if err := parseSources(fs, args, getenv); errors.Is(err, flag.ErrHelp) {
		printUsage(stderr, fs, name)
		return Config{}, err
	} else if err != nil {
		return Config{}, err
	}
	var c Config
	for _, a := range apply {
		if err := a(&c); err != nil {
			return Config{}, err
		}
	}
	if err := c.readTokenFiles(); err != nil {
		return Config{}, err
	}
	if err := c.validate(); err != nil {
		return Config{}, err
	}
	var err error
	if c.GlobalEnv, err = loadGlobalEnv(c.envFile, c.envInline); err != nil {
		return Config{}, err
	}
	// An empty variable counts as unset for policy configs too, like every
	// other setting here.
	c.LookupEnv = func(k string) (string, bool) { v := getenv(k); return v, v != "" }
	if c.Logger, err = newLogger(stderr, c.logFormat, c.logLevel); err != nil {
		return Config{}, err
	}
	return c, nil
}

// readTokenFiles reads -access-token-file and -jupyter-token-file into the
// tokens; a token given both ways is an error.
func (c *Config) readTokenFiles() error {
	for _, f := range []struct {
		name, file string
		token      *string
	}{{"access-token", c.accessTokenFile, &c.AccessToken}, {"jupyter-token", c.jupyterTokenFile, &c.Jupyter.Token}} {
		if f.file == "" {
			continue
		}
		if *f.token != "" {
			return fmt.Errorf("%s and %s-file are both set: give the token one way", f.name, f.name)
		}
		b, err := os.ReadFile(f.file)
		if err != nil {
			return fmt.Errorf("%s-file: %w", f.name, err)
		}
		if *f.token = strings.TrimRight(string(b), "\r\n"); *f.token == "" {
			return fmt.Errorf("%s-file %s is empty", f.name, f.file)
		}
	}
	return nil
}

// withDefaults gives every setting c leaves zero its default (settingsTable).
func withDefaults(c Config) Config {
	for _, s := range settingsTable {
		s.setDefault(&c)
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// validate checks every setting (settingsTable).
func (c *Config) validate() error {
	for _, s := range settingsTable {
		if err := s.validate(c); err != nil {
			return err
		}
	}
	return nil
}

// maxMessageCap bounds max-message-bytes: half the plugin protocol's
// 256 MiB message limit, room for a message's JSON and protobuf framing.
const maxMessageCap = 128 << 20

func checkMaxMessageBytes(v int) error {
	if v < 4<<10 || v > maxMessageCap {
		return fmt.Errorf("must be between 4096 and %d, got %d", maxMessageCap, v)
	}
	return nil
}

// pluginSettings are the settings of c the plugin of c.TransportName
// receives, by name, as the table's types: a string, int, int64, bool,
// time.Duration or map[string]string.
func pluginSettings(c Config) map[string]any {
	out := map[string]any{}
	for _, s := range settingsTable {
		if v, ok := s.pluginValue(&c, c.TransportName); ok {
			out[s.flagName()] = v
		}
	}
	return out
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
	m, err := parseObject("env", inline)
	if err != nil {
		return nil, err
	}
	for k, v := range m {
		env[k] = v
	}
	return env, nil
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
