// Package settings is the host's configuration: Config, and Load, which
// reads it from flags, KERNELHOST_* environment variables and a TOML file.
// It owns the table of the host's settings (each one's name, default, help,
// check and field), the settings the transport plugins declare (asked of
// each plugin with -describe and merged in), -help, which of them a plugin
// receives (ForPlugin) and the host's bounds that follow from them
// (BoundsOf), and the host's private files (PrivatePaths).
// docs/operating.md's table is checked against it.
package settings

import (
	"cmp"
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
	"github.com/kernelhost/kernelhost/hostcmd/envd"
	"github.com/kernelhost/kernelhost/plugins/policy"
)

// envPrefix prefixes the environment variable of every setting: the flag
// -default-cwd is also KERNELHOST_DEFAULT_CWD.
const envPrefix = "KERNELHOST_"

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
	// MCPMaxSessions bounds the open MCP sessions on /mcp; past it an
	// initialize gets 403 and a JSON-RPC error naming the setting. 0:
	// DefaultMCPMaxSessions; negative: no limit.
	MCPMaxSessions int
	// MCPSessionIdle closes an MCP session whose client sent no request for
	// so long. 0: DefaultMCPSessionIdle.
	MCPSessionIdle time.Duration
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
	// off). nil: *.e2b.app and *.e2b.dev (E2B's sandbox names). A
	// DNS-rebinding page is refused.
	AllowedHosts []string
	// AllowedOrigins are the browser origins ("https://app.example.com")
	// that get CORS; a request with another Origin (not the host's own) is
	// refused. "*": every origin. Empty: no CORS.
	AllowedOrigins []string
	Logger         *slog.Logger

	// TransportName picks the transport plugin: the executable
	// PluginDir/kernelhost-transport-<TransportName>. Default "subprocess".
	TransportName string
	// PluginDir holds the transport plugins. Default: DefaultPluginDir().
	PluginDir string
	// TransportSettings are the transport plugins' settings (those the
	// plugins in PluginDir declare: python, sandbox, jupyter-url, ...), by
	// name, as a flag takes them ("2m", "true", a JSON object). The plugin
	// of TransportName gets those it declares, checked against its
	// description, and keeps its own defaults for the rest.
	TransportSettings map[string]string
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
	// SandboxAPIAddr is where the sandbox API (sbx.files, sbx.commands of the
	// E2B SDKs; sandboxapi.go) listens besides Addr, whose own paths serve it
	// too. "": off (the setting's "off"; Load's default is
	// DefaultSandboxAPIAddr).
	SandboxAPIAddr string
	// MaxUploadBytes bounds one file uploaded through the sandbox API (413
	// past it). 0: envd.DefaultMaxUploadBytes.
	MaxUploadBytes int64
	// DisableMetrics leaves out /metrics and the engine's Observer
	// (BenchmarkMetricsCost compares the two).
	DisableMetrics bool
	// Transport, if set, is used instead of launching a plugin (tests run
	// transports in-process this way). The caller owns it.
	Transport core.Transport

	// Settings Load turns into GlobalEnv and Logger.
	envFile, envInline, logFormat, logLevel string
	// The token file Load reads into AccessToken.
	accessTokenFile string
	// The config file Load read (-config) and the files of the plugins'
	// file settings, hidden from contexts and the sandbox API (hidden.go).
	configFile   string
	settingFiles []string
	// plugins are the descriptions Load had of the plugins' settings, so
	// the start does not ask the plugin again.
	plugins *pluginCatalog
}

