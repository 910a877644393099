package transportplugin

import (
	"context"
	"time"

	"github.com/kernelhost/kernelhost/core"
	"github.com/kernelhost/kernelhost/plugins/transportplugin/internal/pluginrpc"
)

// A Setting is one setting of a plugin, declared once: its name, type,
// default, help and bounds, which the host turns into a flag, a KERNELHOST_*
// variable, a config file key and a line of -help (and checks before the
// plugin gets a value), and where its value goes in the plugin's
// configuration C. Build one with StringSetting, IntSetting, BoolSetting,
// DurationSetting, ObjectSetting, FileSetting or HostSetting; its methods
// add bounds (Positive, NotNegative, Min, Between, OneOf) and mark the
// durations that bound the plugin's kernel starts and restarts
// (BoundsKernelStart, BoundsKernelRestart): the host raises its own bounds
// on those calls above their sum.
type Setting[C any] = pluginrpc.Setting[C]

// StringSetting is a setting holding text.
func StringSetting[C any](name, def, help string, field func(*C) *string) Setting[C] {
	return pluginrpc.StringSetting(name, def, help, field)
}

// IntSetting is a setting holding an integer.
func IntSetting[C any](name string, def int, help string, field func(*C) *int) Setting[C] {
	return pluginrpc.IntSetting(name, def, help, field)
}

// BoolSetting is a setting that is on or off.
func BoolSetting[C any](name string, def bool, help string, field func(*C) *bool) Setting[C] {
	return pluginrpc.BoolSetting(name, def, help, field)
}

// DurationSetting is a setting holding a duration ("90s", "2m").
func DurationSetting[C any](name string, def time.Duration, help string, field func(*C) *time.Duration) Setting[C] {
	return pluginrpc.DurationSetting(name, def, help, field)
}

// ObjectSetting is a setting holding a JSON object of strings; unset, the
// field stays nil. The host's errors about it never quote its text (it may
// hold secrets).
func ObjectSetting[C any](name, help string, field func(*C) *map[string]string) Setting[C] {
	return pluginrpc.ObjectSetting(name, help, field)
}

// FileSetting is a setting naming a file that holds the value of the string
// setting of (a token kept out of ps): the host reads it, trailing line
// breaks dropped, and passes its text as of; giving both is an error.
func FileSetting[C any](name, of, help string) Setting[C] {
	return pluginrpc.FileSetting[C](name, of, help)
}

// HostSetting is a setting of the host's own (such as "default-cwd") that
// the plugin receives too, as the host resolved it.
func HostSetting[C any](name string, field func(*C) *string) Setting[C] {
	return pluginrpc.HostSetting(name, field)
}

// ServeConfigured is Serve for a transport built from settings: the plugin
// declares them (settings), the host merges them into its own (flags,
// KERNELHOST_* variables, config file keys, -help and their checks) and
// passes the plugin those that are set; newTransport then gets a C holding
// every setting's value, or its default, when the host first calls the
// plugin, before any kernel starts. An error from it fails the plugin's
// start, and the host reports it. A transport with a Close method is closed
// when the host is done with the plugin.
//
//	func main() {
//		transportplugin.ServeConfigured([]transportplugin.Setting[mytransport.Options]{
//			transportplugin.StringSetting("my-url", "http://127.0.0.1:9/", "my transport: its server",
//				func(o *mytransport.Options) *string { return &o.URL }),
//		}, mytransport.New)
//	}
//
// Run with the argument -describe, the plugin prints the description of its
// settings as JSON and exits: the host does this for -help and before it
// parses its settings.
//
// opts add to that description: RemoteKernels.
func ServeConfigured[C any](settings []Setting[C], newTransport func(ctx context.Context, c C) (core.Transport, error), opts ...ServeOption) {
	pluginrpc.ServeConfigured(settings, newTransport, opts...)
}

// ServeOption adds to what a plugin says of itself before the host
// configures it (ServeConfigured).
type ServeOption = pluginrpc.ServeOption

// RemoteKernels declares that the plugin's kernels may run on another
// machine, whose directories the host cannot see (a Jupyter gateway on a
// cluster): the host then checks no directory for the default cwd itself,
// and the engine applies it where the kernel runs. Its transport's Info
// says so too (core.TransportInfo.RemoteKernels).
func RemoteKernels() ServeOption { return pluginrpc.RemoteKernels() }

// Configuration is the C that settings make of the values s holds: each
// setting's value, or its default when s has none. A value in s that no
// setting declares, or of another type, is an error naming the setting.
func Configuration[C any](settings []Setting[C], s Settings) (C, error) {
	return pluginrpc.Configuration(settings, s)
}
