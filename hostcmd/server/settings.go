package server

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/kernelhost/kernelhost/core"
)

// EnvPrefix prefixes the environment variable of every setting: the flag
// -default-cwd is also KERNELHOST_DEFAULT_CWD.
const EnvPrefix = "KERNELHOST_"

// Config is the host's configuration. Zero values get the defaults of Load.
type Config struct {
	Addr             string            // listen address
	DefaultCwd       string            // cwd of contexts created without one
	GlobalEnv        map[string]string // env vars every context gets
	DisconnectPolicy core.DisconnectPolicy
	InterruptGrace   time.Duration
	QueueDepth       int
	MaxBodyBytes     int64
	MaxOutputBytes   int
	Keepalive        time.Duration // silence on a stream before a keepalive line
	Interpreters     Interpreters
	Logger           *slog.Logger
	// Transport, if set, is used instead of the one newTransport builds.
	Transport core.Transport
}

// Interpreters are the interpreter executables the subprocess transport runs.
type Interpreters struct {
	Python, Node, Bash string
}

// Defaults.
const (
	DefaultAddr         = "127.0.0.1:49999"
	DefaultCwd          = "/home/user"
	DefaultMaxBodyBytes = 16 << 20
	DefaultKeepalive    = 5 * time.Second
)

// Load reads the configuration from command-line flags and KERNELHOST_*
// environment variables; a flag given on the command line wins over its
// variable. getenv is os.Getenv outside tests.
func Load(name string, args []string, getenv func(string) string, stderr io.Writer) (Config, error) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		c                           Config
		envFile, envInline          string
		policy, logFormat, logLevel string
	)
	fs.StringVar(&c.Addr, "addr", DefaultAddr, "listen address (host:port)")
	fs.StringVar(&c.DefaultCwd, "default-cwd", DefaultCwd, "working directory of contexts created without one; falls back to the host's working directory when it does not exist")
	fs.StringVar(&envFile, "env-file", "", "path of a JSON object of global env vars every context gets")
	fs.StringVar(&envInline, "env", "", "JSON object of global env vars every context gets (wins over -env-file for the same key)")
	fs.StringVar(&policy, "disconnect-policy", string(core.DisconnectInterrupt), "what happens to running code when its client leaves: interrupt or continue")
	fs.DurationVar(&c.InterruptGrace, "interrupt-grace", 5*time.Second, "after an interrupt that was ignored this long, the context is restarted")
	fs.IntVar(&c.QueueDepth, "queue-depth", 32, "executions that may wait per context before requests get 429")
	fs.Int64Var(&c.MaxBodyBytes, "max-body-bytes", DefaultMaxBodyBytes, "largest request body accepted (413 above)")
	fs.IntVar(&c.MaxOutputBytes, "max-output-bytes", 64<<20, "output buffered per execution for a slow client before it is dropped")
	fs.DurationVar(&c.Keepalive, "keepalive", DefaultKeepalive, "silence on an /execute stream before a keepalive line")
	fs.StringVar(&c.Interpreters.Python, "python", "python3", "Python interpreter")
	fs.StringVar(&c.Interpreters.Node, "node", "node", "Node.js interpreter (javascript contexts)")
	fs.StringVar(&c.Interpreters.Bash, "bash", "bash", "bash interpreter")
	fs.StringVar(&logFormat, "log-format", "text", "log format: text or json")
	fs.StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage of %s (every flag is also an environment variable %sNAME, e.g. %sADDR; the flag wins):\n", name, EnvPrefix, EnvPrefix)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return Config{}, err
	}
	if fs.NArg() > 0 {
		return Config{}, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	if err := applyEnv(fs, getenv); err != nil {
		return Config{}, err
	}

	var err error
	if c.DisconnectPolicy, err = core.ParseDisconnectPolicy(policy); err != nil {
		return Config{}, err
	}
	if c.GlobalEnv, err = loadGlobalEnv(envFile, envInline); err != nil {
		return Config{}, err
	}
	if c.MaxBodyBytes <= 0 {
		return Config{}, fmt.Errorf("max-body-bytes must be positive, got %d", c.MaxBodyBytes)
	}
	if c.Logger, err = newLogger(stderr, logFormat, logLevel); err != nil {
		return Config{}, err
	}
	return c, nil
}

// applyEnv sets every flag that was not given on the command line from its
// environment variable, through the flag itself so that parsing is the same.
func applyEnv(fs *flag.FlagSet, getenv func(string) string) error {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if given[f.Name] || err != nil {
			return
		}
		key := EnvVar(f.Name)
		if v := getenv(key); v != "" {
			if e := fs.Set(f.Name, v); e != nil {
				err = fmt.Errorf("%s=%q: %w", key, v, e)
			}
		}
	})
	return err
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
	if inline != "" {
		var m map[string]string
		if err := json.Unmarshal([]byte(inline), &m); err != nil {
			// The value may hold secrets: name the setting, not the text.
			return nil, fmt.Errorf("%s: want a JSON object of strings: %w", EnvVar("env"), err)
		}
		for k, v := range m {
			env[k] = v
		}
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
