package server

import (
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"

	"github.com/kernelhost/kernelhost/hostcmd/envd"
	"github.com/kernelhost/kernelhost/hostcmd/httpapi"
	"github.com/kernelhost/kernelhost/hostcmd/settings"
	"github.com/kernelhost/kernelhost/transports/subprocess"
)

// The sandbox API (package envd) is what the official E2B SDKs call on port
// 49983 for sbx.files.* and sbx.commands.*: served on a listener of its own
// (settings.Config.SandboxAPIAddr) and, for SDKs pointed at one URL for everything
// (E2B_SANDBOX_URL), under its own paths on the code API's listener too.
// Both behind the same Host/Origin checks and access token as the code API.

// sandboxAPI is the running sandbox API.
type sandboxAPI struct {
	srv    *envd.Server
	http   *http.Server // nil: no listener of its own
	ln     net.Listener
	served chan error
}

// newSandboxAPI builds the sandbox API with a context's walls: the
// transport's sandbox settings (the subprocess plugin's -sandbox,
// -sandbox-writable and -context-network, named by subprocess.Setting*;
// their defaults for another transport) and the
// default cwd as home.
func newSandboxAPI(cfg settings.Config, home string) (*envd.Server, error) {
	specs := cfg.PluginSpecs()
	opts := subprocess.SandboxOptions{Mode: cfg.TransportSettings[subprocess.SettingSandbox], Writable: []string{home},
		Hidden: cfg.PrivatePaths(specs), Network: cfg.TransportSettings[subprocess.SettingContextNetwork]}
	for _, w := range strings.Split(cfg.TransportSettings[subprocess.SettingSandboxWritable], ",") {
		if w = strings.TrimSpace(w); w != "" {
			opts.Writable = append(opts.Writable, w)
		}
	}
	ecfg := envd.Config{Home: home, Hidden: subprocess.SandboxHidden(opts), Env: cfg.GlobalEnv,
		MaxUploadBytes: cfg.MaxUploadBytes, Log: cfg.Logger, Writable: subprocess.SandboxWritable(opts)}
	sb, err := subprocess.NewCommandSandbox(opts)
	switch {
	case err != nil && opts.Mode == subprocess.SandboxOn:
		return nil, fmt.Errorf("sandbox API: -sandbox=on, but commands cannot be sandboxed here: %w", err)
	case err != nil:
		// Commands never run unsandboxed unless the operator said so
		// (-sandbox=off); the files side still serves.
		ecfg.NoCommands = fmt.Sprintf("commands run only in a sandbox, and there is none here (%v); %s=off runs them without one", err, settings.EnvVar(subprocess.SettingSandbox))
		cfg.Logger.Warn("the sandbox API refuses commands: no sandbox here", "why", err)
	case sb != nil:
		ecfg.Sandbox = sb
	}
	if ecfg.NoCommands == "" {
		lim, err := commandLimits(cfg.TransportSettings)
		if err != nil {
			// A set limit or no start, as for the transport's interpreters.
			ecfg.NoCommands = err.Error()
			cfg.Logger.Warn("the sandbox API refuses commands: their limits cannot be applied", "err", err)
		}
		ecfg.Limits = lim
	}
	return envd.New(ecfg), nil
}

// commandLimits are a context's limits (the subprocess plugin's
// -context-memory, -context-pids, -context-cpu-weight and -kernel-cgroups,
// named by subprocess.Setting*; their defaults for another transport), for
// each command.
func commandLimits(settings map[string]string) (*subprocess.CommandLimits, error) {
	var lim subprocess.Limits
	var err error
	if lim.MemoryBytes, err = subprocess.ParseBytes(settings[subprocess.SettingContextMemory]); err != nil {
		return nil, fmt.Errorf("%s: %w", subprocess.SettingContextMemory, err)
	}
	for name, field := range map[string]*int{subprocess.SettingContextPids: &lim.Pids, subprocess.SettingContextCPUWeight: &lim.CPUWeight} {
		if v := settings[name]; v != "" {
			if *field, err = strconv.Atoi(v); err != nil {
				return nil, fmt.Errorf("%s %q: want an integer", name, v)
			}
		}
	}
	cgroups := settings[subprocess.SettingKernelCgroups] != "false"
	return subprocess.NewCommandLimits(lim, cgroups)
}

// startSandboxAPI builds the sandbox API and, when cfg.SandboxAPIAddr is
// set, listens on it.
func (h *Host) startSandboxAPI(cfg settings.Config, home string) error {
	srv, err := newSandboxAPI(cfg, home)
	if err != nil {
		return err
	}
	h.sandbox = &sandboxAPI{srv: srv, served: make(chan error, 1)}
	h.api.ServeSandboxAPI(srv)
	if h.metrics != nil {
		h.metrics.ObserveSandboxAPI(srv.Stats())
	}
	if h.sandbox.ln, err = net.Listen("tcp", cfg.SandboxAPIAddr); err != nil {
		return fmt.Errorf("sandbox API: listen on %s (setting %s): %w", cfg.SandboxAPIAddr, settings.EnvVar("sandbox-api-addr"), err)
	}
	h.sandbox.http = newHTTPServer(cfg, httpapi.WithRequestLog(h.log, h.api.Guard(srv.Handler())))
	// An upload takes as long as its bytes take; its headers are still
	// bounded (ReadHeaderTimeout).
	h.sandbox.http.ReadTimeout = 0
	go func() { h.sandbox.served <- h.sandbox.http.Serve(h.sandbox.ln) }()
	h.log.Info("sandbox API listening", "sandbox_api_addr", h.sandbox.ln.Addr().String())
	return nil
}

// addr is the sandbox API listener's address.
func (s *sandboxAPI) addr() string { return s.ln.Addr().String() }

// close stops the listener and kills the commands still running.
func (s *sandboxAPI) close() {
	if s.http != nil {
		_ = s.http.Close()
		<-s.served
	} else if s.ln != nil {
		_ = s.ln.Close()
	}
	s.srv.Close()
}
