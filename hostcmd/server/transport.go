package server

import (
	"errors"

	"github.com/kernelhost/kernelhost/core"
)

// newTransport builds the default transport from the configuration. It is the
// one place that picks a transport: the plugin boundary replaces it later.
func newTransport(cfg Config) (core.Transport, error) {
	return nil, errors.New("the subprocess transport is not wired in yet")
}
