package settings

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"
)

// The machinery of the settings table (settingsTable in settings.go): what a
// row is, how it becomes a flag, a default and a check.

// setting is a row of the table, whatever its type.
type setting interface {
	// flagName is the setting's name: its flag, config key and, through
	// EnvVar, its environment variable.
	flagName() string
	// register adds the setting's flag to fs; apply then stores the parsed
	// value in c.
	register(fs *flag.FlagSet) (apply func(c *Config) error)
	// setDefault gives c the default when c leaves the setting zero.
	setDefault(c *Config)
	// validate checks c's value.
	validate(c *Config) error
	// text is c's value as a flag takes it, for a plugin that takes the
	// setting (pluginhost.TypeHost).
	text(c *Config) string
	// defaultValue is the default, of the flag's Go type.
	defaultValue() any
}

// flagType are the Go types of flags (flag.FlagSet's XxxVar).
type flagType interface {
	string | int | int64 | bool | time.Duration
}

// row is a setting whose flag has type T.
type row[T flagType] struct {
	name, help string
	def        T
	// field is where Config holds the setting, as a T. Settings that Config
	// holds in another form have load (flag value into c) and out (c's value
	// as a T) instead; a setting with neither is read by Load itself (config).
	field func(*Config) *T
	load  func(c *Config, v T) error
	out   func(c *Config) T
	// check validates the value (nil: every value of T). Its error follows
	// the setting's name: "must be positive, got 0".
	check func(T) error
}

func (r *row[T]) flagName() string { return r.name }

func (r *row[T]) register(fs *flag.FlagSet) func(*Config) error {
	v := new(T)
	switch p := any(v).(type) {
	case *string:
		fs.StringVar(p, r.name, any(r.def).(string), r.help)
	case *int:
		fs.IntVar(p, r.name, any(r.def).(int), r.help)
	case *int64:
		fs.Int64Var(p, r.name, any(r.def).(int64), r.help)
	case *bool:
		fs.BoolVar(p, r.name, any(r.def).(bool), r.help)
	case *time.Duration:
		fs.DurationVar(p, r.name, any(r.def).(time.Duration), r.help)
	}
	return func(c *Config) error { return r.set(c, *v) }
}

func (r *row[T]) set(c *Config, v T) error {
	switch {
	case r.field != nil:
		*r.field(c) = v
	case r.load != nil:
		return r.load(c, v)
	}
	return nil
}

func (r *row[T]) get(c *Config) T {
	switch {
	case r.field != nil:
		return *r.field(c)
	case r.out != nil:
		return r.out(c)
	}
	var zero T
	return zero
}

func (r *row[T]) setDefault(c *Config) {
	var zero T
	switch {
	case r.field != nil && *r.field(c) == zero:
		*r.field(c) = r.def
	case r.load != nil && r.out(c) == zero:
		_ = r.load(c, r.def) // the default is valid
	}
}

func (r *row[T]) validate(c *Config) error {
	if r.check == nil {
		return nil
	}
	if err := r.check(r.get(c)); err != nil {
		return fmt.Errorf("%s %w (%s)", r.name, err, EnvVar(r.name))
	}
	return nil
}

func (r *row[T]) text(c *Config) string { return fmt.Sprint(r.get(c)) }

func (r *row[T]) defaultValue() any { return r.def }

func positive[T int | int64 | time.Duration](v T) error {
	if v <= 0 {
		return fmt.Errorf("must be positive, got %v", v)
	}
	return nil
}

func notNegative[T int | int64 | time.Duration](v T) error {
	if v < 0 {
		return fmt.Errorf("must not be negative, got %v", v)
	}
	return nil
}

// noLimit is an int setting whose 0 means no limit. Config's zero is the
// default, as everywhere, so Config holds "no limit" as -1.
func noLimit(name string, def int, help string, field func(*Config) *int) setting {
	return &limitRow{row[int]{name: name, def: def, help: help, field: field}}
}

type limitRow struct{ row[int] }

func (r *limitRow) register(fs *flag.FlagSet) func(*Config) error {
	v := fs.Int(r.name, r.def, r.help)
	return func(c *Config) error {
		if err := notNegative(*v); err != nil {
			return fmt.Errorf("%s %w (%s)", r.name, err, EnvVar(r.name))
		}
		*r.field(c) = *v
		if *v == 0 {
			*r.field(c) = -1
		}
		return nil
	}
}

