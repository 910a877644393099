package transportplugin

import (
	"github.com/hashicorp/go-hclog"

	"github.com/kernelhost/kernelhost/core"
	"github.com/kernelhost/kernelhost/plugins/transportplugin/internal/pluginrpc"
)

// ProtocolVersion is the transport plugin protocol version this package
// speaks; a host and a plugin that share no version refuse each other at
// start-up with a clear error.
const ProtocolVersion = pluginrpc.ProtocolVersion

// MaxMessageBytes bounds one frame of the protocol (a rich result such as a
// 20 MB PNG fits), in both directions.
const MaxMessageBytes = pluginrpc.MaxMessageBytes

// Serve runs t as a transport plugin and returns when the host is done with it
// (or is gone). It is the whole body of a plugin's main:
//
//	func main() { transportplugin.Serve(mytransport.New()) }
//
// The plugin takes no settings: a transport that takes settings is served
// with ServeConfigured. A transport that also implements core.Forker has its
// kernels copied when the host forks a context; any other answers a fork
// with a KindUnsupported error (HTTP 501).
//
// Rules for the plugin process, which Serve relies on:
//   - Write nothing to stdout before calling Serve: go-plugin reads the
//     handshake from the plugin's first stdout line, so a stray print breaks
//     start-up. Log to stderr (Logger returns a logger that does this).
//   - Leave the process's signals alone; Serve handles SIGTERM by stopping
//     all kernels and returning.
//
// Serve also exits when the host process dies (it watches its parent), after
// stopping its kernels, so a plugin never outlives a SIGKILLed host.
//
// Serve runs the plugin on one OS thread at a time (GOMAXPROCS 1) unless the
// plugin's environment sets GOMAXPROCS (the host's pluginhost.Config.Env
// can): a plugin shuttles frames between the host and its kernels, and a
// second thread only adds hand-offs (docs/RATIONALE.md).
func Serve(t core.Transport) { pluginrpc.Serve(t) }

// Settings are the settings the host passed the plugin, by name, each a
// value of its setting's type: string, bool, int64, time.Duration or
// map[string]string: those of the plugin's declared settings (Setting,
// ServeConfigured) that are set. They come over the plugin protocol, never
// in the plugin's environment; Configuration makes the plugin's
// configuration of them.
type Settings = pluginrpc.Settings

// NewSettings is Settings holding values (each of a type Settings names),
// for tests of a plugin's settings (Configuration).
func NewSettings(values map[string]any) Settings { return pluginrpc.NewSettings(values) }

// Logger returns the logger a plugin should use: hclog JSON on stderr, which
// the host parses and re-logs under the plugin's name at the same level.
func Logger() hclog.Logger { return pluginrpc.Logger() }

// Gauge is one gauge sample a transport reports about itself (a warm pool's
// interpreters and their memory, say); the host serves it in /metrics.
// Samples of one Name share Help and label names.
type Gauge = pluginrpc.Gauge

// GaugeReporter is what a transport implements to have gauges of its own in
// the host's /metrics (the plugin protocol's Stats call asks at each
// scrape); it must answer quickly.
type GaugeReporter = pluginrpc.GaugeReporter
