package main

import (
	"encoding/json"
	"fmt"
)

// defaultURL is the server the plugin talks to when no URL is set.
const defaultURL = "http://127.0.0.1:8888/"

// The names the host passes its jupyter-* settings under (hostcmd/server
// pluginEnv, on the settings pipe; docs/operating.md has their meaning).
const (
	envURL       = "KERNELHOST_JUPYTER_URL"
	envToken     = "KERNELHOST_JUPYTER_TOKEN"
	envKernelEnv = "KERNELHOST_JUPYTER_KERNEL_ENV"
)

// settings are the plugin's settings (transportplugin.Setting).
type settings struct {
	URL, Token string
	KernelEnv  map[string]string
}

// readSettings reads the settings from getenv (os.Getenv outside tests). An
// empty variable counts as unset.
func readSettings(getenv func(string) string) (settings, error) {
	s := settings{URL: getenv(envURL), Token: getenv(envToken)}
	if s.URL == "" {
		s.URL = defaultURL
	}
	if v := getenv(envKernelEnv); v != "" {
		if err := json.Unmarshal([]byte(v), &s.KernelEnv); err != nil {
			// The value may hold secrets: name the variable, not the text.
			return settings{}, fmt.Errorf("%s: want a JSON object of strings: %w", envKernelEnv, err)
		}
	}
	return s, nil
}
