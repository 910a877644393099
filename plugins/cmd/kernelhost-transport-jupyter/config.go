package main

import (
	"time"

	"github.com/kernelhost/kernelhost/transports/jupyter"
)

// settings are the jupyter transport's rows of the host's settings table
// (-jupyter-*; docs/operating.md has their meaning), by name. The host
// checks them and passes every one; zero values leave the transport's
// defaults.
type settings struct {
	URL                string            `setting:"jupyter-url"`
	Token              string            `setting:"jupyter-token"`
	KernelEnv          map[string]string `setting:"jupyter-kernel-env"`
	StartTimeout       time.Duration     `setting:"jupyter-start-timeout"`
	ConnectTimeout     time.Duration     `setting:"jupyter-connect-timeout"`
	RestartTimeout     time.Duration     `setting:"jupyter-restart-timeout"`
	KeepAlive          time.Duration     `setting:"jupyter-keep-alive"` // 0: off
	CAFile             string            `setting:"jupyter-ca-file"`
	ClientCert         string            `setting:"jupyter-client-cert"`
	ClientKey          string            `setting:"jupyter-client-key"`
	InsecureSkipVerify bool              `setting:"jupyter-insecure-skip-verify"`
	Headers            map[string]string `setting:"jupyter-headers"`
	KernelNames        map[string]string `setting:"jupyter-kernel-names"`
}

// config is the transport's configuration for s.
func (s settings) config() jupyter.Config {
	return jupyter.Config{
		URL: s.URL, Token: s.Token, KernelEnv: s.KernelEnv,
		StartTimeout: s.StartTimeout, ConnectTimeout: s.ConnectTimeout, RestartTimeout: s.RestartTimeout,
		KeepAlive: s.KeepAlive,
		CAFile:    s.CAFile, ClientCertFile: s.ClientCert, ClientKeyFile: s.ClientKey,
		InsecureSkipVerify: s.InsecureSkipVerify, Headers: s.Headers, KernelNames: s.KernelNames,
		Warn: logger.Warn, // the host logs it under the plugin's name
	}
}
