// Command denylist is the example Go policy: it refuses dangerous per-request
// env vars (a default deny list, replaceable by config), can allow only keys
// under configured prefixes, and injects default values.
//
// Build: GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o denylist.wasm .
//
// Config (JSON, every field optional; empty config means the defaults):
//
//	{
//	  "deny":           ["KEY", ...],     // replaces defaultDeny()
//	  "deny_prefixes":  ["LD_", ...],     // replaces defaultDenyPrefixes()
//	  "allow_prefixes": ["APP_", ...],    // if set, every other key is refused
//	  "defaults":       {"TZ": "UTC"}     // set when the request does not set them
//	}
package main

import (
	"errors"
	"slices"
	"strings"

	"github.com/kernelhost/kernelhost/plugins/policy/policysdk"
)

// defaultDeny returns the keys that make an interpreter or the dynamic loader
// run code or load libraries the caller chose, or that change what a bare
// command name resolves to (PATH).
func defaultDeny() []string {
	return []string{
		"PATH",
		// dynamic loader (also covered by the LD_ prefix; listed for clarity)
		"LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT", "GCONV_PATH",
		// Python
		"PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONUSERBASE", "PYTHONBREAKPOINT", "PYTHONINSPECT",
		// Node.js
		"NODE_OPTIONS", "NODE_PATH",
		// shells
		"BASH_ENV", "ENV", "SHELLOPTS", "BASHOPTS", "PROMPT_COMMAND", "PS4", "IFS",
		// other runtimes that may be started from user code
		"PERL5LIB", "PERL5OPT", "RUBYLIB", "RUBYOPT", "JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "JDK_JAVA_OPTIONS",
	}
}

// defaultDenyPrefixes returns the prefixes that catch the whole family of
// loader variables.
func defaultDenyPrefixes() []string { return []string{"LD_", "DYLD_"} }

type rules struct {
	deny          map[string]bool
	denyPrefixes  []string
	allowPrefixes []string
	defaults      map[string]string
}

// parsed caches the rules for the last config string: an instance always
// sees the same config, so it is parsed once, not per evaluation.
var (
	parsedFrom string
	parsed     *rules
)

func rulesFor(cfg string) *rules {
	if parsed != nil && parsedFrom == cfg {
		return parsed
	}
	r, err := parseConfig(cfg)
	if err != nil {
		// The SDK turns the panic into a failed evaluation whose message
		// the host reports with the module's name.
		panic("bad config: " + err.Error())
	}
	parsedFrom, parsed = strings.Clone(cfg), r
	return r
}

// parseConfig reads the config with policysdk.DecodeJSON rather than
// encoding/json, which would make the module much larger (docs/RATIONALE.md,
// "Hand-written JSON codecs").
func parseConfig(cfg string) (*rules, error) {
	r := &rules{deny: map[string]bool{}, denyPrefixes: defaultDenyPrefixes()}
	deny := defaultDeny()
	if strings.TrimSpace(cfg) != "" {
		v, err := policysdk.DecodeJSON(cfg)
		if err != nil {
			return nil, err
		}
		c, ok := v.(map[string]any)
		if !ok {
			return nil, errors.New("config must be a JSON object")
		}
		for k, v := range c {
			switch k {
			case "deny":
				deny, err = stringList(k, v)
			case "deny_prefixes":
				r.denyPrefixes, err = stringList(k, v)
			case "allow_prefixes":
				r.allowPrefixes, err = stringList(k, v)
			case "defaults":
				m, ok := v.(map[string]any)
				if !ok {
					return nil, errors.New("defaults must be an object of strings")
				}
				r.defaults = map[string]string{}
				for dk, dv := range m {
					s, ok := dv.(string)
					if !ok {
						return nil, errors.New("defaults." + dk + " must be a string")
					}
					r.defaults[dk] = s
				}
			default:
				err = errors.New("unknown field " + k)
			}
			if err != nil {
				return nil, err
			}
		}
	}
	for _, k := range deny {
		r.deny[k] = true
	}
	return r, nil
}

func stringList(name string, v any) ([]string, error) {
	a, ok := v.([]any)
	if !ok {
		return nil, errors.New(name + " must be an array of strings")
	}
	out := make([]string, 0, len(a))
	for _, e := range a {
		s, ok := e.(string)
		if !ok {
			return nil, errors.New(name + " must be an array of strings")
		}
		out = append(out, s)
	}
	return out, nil
}

func evaluate(in policysdk.Input) policysdk.Decision {
	r := rulesFor(in.Config)
	// The allow path allocates nothing (allocations are slow under wasm):
	// rejections are collected, and sorted, only when there are some.
	var rej []policysdk.Rejection
	for k := range in.EnvVars {
		if reason := r.refuse(k); reason != "" {
			rej = append(rej, policysdk.Rejection{Key: k, Reason: reason})
		}
	}
	if len(rej) > 0 {
		slices.SortFunc(rej, func(a, b policysdk.Rejection) int { return strings.Compare(a.Key, b.Key) })
		return policysdk.Reject(rej...)
	}
	if len(r.defaults) == 0 { // under wasm even ranging over an empty map costs calls
		return policysdk.Allow()
	}
	var out map[string]string
	for k, v := range r.defaults {
		if _, set := in.EnvVars[k]; set {
			continue
		}
		if out == nil {
			out = make(map[string]string, len(in.EnvVars)+len(r.defaults))
			for k2, v2 := range in.EnvVars {
				out[k2] = v2
			}
		}
		out[k] = v
	}
	if out == nil {
		return policysdk.Allow()
	}
	return policysdk.Rewrite(out)
}

func (r *rules) refuse(k string) string {
	if r.deny[k] {
		return k + " is on the deny list"
	}
	for _, p := range r.denyPrefixes {
		if strings.HasPrefix(k, p) {
			return "keys starting with " + p + " are denied"
		}
	}
	if len(r.allowPrefixes) > 0 {
		for _, p := range r.allowPrefixes {
			if strings.HasPrefix(k, p) {
				return ""
			}
		}
		return "only keys starting with " + strings.Join(r.allowPrefixes, ", ") + " are allowed"
	}
	return ""
}

func init() { policysdk.Handle(evaluate) }

// main never runs in a -buildmode=c-shared (reactor) module; it must exist.
func main() {}