// Defaults.
const (
	DefaultAddr         = "127.0.0.1:49999"
	DefaultMaxBodyBytes = 16 << 20
	DefaultKeepalive    = 5 * time.Second
	DefaultTransport    = "subprocess"
	DefaultMaxContexts  = 64
	// An MCP session costs the host some 15 KiB of bookkeeping, no
	// interpreter: room for many agents, not for a client that never closes.
	DefaultMCPMaxSessions = 256
	DefaultMCPSessionIdle = 30 * time.Minute

	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultReadTimeout       = 60 * time.Second
	// Upstream keeps idle connections 640 s; SDKs pool connections and an
	// earlier close races with reuse (ECONNRESET in the client).
	DefaultIdleTimeout = 640 * time.Second
	// A stream's client that takes no bytes for this long is gone (a
	// vanished peer, or one that stopped reading).
	DefaultWriteTimeout = 30 * time.Second
)

// DefaultSandboxAPIAddr is where the SDKs look for the sandbox API in debug
// mode (E2B_DEBUG=true: localhost:49983).
const DefaultSandboxAPIAddr = "127.0.0.1:49983"

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
// file key the name), its default, its help, its check and where Config
// holds it. From it come the flags (Load), the environment variables and
// config file keys (parseSources), -help (printUsage), the defaults of a
// Config built in code (withDefaults) and the validation (validate). The
// transport plugins' settings are not here: each plugin declares its own,
// and Load merges them in beside these (pluginsettings.go).
// docs/operating.md's table is checked against both
// (TestOperatingDocSettings).
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
	&row[string]{name: configFlag, help: "TOML file of settings, one key per flag name (queue-depth = 8); flags and environment variables win over it",
		field: func(c *Config) *string { return &c.configFile }},
	&row[string]{name: "addr", def: DefaultAddr, help: "listen address (host:port)",
		field: func(c *Config) *string { return &c.Addr }},
	// A plugin may take it (the subprocess plugin, for its warm pools'
	// interpreters): it gets the resolved one (Start).
	&row[string]{name: "default-cwd", def: engineDefaults.DefaultCwd, help: "working directory of contexts created without one; when it is not a directory, the workspace",
		field: func(c *Config) *string { return &c.DefaultCwd }},
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
	noLimit("mcp-max-sessions", DefaultMCPMaxSessions, "open MCP sessions on /mcp at most; past it an initialize gets 403 with a JSON-RPC error naming this setting, until a client ends its session (DELETE /mcp) or one expires (mcp-session-idle); 0: no limit",
		func(c *Config) *int { return &c.MCPMaxSessions }),
	&row[time.Duration]{name: "mcp-session-idle", def: DefaultMCPSessionIdle, help: "an MCP session whose client sent no request for this long is closed (its id then gets 404 session not found; the contexts stay)",
		field: func(c *Config) *time.Duration { return &c.MCPSessionIdle }, check: positive[time.Duration]},
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
	list("allowed-hosts", defaultAllowedHosts, "host names a request's Host header may name besides loopback names and addresses (DNS-rebinding protection), separated by commas: name, *.suffix, or * for any",
		func(c *Config) *[]string { return &c.AllowedHosts }, checkAllowedHosts),
	list("allowed-origins", nil, "browser origins allowed to call the API, with CORS (scheme://host[:port], separated by commas, or * for any); a request from another origin is refused; empty: no CORS",
		func(c *Config) *[]string { return &c.AllowedOrigins }, checkAllowedOrigins),

	&row[string]{name: "transport", def: DefaultTransport, help: "transport plugin: subprocess (local interpreters), jupyter, or NAME for PLUGIN_DIR/kernelhost-transport-NAME",
		field: func(c *Config) *string { return &c.TransportName }, check: checkTransportName},
	&row[string]{name: "plugin-dir", def: DefaultPluginDir(), help: "directory of the transport plugins (make plugins builds them into bin/plugins)",
		field: func(c *Config) *string { return &c.PluginDir }},

	&row[time.Duration]{name: "default-start-retry", help: "how long a failed start-up is retried (the transport plugin's start, e.g. a Jupyter gateway not up yet, then the default contexts; backoff 1s doubling to 30s) before it fails; /health says what it waits for; 0: fail at once",
		field: func(c *Config) *time.Duration { return &c.DefaultStartRetry }, check: notNegative[time.Duration]},
	&row[string]{name: "policies", help: "env-var policy modules: .wasm paths separated by commas, or @FILE listing them; SIGHUP reloads them",
		field: func(c *Config) *string { return &c.Policies }},
	&row[string]{name: "log-format", def: "text", help: "log format: text or json",
		field: func(c *Config) *string { return &c.logFormat }},
	&row[string]{name: "log-level", def: "info", help: "log level: debug, info, warn or error",
		field: func(c *Config) *string { return &c.logLevel }},
	&row[string]{name: "sandbox-api-addr", def: DefaultSandboxAPIAddr, help: "listen address of the sandbox API (the E2B SDKs' sbx.files and sbx.commands; docs/sandbox-api.md), whose paths the code API's address serves too; off: neither",
		load: func(c *Config, v string) error {
			if c.SandboxAPIAddr = strings.TrimSpace(v); c.SandboxAPIAddr == "off" {
				c.SandboxAPIAddr = ""
			}
			return nil
		},
		out: func(c *Config) string { return cmp.Or(c.SandboxAPIAddr, "off") }},
	&row[int64]{name: "max-upload-bytes", def: envd.DefaultMaxUploadBytes, help: "largest file one sandbox API upload (POST /files) may write; larger ones get 413 and leave the old file as it was",
		field: func(c *Config) *int64 { return &c.MaxUploadBytes }, check: positive[int64]},
	&row[string]{name: "pprof-addr", help: "if set, serve net/http/pprof (/debug/pprof/) on this separate address; use a loopback address (profiles show memory contents); empty: off",
		field: func(c *Config) *string { return &c.PprofAddr }},
}

