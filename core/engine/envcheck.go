package engine

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/kernelhost/kernelhost/core"
)

// validateEnvKey reports whether key is a portable environment variable name:
// ^[A-Za-z_][A-Za-z0-9_]*$. Anything else could break or inject into the
// generated snippets of some language, so it is refused before anything runs.
func validateEnvKey(key string) error {
	if key == "" {
		return fmt.Errorf("env var name is empty")
	}
	for i := 0; i < len(key); i++ {
		c := key[i]
		letter := c == '_' || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z')
		if !letter && (i == 0 || c < '0' || c > '9') {
			return fmt.Errorf("invalid env var name %s: names must match [A-Za-z_][A-Za-z0-9_]*", core.Quote(key))
		}
	}
	return nil
}

// ValidateEnvValue refuses values that no language can hold in its environment.
func ValidateEnvValue(key, value string) error {
	if strings.IndexByte(value, 0) >= 0 {
		return fmt.Errorf("env var %s: value contains a NUL character", key)
	}
	if !utf8.ValidString(value) {
		return fmt.Errorf("env var %s: value is not valid UTF-8", key)
	}
	return nil
}

func validateEnv(env map[string]string) error {
	for _, k := range sortedKeys(env) {
		if err := validateEnvKey(k); err != nil {
			return err
		}
		if err := ValidateEnvValue(k, env[k]); err != nil {
			return err
		}
	}
	return nil
}

// checkEnvSize refuses env vars beyond Config.MaxEnvVars and MaxEnvBytes.
func (e *Engine) checkEnvSize(env map[string]string) error {
	if n, limit := len(env), e.cfg.MaxEnvVars; n > limit {
		return fmt.Errorf("env_vars has %d entries; this host accepts at most %d per execution", n, limit)
	}
	size := 0
	for k, v := range env {
		size += len(k) + len(v)
	}
	if limit := e.cfg.MaxEnvBytes; size > limit {
		return fmt.Errorf("env_vars take %d bytes (names and values); this host accepts at most %d per execution", size, limit)
	}
	return nil
}
