package main

import (
	"time"

	"github.com/kernelhost/kernelhost/plugins/transportplugin"
	"github.com/kernelhost/kernelhost/transports/jupyter"
)

// settings are the jupyter transport's settings, each declared once here:
// the host makes each a flag, a KERNELHOST_* variable, a config file key and
// a line of -help (docs/operating.md has their meaning), checks its bounds
// and passes the plugin those that are set; the rest keep these defaults.
// The start, connect and restart timeouts also raise the host's own bounds
// on kernel starts and restarts above them.
var settings = []transportplugin.Setting[jupyter.Config]{
	transportplugin.StringSetting("jupyter-url", "http://127.0.0.1:8888/", "jupyter transport: the Jupyter Server's base URL",
		func(c *jupyter.Config) *string { return &c.URL }),
	transportplugin.StringSetting("jupyter-token", "", "jupyter transport: the server's token (prefer the environment variable: flags show in ps)",
		func(c *jupyter.Config) *string { return &c.Token }),
	transportplugin.FileSetting[jupyter.Config]("jupyter-token-file", "jupyter-token", "jupyter transport: file holding the server's token (trailing line breaks dropped), instead of -jupyter-token"),
	transportplugin.ObjectSetting("jupyter-kernel-env", "jupyter transport: JSON object sent as the \"env\" of every kernel-start request: Enterprise Gateway's KERNEL_USERNAME, KERNEL_NAMESPACE, KERNEL_LAUNCH_TIMEOUT and other KERNEL_* values (Kernel Gateway passes KERNEL_* into the kernel's environment)",
		func(c *jupyter.Config) *map[string]string { return &c.KernelEnv }),
	transportplugin.DurationSetting("jupyter-start-timeout", jupyter.DefaultKernelTimeout, "jupyter transport: bound on a kernel-start request (Enterprise Gateway answers it once the remote kernel is up); a kernel created after its start was abandoned is deleted",
		func(c *jupyter.Config) *time.Duration { return &c.StartTimeout }).Positive().BoundsKernelStart(),
	transportplugin.DurationSetting("jupyter-connect-timeout", jupyter.DefaultKernelTimeout, "jupyter transport: bound on opening a kernel's websocket (the server holds it until the kernel answers: a slow kernel start shows here)",
		func(c *jupyter.Config) *time.Duration { return &c.ConnectTimeout }).Positive().BoundsKernelStart(),
	transportplugin.DurationSetting("jupyter-restart-timeout", jupyter.DefaultKernelTimeout, "jupyter transport: bound on a kernel restart, until the new kernel answers",
		func(c *jupyter.Config) *time.Duration { return &c.RestartTimeout }).Positive().BoundsKernelRestart(),
	transportplugin.StringSetting("jupyter-ca-file", "", "jupyter transport: PEM file of CA certificates trusted for the server besides the system's (a gateway with a private CA)",
		func(c *jupyter.Config) *string { return &c.CAFile }),
	transportplugin.StringSetting("jupyter-client-cert", "", "jupyter transport: PEM client certificate for servers that require one (with -jupyter-client-key)",
		func(c *jupyter.Config) *string { return &c.ClientCertFile }),
	transportplugin.StringSetting("jupyter-client-key", "", "jupyter transport: PEM key of -jupyter-client-cert",
		func(c *jupyter.Config) *string { return &c.ClientKeyFile }),
	transportplugin.BoolSetting("jupyter-insecure-skip-verify", false, "jupyter transport: accept any server certificate; anyone on the path can read the token and the code: for testing a set-up only (logged as a warning)",
		func(c *jupyter.Config) *bool { return &c.InsecureSkipVerify }),
	transportplugin.ObjectSetting("jupyter-headers", "jupyter transport: JSON object of headers added to every request to the server (an auth proxy in front of a gateway); prefer the environment variable if they hold secrets",
		func(c *jupyter.Config) *map[string]string { return &c.Headers }),
	transportplugin.ObjectSetting("jupyter-kernel-names", "jupyter transport: JSON object mapping a language to the kernel spec to start for it ({\"python\":\"python_kubernetes\"}); otherwise the server's default spec of that language, else the first by name",
		func(c *jupyter.Config) *map[string]string { return &c.KernelNames }),
	transportplugin.DurationSetting("jupyter-keep-alive", 0, "jupyter transport: if set, every kernel gets a kernel_info_request this often, so a server that culls idle kernels (cull_idle_timeout) keeps them while their contexts exist; set it below the cull timeout; 0: off",
		func(c *jupyter.Config) *time.Duration { return &c.KeepAlive }).NotNegative(),
}
