// Package pluginhost is the host's end of the transport plugin protocol:
// Launch starts a transport plugin binary (one built with
// transportplugin.Serve), and the *Supervised it returns is a core.Transport
// the engine cannot tell from an in-process one. The supervisor notices at
// once when the plugin process exits, ends that plugin's kernels (a
// kernel-wide dead status, then their Messages channels close), starts the
// plugin again with bounded backoff, and kills it on Close.
//
// It is apart from package transportplugin so that plugin authors see Serve
// and what it needs, and nothing of the host; both ends are implemented in
// internal/pluginrpc, which shares the wire code between them.
package pluginhost

import (
	"context"

	"github.com/kernelhost/kernelhost/plugins/transportplugin/internal/pluginrpc"
)

// Config says which plugin to launch, with which settings and environment,
// and how to supervise it (see its fields). Zero durations take the
// defaults named on each field.
type Config = pluginrpc.Config

// Supervised is a transport plugin under supervision; it implements
// core.Transport, and its kernels live in the current plugin process.
type Supervised = pluginrpc.Supervised

// Launch starts the plugin at cfg.Path, completes the handshake, hands it its
// settings (cfg.Settings) and asks it to describe itself. A plugin that
// cannot start, fails the handshake (wrong magic cookie, no common protocol
// version, a stray line on stdout), refuses its settings or does not
// describe itself within cfg.StartTimeout is an error here, at start-up. ctx
// bounds the launch only; Close ends the supervision.
func Launch(ctx context.Context, cfg Config) (*Supervised, error) {
	return pluginrpc.Launch(ctx, cfg)
}

// Gauge is one gauge sample of the plugin's transport
// (transportplugin.GaugeReporter), as Supervised.Gauges returns them.
type Gauge = pluginrpc.Gauge

// Description is what a plugin binary says of its settings when run with
// -describe (transportplugin.Setting); SettingSpec is one setting of it.
type (
	Description = pluginrpc.Description
	SettingSpec = pluginrpc.SettingSpec
)

// Setting types and kernel bounds, as SettingSpec names them.
const (
	TypeString   = pluginrpc.TypeString
	TypeInt      = pluginrpc.TypeInt
	TypeBool     = pluginrpc.TypeBool
	TypeDuration = pluginrpc.TypeDuration
	TypeObject   = pluginrpc.TypeObject
	TypeFile     = pluginrpc.TypeFile
	TypeHost     = pluginrpc.TypeHost

	BoundStart   = pluginrpc.BoundStart
	BoundRestart = pluginrpc.BoundRestart
)

// Describe runs the plugin binary at path with -describe and returns the
// description of its settings; ctx bounds the run.
func Describe(ctx context.Context, path string) (Description, error) {
	return pluginrpc.Describe(ctx, path)
}
