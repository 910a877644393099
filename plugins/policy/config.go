package policy

import (
	"fmt"
	"path/filepath"
	"strings"
)

// envPolicies is the env var listing the policy modules, comma-separated,
// applied in order.
const envPolicies = "KERNELHOST_POLICIES"

// envConfigPrefix + a module's NAME (upper case, other than A-Z 0-9 → _)
// is the env var holding that module's config value.
const envConfigPrefix = "KERNELHOST_POLICY_CONFIG_"

// ParseList turns a KERNELHOST_POLICIES value into module configs. Each
// module's config value comes from KERNELHOST_POLICY_CONFIG_<NAME> if that is
// set (lookupEnv is os.LookupEnv in the host), else from the file
// <path without .wasm>.config next to the module, read at every (re)load,
// else it is empty. Empty items are ignored; two modules with the same name
// are an error, since they would share a config.
func ParseList(list string, lookupEnv func(string) (string, bool)) ([]ModuleConfig, error) {
	var out []ModuleConfig
	seen := map[string]bool{}
	for _, p := range strings.Split(list, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		name := moduleName(p)
		if seen[name] {
			return nil, fmt.Errorf("%s: two policy modules named %q", envPolicies, name)
		}
		seen[name] = true
		mc := ModuleConfig{Path: p, Name: name}
		if v, ok := lookupEnv(ConfigEnvVar(name)); ok {
			mc.Config = v
		} else {
			mc.ConfigFile = strings.TrimSuffix(p, filepath.Ext(p)) + ".config"
		}
		out = append(out, mc)
	}
	return out, nil
}

// ConfigEnvVar is the env var that holds the config of the module called name.
func ConfigEnvVar(name string) string {
	b := []byte(strings.ToUpper(name))
	for i, c := range b {
		if !(c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			b[i] = '_'
		}
	}
	return envConfigPrefix + string(b)
}

func moduleName(path string) string {
	base := filepath.Base(path)
	return strings.TrimSuffix(base, filepath.Ext(base))
}
