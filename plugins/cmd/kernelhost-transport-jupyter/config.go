package main

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/kernelhost/kernelhost/transports/jupyter"
)

// defaultURL is the server the plugin talks to when no URL is set.
const defaultURL = "http://127.0.0.1:8888/"

// The names the host passes its jupyter-* settings under (hostcmd/server
// pluginEnv, on the settings pipe; docs/operating.md has their meaning).
const (
	envURL       = "KERNELHOST_JUPYTER_URL"
	envToken     = "KERNELHOST_JUPYTER_TOKEN"
	envKernelEnv = "KERNELHOST_JUPYTER_KERNEL_ENV"
	envStart     = "KERNELHOST_JUPYTER_START_TIMEOUT"
	envConnect   = "KERNELHOST_JUPYTER_CONNECT_TIMEOUT"
	envRestart   = "KERNELHOST_JUPYTER_RESTART_TIMEOUT"
	envKeepAlive = "KERNELHOST_JUPYTER_KEEP_ALIVE"
	envCAFile    = "KERNELHOST_JUPYTER_CA_FILE"
	envCert      = "KERNELHOST_JUPYTER_CLIENT_CERT"
	envKey       = "KERNELHOST_JUPYTER_CLIENT_KEY"
	envInsecure  = "KERNELHOST_JUPYTER_INSECURE_SKIP_VERIFY"
	envHeaders   = "KERNELHOST_JUPYTER_HEADERS"
	envNames     = "KERNELHOST_JUPYTER_KERNEL_NAMES"
)

// settings are the plugin's settings (transportplugin.Setting).
type settings struct {
	URL, Token string
	KernelEnv  map[string]string
	// Timeouts; 0 leaves the transport's default.
	StartTimeout, ConnectTimeout, RestartTimeout time.Duration
	KeepAlive                                    time.Duration // 0: off
	CAFile, ClientCert, ClientKey                string
	InsecureSkipVerify                           bool
	Headers, KernelNames                         map[string]string
}

// config is the transport's configuration for s.
func (s settings) config() jupyter.Config {
	return jupyter.Config{
		URL: s.URL, Token: s.Token, KernelEnv: s.KernelEnv,
		StartTimeout: s.StartTimeout, ConnectTimeout: s.ConnectTimeout, RestartTimeout: s.RestartTimeout,
		KeepAlive: s.KeepAlive,
		CAFile:    s.CAFile, ClientCertFile: s.ClientCert, ClientKeyFile: s.ClientKey,
		InsecureSkipVerify: s.InsecureSkipVerify, Headers: s.Headers, KernelNames: s.KernelNames,
	}
}

// readSettings reads the settings from getenv (os.Getenv outside tests). An
// empty variable counts as unset.
func readSettings(getenv func(string) string) (settings, error) {
	s := settings{URL: getenv(envURL), Token: getenv(envToken)}
	if s.URL == "" {
		s.URL = defaultURL
	}
	s.CAFile, s.ClientCert, s.ClientKey = getenv(envCAFile), getenv(envCert), getenv(envKey)
	s.InsecureSkipVerify = getenv(envInsecure) == "true"
	for name, m := range map[string]*map[string]string{envKernelEnv: &s.KernelEnv, envHeaders: &s.Headers, envNames: &s.KernelNames} {
		if v := getenv(name); v != "" {
			if err := json.Unmarshal([]byte(v), m); err != nil {
				// The value may hold secrets: name the variable, not the text.
				return settings{}, fmt.Errorf("%s: want a JSON object of strings: %w", name, err)
			}
		}
	}
	for name, d := range map[string]*time.Duration{envStart: &s.StartTimeout, envConnect: &s.ConnectTimeout, envRestart: &s.RestartTimeout, envKeepAlive: &s.KeepAlive} {
		v := getenv(name)
		if v == "" {
			continue
		}
		var err error
		if *d, err = time.ParseDuration(v); err != nil || *d <= 0 {
			return settings{}, fmt.Errorf("%s=%q: want a positive duration such as 90s or 5m", name, v)
		}
	}
	return s, nil
}
