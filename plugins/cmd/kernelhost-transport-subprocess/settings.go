package main

import (
	"github.com/kernelhost/kernelhost/plugins/transportplugin"
	"github.com/kernelhost/kernelhost/transports/subprocess"
)

// options are the subprocess transport's settings as the plugin receives
// them; newTransport turns them into subprocess.Options.
type options struct {
	// Interpreters holds each interpreter's setting by its name
	// (subprocess.Interpreters): a path, or a name looked up on PATH.
	Interpreters  map[string]*string
	KernelCgroups bool // false: process trees only (see reap.go)
	// Pool sizes the warm pools (subprocess.ParsePoolSizes), whose
	// interpreters start in DefaultCwd, where contexts start by default.
	Pool, DefaultCwd string
	// Preload is what python's fork server preloads (subprocess.ParsePreload).
	Preload string
	// Sandbox is auto, on or off (subprocess.SandboxOptions); the default
	// cwd and SandboxWritable (paths separated by commas) are writable in
	// every sandbox, a context's cwd only inside them.
	Sandbox, SandboxWritable string
	// HostPrivatePaths are the host's own files (its token and config
	// files), one a line, hidden in every sandbox.
	HostPrivatePaths string
	// Network is a sandbox's network: isolated, none or host
	// (subprocess.SandboxOptions).
	Network         string
	MaxMessageBytes int // caps an interpreter's messages (subprocess.Options)
	// Limits per context (subprocess.Limits); a limit this machine cannot
	// apply stops the plugin at start.
	ContextMemory                 string
	ContextPids, ContextCPUWeight int
}

// maxMessageCap bounds max-message-bytes: half the plugin protocol's
// message limit, room for a message's JSON and protobuf framing.
const maxMessageCap = transportplugin.MaxMessageBytes / 2

// interpreter is where the setting of interpreter name goes.
func (o *options) interpreter(name string) *string {
	if o.Interpreters == nil {
		o.Interpreters = map[string]*string{}
	}
	if o.Interpreters[name] == nil {
		o.Interpreters[name] = new(string)
	}
	return o.Interpreters[name]
}

// interpreters are the settings of the transport's interpreters (-python,
// -node, ...), one each, as its languages' registrations describe them.
func interpreters() []transportplugin.Setting[options] {
	var out []transportplugin.Setting[options]
	for _, in := range subprocess.Interpreters() {
		out = append(out, transportplugin.StringSetting(in.Name, in.Default, in.Help,
			func(o *options) *string { return o.interpreter(in.Name) }))
	}
	return out
}

// settings are the subprocess transport's settings, each declared once here
// (the interpreters' in their languages' registrations; those the host
// reads too by their subprocess.Setting* names): the host makes
// each a flag, a KERNELHOST_* variable, a config file key and a line of
// -help (docs/operating.md), checks its bounds and passes the plugin those
// that are set; the rest keep these defaults.
var settings = append(interpreters(), []transportplugin.Setting[options]{
	transportplugin.StringSetting("interpreter-pool", "python=1,javascript=1", "subprocess transport: ready interpreters kept per language for new contexts and restarts (python, javascript and typescript in any cwd, others in the default cwd), as language=size pairs separated by commas (python=2,javascript=1,r=1); languages not named have none; python=0,javascript=0 turns them off",
		func(o *options) *string { return &o.Pool }),
	// The resolved default cwd, where the warm pools' interpreters start.
	transportplugin.HostSetting("default-cwd", func(o *options) *string { return &o.DefaultCwd }),
	// The host's own files, which no sandbox may read (subprocess.SandboxOptions.Hidden).
	transportplugin.HostSetting("host-private-paths", func(o *options) *string { return &o.HostPrivatePaths }),
	transportplugin.StringSetting("python-preload", "auto", "subprocess transport: python contexts are forked from a template interpreter that imported these modules (names separated by commas), so a new context starts with them loaded and shares their memory; auto: those of numpy, pandas, matplotlib.pyplot (its inline backend) and IPython that are installed; off: no template. While interpreters are sandboxed the template runs in a sandbox of its own and imports nothing from paths a context can write: a preloaded module also in the user site (pip install --user) keeps contexts from being forked until it is gone",
		func(o *options) *string { return &o.Preload }),
	transportplugin.IntSetting("max-message-bytes", subprocess.DefaultMaxMessageBytes, "subprocess transport: largest message an interpreter may send (one output write, one result or display, one batch of them); past it the output is cut, with a notice in the stream saying how much was dropped, and the execution goes on with its state",
		func(o *options) *int { return &o.MaxMessageBytes }).Between(4<<10, maxMessageCap),
	transportplugin.BoolSetting(subprocess.SettingKernelCgroups, true, "subprocess transport: a cgroup per interpreter where cgroup v2 is writable, so delete, restart and shutdown end every process it started; false: its process tree only",
		func(o *options) *bool { return &o.KernelCgroups }),
	transportplugin.StringSetting(subprocess.SettingSandbox, "auto", "subprocess transport: each interpreter in a bubblewrap sandbox of its own (own PID, IPC, mount and network namespaces (context-network), own /tmp, the host's files read-only but the writable paths): auto (where bwrap works here, else a warning), on (no interpreter without one) or off",
		func(o *options) *string { return &o.Sandbox }).OneOf("auto", "on", "off"),
	transportplugin.StringSetting(subprocess.SettingSandboxWritable, "", "subprocess transport: host paths, separated by commas, that every sandbox may write besides the default cwd and the user's ~/.local, ~/.cache and ~/.npm (a pip or conda prefix, a shared data directory, a project directory); a context's cwd outside them is read-only in its sandbox",
		func(o *options) *string { return &o.SandboxWritable }),
	transportplugin.StringSetting(subprocess.SettingContextNetwork, "isolated", "subprocess transport: a sandboxed context's network: isolated (a network namespace of its own: its own loopback and abstract unix sockets, nothing of the host's loopback listeners, the host's API among them, reachable; outbound connections through pasta, Debian's passt, as from the host), none (a network namespace of its own with loopback only) or host (the host's network, loopback listeners included); with -sandbox=off contexts have the host's network",
		func(o *options) *string { return &o.Network }).OneOf("isolated", "none", "host"),
	transportplugin.StringSetting(subprocess.SettingContextMemory, "", "subprocess transport: memory one context's interpreter and everything it starts may use (512MiB, 2G; empty: no limit), in its cgroup; past it the interpreter is killed, the execution ends with MemoryLimitExceeded and the context restarts without its state; no interpreter starts where no memory cgroup controller can apply it",
		func(o *options) *string { return &o.ContextMemory }),
	transportplugin.IntSetting(subprocess.SettingContextPids, 0, "subprocess transport: processes and threads one context's interpreter may have at once, itself included (0: no limit); past it fork fails; no interpreter starts where no pids cgroup controller can apply it",
		func(o *options) *int { return &o.ContextPids }).NotNegative(),
	transportplugin.IntSetting(subprocess.SettingContextCPUWeight, 0, "subprocess transport: one context's share of the CPU when several are busy, 1-10000 as cgroup v2's cpu.weight (100 is everyone's default; 0: not set); no interpreter starts where no cpu cgroup controller can apply it",
		func(o *options) *int { return &o.ContextCPUWeight }).NotNegative(),
}...)
