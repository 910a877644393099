package cli

import (
	"context"
	"encoding/json"
	"flag"

	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/kernelhost/kernelhost/core/engine"
	"github.com/kernelhost/kernelhost/plugins/policy"
)

// policyEvalTimeout bounds loading the module and the one evaluation; the
// module's own call deadline (policy.Options) applies inside it.
const policyEvalTimeout = time.Minute

// decision is what policy eval prints: the decision's kind, then
// engine.PolicyDecision's fields.
type decision struct {
	Decision   string             `json:"decision"` // allow, rewrite or reject
	EnvVars    map[string]string  `json:"env_vars,omitempty"`
	Rejections []engine.Rejection `json:"rejections,omitempty"`
}

// policyEval runs one policy module on one input, as the host would run it
// on an execution, and prints the decision as JSON. Status: 0 allow or
// rewrite, 1 reject, 2 bad usage or input, or a module that fails.
func policyEval(s Streams, args []string) int {
	fs := newFlags(s, "policy eval", "[-config VALUE] MODULE.wasm < input.json",
		`Runs the env-var policy module MODULE.wasm (docs/policy-abi.md) on one input
and prints its decision as JSON: {"decision":"allow"}, {"decision":"rewrite",
"env_vars":{...}} or {"decision":"reject","rejections":[...]}. The input is a
JSON object on stdin with the members of engine.PolicyInput, each optional:
  {"context_id":"c1","language":"python","cwd":"/home/user",
   "env_vars":{"A":"1"},"global_env":{"HOME":"/home/user"},"metadata":{}}
Without -config the module's config is found as serve finds it:
KERNELHOST_POLICY_CONFIG_<NAME>, else MODULE.config next to the module.
Exit status: 0 allow or rewrite, 1 reject, 2 usage, input or module error.`)
	config := fs.String("config", "", "the module's config value (e.g. JSON), instead of the variable or file serve would use")
	if err := fs.Parse(args); err != nil {
		return parseStatus(err)
	}
	if fs.NArg() != 1 {
		fmt.Fprintln(s.Stderr, "kernelhost policy eval: want one MODULE.wasm argument (kernelhost help policy eval)")
		return exitUsage
	}
	fail := func(format string, a ...any) int {
		fmt.Fprintf(s.Stderr, "kernelhost policy eval: "+format+"\n", a...)
		return exitUsage
	}
	var in engine.PolicyInput
	dec := json.NewDecoder(s.Stdin)
	dec.DisallowUnknownFields() // a misspelt member would otherwise be ignored
	if err := dec.Decode(&in); err != nil {
		return fail("input on stdin: want a JSON object of engine.PolicyInput's members: %v", err)
	}
	if dec.More() {
		return fail("input on stdin: more than one JSON value")
	}

	mc := moduleConfig(fs.Arg(0), s.Getenv)
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "config" {
			mc.Config, mc.ConfigFile = *config, ""
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), policyEvalTimeout)
	defer cancel()
	chain, err := policy.Load(ctx, []policy.ModuleConfig{mc}, policy.Options{})
	if err != nil {
		return fail("%v", err)
	}
	defer chain.Close(context.Background())
	d, err := chain.Evaluate(ctx, in)
	if err != nil {
		return fail("%v", err)
	}
	out, status := decision{Decision: "allow"}, exitOK
	switch {
	case len(d.Rejections) > 0:
		out, status = decision{Decision: "reject", Rejections: d.Rejections}, exitFail
	case d.EnvVars != nil:
		out = decision{Decision: "rewrite", EnvVars: d.EnvVars}
	}
	enc := json.NewEncoder(s.Stdout)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(out); err != nil {
		return fail("write the decision: %v", err)
	}
	return status
}

// moduleConfig is the module at path with its config found as serve finds
// it (policy.ParseList), without ParseList's splitting at commas.
func moduleConfig(path string, getenv func(string) string) policy.ModuleConfig {
	name := strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
	mc := policy.ModuleConfig{Path: path, Name: name}
	if v := getenv(policy.ConfigEnvVar(name)); v != "" {
		mc.Config = v
	} else {
		mc.ConfigFile = strings.TrimSuffix(path, filepath.Ext(path)) + ".config"
	}
	return mc
}
