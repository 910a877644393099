package server

import (
	"github.com/kernelhost/kernelhost/core"
	"github.com/kernelhost/kernelhost/transports/subprocess"
)

// NewTransport builds the default transport from the configuration: local
// interpreter processes. It is the one place that picks a transport; the
// plugin boundary replaces it later.
func NewTransport(cfg Config) (core.Transport, error) {
	return subprocess.New(subprocess.Options{
		Python: cfg.Interpreters.Python,
		Bash:   cfg.Interpreters.Bash,
		Node:   cfg.Interpreters.Node,
	}), nil
}