// Load reads the configuration from command-line flags, KERNELHOST_*
// environment variables and the TOML config file named by -config (or
// KERNELHOST_CONFIG), in that precedence, over the defaults (see parseSources):
// the settings of settingsTable and those the transport plugins in the
// plugin directory declare (pluginsettings.go). name heads the usage -help
// prints to stderr. getenv is os.Getenv outside tests.
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
	pluginDir := preScan("plugin-dir", args, getenv)
	if pluginDir == "" {
		pluginDir = fs.Lookup("plugin-dir").DefValue
	}
	plugins := describePlugins(pluginDir)
	plugins.register(fs)
	if err := parseSources(fs, args, getenv); errors.Is(err, flag.ErrHelp) {
		printUsage(stderr, fs, name, plugins)
		return Config{}, err
	} else if err != nil {
		return Config{}, plugins.explain(err)
	}
	var c Config
	for _, a := range apply {
		if err := a(&c); err != nil {
			return Config{}, err
		}
	}
	var err error
	c.settingFiles = plugins.filePaths(fs)
	if c.TransportSettings, err = plugins.values(fs); err != nil {
		return Config{}, err
	}
	c.plugins = plugins
	c.configFile = fs.Lookup(configFlag).Value.String()
	if err := c.readTokenFiles(); err != nil {
		return Config{}, err
	}
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
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

// readTokenFiles reads -access-token-file into the access token; a token
// given both ways is an error.
func (c *Config) readTokenFiles() error {
	if c.accessTokenFile == "" {
		return nil
	}
	if c.AccessToken != "" {
		return errors.New("access-token and access-token-file are both set: give the token one way")
	}
	var err error
	c.AccessToken, err = readSecretFile("access-token-file", c.accessTokenFile)
	return err
}

// withDefaults gives every setting c leaves zero its default (settingsTable).
func WithDefaults(c Config) Config {
	for _, s := range settingsTable {
		s.setDefault(&c)
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// validate checks every setting (settingsTable).
func (c *Config) Validate() error {
	for _, s := range settingsTable {
		if err := s.validate(c); err != nil {
			return err
		}
	}
	return nil
}

// EnvVar is the environment variable of a flag: -default-cwd → KERNELHOST_DEFAULT_CWD.
func EnvVar(flagName string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
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