// list is a setting of names separated by commas. nil in Config is the
// default; an empty list is a value of its own (none).
func list(name string, def []string, help string, field func(*Config) *[]string, check func([]string) error) setting {
	return &listRow{row: row[string]{name: name, def: strings.Join(def, ","), help: help}, field: field, defList: def, check: check}
}

type listRow struct {
	row[string]
	field   func(*Config) *[]string
	defList []string
	check   func([]string) error
}

func (r *listRow) register(fs *flag.FlagSet) func(*Config) error {
	v := fs.String(r.name, r.def, r.help)
	return func(c *Config) error {
		l := parseList(*v)
		if l == nil {
			l = []string{} // set, to nothing: not the default
		}
		*r.field(c) = l
		return nil
	}
}

func (r *listRow) setDefault(c *Config) {
	if *r.field(c) == nil {
		*r.field(c) = r.defList
	}
}

func (r *listRow) validate(c *Config) error { return r.check(*r.field(c)) }

func (r *listRow) text(c *Config) string { return strings.Join(*r.field(c), ",") }

// parseObject parses the JSON object of strings of setting name; an empty
// value is nil.
func parseObject(name, value string) (map[string]string, error) {
	if value == "" {
		return nil, nil
	}
	var m map[string]string
	if err := json.Unmarshal([]byte(value), &m); err != nil {
		// The value may hold secrets: name the setting, not the text.
		return nil, fmt.Errorf("%s: want a JSON object of strings: %w", EnvVar(name), err)
	}
	return m, nil
}

// checkTransportName accepts plugin names only, not paths: the plugin is
// always looked up in the plugin directory.
func checkTransportName(name string) error {
	if name == "" {
		return fmt.Errorf("is empty: want subprocess, jupyter or a plugin name")
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') || name == "." || name == ".." {
			return fmt.Errorf("%q: want a plugin name (letters, digits, - _ .), not a path; put the plugin in %s", name, EnvVar("plugin-dir"))
		}
	}
	return nil
}

// checkAccessToken refuses a token with surrounding spaces, which never
// matches what a client's header parser hands over. The message does not
// echo the token.
func checkAccessToken(token string) error {
	if strings.TrimSpace(token) != token {
		return errors.New("has leading or trailing white space")
	}
	return nil
}

func checkTokenScope(scope string) error {
	if scope != ScopeAll && scope != ScopeExecute {
		return fmt.Errorf("%q: want %s or %s", scope, ScopeAll, ScopeExecute)
	}
	return nil
}

// defaultAllowedHosts are the host names allowed besides loopback ones: the
// names of E2B's sandboxes (49999-<sandbox id>.e2b.app, .e2b.dev before),
// which E2B's proxy passes on and whose DNS no page controls.
var defaultAllowedHosts = []string{"*.e2b.app", "*.e2b.dev"}

// parseList splits a comma-separated setting, dropping blanks.
func parseList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// checkAllowedHosts accepts "*", names ("kh.internal"), "*.suffix" and IP
// addresses, without ports or schemes.
func checkAllowedHosts(hosts []string) error {
	for _, h := range hosts {
		name := strings.TrimPrefix(h, "*.")
		if h == "*" || net.ParseIP(name) != nil {
			continue
		}
		if name == "" || strings.ContainsAny(name, "/:*@ ") {
			return fmt.Errorf("%s: %q is not a host name (want a name such as kh.example.com, *.example.com, an IP address or *; no port or scheme)", EnvVar("allowed-hosts"), h)
		}
	}
	return nil
}

// checkAllowedOrigins accepts "*" and origins: http or https, a host, an
// optional port, nothing else.
func checkAllowedOrigins(origins []string) error {
	for _, o := range origins {
		if o == "*" {
			continue
		}
		u, err := url.Parse(strings.TrimSuffix(o, "/"))
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Path != "" || u.RawQuery != "" || u.User != nil {
			return fmt.Errorf("%s: %q is not an origin (want scheme://host[:port], such as https://app.example.com, or *)", EnvVar("allowed-origins"), o)
		}
	}
	return nil
}
