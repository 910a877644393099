package settings_test

import (
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kernelhost/kernelhost/core/engine"
	"github.com/kernelhost/kernelhost/hostcmd/settings"
)

func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestLoadDefaults(t *testing.T) {
	t.Parallel()
	c, err := settings.Load("kernelhost", nil, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.Addr != "127.0.0.1:49999" || c.DefaultCwd != "/home/user" || c.DisconnectPolicy != engine.DisconnectInterrupt ||
		c.MaxBodyBytes != 16<<20 || c.Keepalive != 5*time.Second || len(c.GlobalEnv) != 0 || c.TransportSettings != nil {
		t.Fatalf("defaults: %+v", c)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if c.TransportName != "subprocess" || c.PluginDir != filepath.Join(filepath.Dir(exe), "plugins") || c.Policies != "" {
		t.Fatalf("transport defaults: %q in %q, policies %q", c.TransportName, c.PluginDir, c.Policies)
	}
	// A plugin's settings left unset keep the plugin's defaults: the host
	// passes none of them, only the host's settings the plugin takes.
	c.PluginDir = pluginDir
	got, engineStart, _, _, err := settings.PluginSettings(c)
	if err != nil || !reflect.DeepEqual(got, map[string]any{"default-cwd": "/home/user", "host-private-paths": ""}) || engineStart != 0 {
		t.Fatalf("the subprocess plugin gets %v (%v), engine start bound %v", got, err, engineStart)
	}
}

// The host's own files reach the subprocess plugin, which hides them in
// every sandbox (issue 39): the token file, the config file and its
// directory (/etc/kernelhost, where the shipped unit keeps its env file),
// the env file, each policy module's config file, another plugin's token
// file.
func TestPrivatePathsReachThePlugin(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "kernelhost")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	token, config, envFile := filepath.Join(dir, "token"), filepath.Join(dir, "kernelhost.toml"), filepath.Join(dir, "env.json")
	jupyterToken := filepath.Join(t.TempDir(), "jupyter-token")
	list := filepath.Join(dir, "policies.list")
	for file, text := range map[string]string{token: "secret\n", config: "queue-depth = 8\n", envFile: "{}", jupyterToken: "j\n", list: "deny.wasm\n"} {
		if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	c, err := settings.Load("kernelhost", []string{"-access-token-file", token, "-config", config, "-env-file", envFile, "-policies", "@" + list, "-jupyter-token-file", jupyterToken},
		env(map[string]string{"KERNELHOST_PLUGIN_DIR": pluginDir}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	got, _, _, _, err := settings.PluginSettings(c)
	if err != nil {
		t.Fatal(err)
	}
	paths, _ := got["host-private-paths"].(string)
	want := []string{token, config, envFile, dir, list, filepath.Join(dir, "deny.config"), jupyterToken}
	for _, w := range want {
		if !slices.Contains(strings.Split(paths, "\n"), w) {
			t.Errorf("the plugin's host-private-paths %q lack %s", paths, w)
		}
	}
}

func TestLoadTransportAndPolicies(t *testing.T) {
	t.Parallel()
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{
		"KERNELHOST_TRANSPORT":               "jupyter",
		"KERNELHOST_PLUGIN_DIR":              pluginDir,
		"KERNELHOST_JUPYTER_URL":             "http://127.0.0.1:8888/",
		"KERNELHOST_JUPYTER_TOKEN":           "tok",
		"KERNELHOST_JUPYTER_KERNEL_ENV":      `{"KERNEL_USERNAME":"alice","KERNEL_NAMESPACE":"team-a"}`,
		"KERNELHOST_JUPYTER_HEADERS":         `{"X-Proxy-Auth":"p"}`,
		"KERNELHOST_JUPYTER_KERNEL_NAMES":    `{"python":"python_kubernetes"}`,
		"KERNELHOST_JUPYTER_CA_FILE":         "/etc/ca.pem",
		"KERNELHOST_PYTHON":                  "/opt/python",
		"KERNELHOST_POLICIES":                "/a.wasm,/b.wasm",
		"KERNELHOST_POLICY_CONFIG_DENYLIST":  "{}",
		"KERNELHOST_POLICY_CONFIG_UNSET_ONE": "",
	}
	c, err := settings.Load("kernelhost", []string{"-jupyter-token", "flag", "-jupyter-start-timeout", "5m"}, env(vars), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.TransportName != "jupyter" || c.PluginDir != pluginDir || c.Policies != "/a.wasm,/b.wasm" {
		t.Fatalf("settings not applied: %+v", c)
	}
	if c.TransportSettings["jupyter-token"] != "flag" {
		t.Fatalf("token %q: the flag must win", c.TransportSettings["jupyter-token"])
	}
	// The plugin gets its settings, typed, and the host's bounds on its
	// kernel starts follow its start and connect timeouts: 5m + 2m + 30s.
	got, engineStart, pluginStart, pluginCall, err := settings.PluginSettings(c)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"jupyter-url": "http://127.0.0.1:8888/", "jupyter-token": "flag", "jupyter-ca-file": "/etc/ca.pem",
		"jupyter-kernel-env":    map[string]string{"KERNEL_NAMESPACE": "team-a", "KERNEL_USERNAME": "alice"},
		"jupyter-headers":       map[string]string{"X-Proxy-Auth": "p"},
		"jupyter-kernel-names":  map[string]string{"python": "python_kubernetes"},
		"jupyter-start-timeout": 5 * time.Minute,
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("plugin settings %v, want %v (the subprocess plugin's python is not the jupyter plugin's)", got, want)
	}
	if engineStart != 7*time.Minute+30*time.Second || pluginStart != 8*time.Minute || pluginCall != 2*time.Minute+30*time.Second {
		t.Fatalf("host bounds: engine start %v, plugin start %v, plugin call %v", engineStart, pluginStart, pluginCall)
	}
	if v, ok := c.LookupEnv("KERNELHOST_POLICY_CONFIG_DENYLIST"); !ok || v != "{}" {
		t.Fatalf("LookupEnv: %q %v", v, ok)
	}
	if _, ok := c.LookupEnv("KERNELHOST_POLICY_CONFIG_UNSET_ONE"); ok {
		t.Fatal("an empty variable must count as unset")
	}

	// The token may come from a file (a setting the plugin declares and the
	// host reads), but not both ways.
	delete(vars, "KERNELHOST_JUPYTER_TOKEN")
	vars["KERNELHOST_JUPYTER_TOKEN_FILE"] = tokenFile
	if c, err = settings.Load("kernelhost", nil, env(vars), io.Discard); err != nil || c.TransportSettings["jupyter-token"] != "from-file" {
		t.Fatalf("token file: %q %v", c.TransportSettings["jupyter-token"], err)
	}
	if _, err = settings.Load("kernelhost", []string{"-jupyter-token", "flag"}, env(vars), io.Discard); err == nil || !strings.Contains(err.Error(), "jupyter-token and jupyter-token-file are both set") {
		t.Fatalf("token both ways: %v", err)
	}
}

func TestLoadEnvAndFlags(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "env.json")
	if err := os.WriteFile(file, []byte(`{"A":"from file","B":"file"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{
		"KERNELHOST_ADDR":              "127.0.0.1:1",
		"KERNELHOST_QUEUE_DEPTH":       "7",
		"KERNELHOST_DISCONNECT_POLICY": "continue",
		"KERNELHOST_ENV_FILE":          file,
		"KERNELHOST_ENV":               `{"A":"inline"}`,
		"KERNELHOST_PYTHON":            "/opt/python",
		"KERNELHOST_PLUGIN_DIR":        pluginDir,
		"KERNELHOST_LOG_FORMAT":        "json",
		"KERNELHOST_PPROF_ADDR":        "127.0.0.1:6060",
	}
	c, err := settings.Load("kernelhost", []string{"-addr", "127.0.0.1:2"}, env(vars), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.Addr != "127.0.0.1:2" {
		t.Errorf("addr %q: the flag must win over KERNELHOST_ADDR", c.Addr)
	}
	if c.QueueDepth != 7 || c.DisconnectPolicy != engine.DisconnectContinue || c.TransportSettings["python"] != "/opt/python" || c.PprofAddr != "127.0.0.1:6060" {
		t.Errorf("env settings not applied: %+v", c)
	}
	if c.GlobalEnv["A"] != "inline" || c.GlobalEnv["B"] != "file" {
		t.Errorf("global env %q: inline must win over the file", c.GlobalEnv)
	}
}

func TestLoadErrors(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		args []string
		env  map[string]string
		want string
	}{
		"bad policy":      {env: map[string]string{"KERNELHOST_DISCONNECT_POLICY": "nope"}, want: "disconnect policy"},
		"bad int":         {env: map[string]string{"KERNELHOST_QUEUE_DEPTH": "x"}, want: "KERNELHOST_QUEUE_DEPTH"},
		"bad env json":    {env: map[string]string{"KERNELHOST_ENV": `{"A":1}`}, want: "KERNELHOST_ENV"},
		"bad kernel env":  {args: []string{"-jupyter-kernel-env", `["KERNEL_USERNAME"]`}, want: "KERNELHOST_JUPYTER_KERNEL_ENV: want a JSON object"},
		"bad headers":     {env: map[string]string{"KERNELHOST_JUPYTER_HEADERS": `{"X":1}`}, want: "KERNELHOST_JUPYTER_HEADERS: want a JSON object"},
		"missing file":    {args: []string{"-env-file", "/does/not/exist"}, want: "global env file"},
		"bad log level":   {args: []string{"-log-level", "loud"}, want: "log level"},
		"bad body limit":  {args: []string{"-max-body-bytes", "0"}, want: "max-body-bytes"},
		"stray arguments": {args: []string{"extra"}, want: "unexpected arguments"},
		"transport path":  {env: map[string]string{"KERNELHOST_TRANSPORT": "/bin/sh"}, want: "not a path"},
		"empty transport": {args: []string{"-transport", ""}, want: "KERNELHOST_TRANSPORT"},
		// The plugins' settings, checked against their descriptions.
		"zero start timeout":  {args: []string{"-jupyter-start-timeout", "0"}, want: "jupyter-start-timeout must be positive, got 0s (KERNELHOST_JUPYTER_START_TIMEOUT)"},
		"negative keep-alive": {env: map[string]string{"KERNELHOST_JUPYTER_KEEP_ALIVE": "-1s"}, want: "jupyter-keep-alive must not be negative, got -1s (KERNELHOST_JUPYTER_KEEP_ALIVE)"},
		"bad sandbox":         {args: []string{"-sandbox", "maybe"}, want: `sandbox must be auto, on or off, got "maybe" (KERNELHOST_SANDBOX)`},
		"bad network":         {env: map[string]string{"KERNELHOST_CONTEXT_NETWORK": "open"}, want: `context-network must be isolated, none or host, got "open" (KERNELHOST_CONTEXT_NETWORK)`},
		"tiny message cap":    {args: []string{"-max-message-bytes", "100"}, want: "max-message-bytes must be between 4096 and 134217728, got 100 (KERNELHOST_MAX_MESSAGE_BYTES)"},
		"negative pids":       {args: []string{"-context-pids=-1"}, want: "context-pids must not be negative"},
		"bad bool":            {env: map[string]string{"KERNELHOST_KERNEL_CGROUPS": "perhaps"}, want: "KERNELHOST_KERNEL_CGROUPS"},
		"bad duration":        {env: map[string]string{"KERNELHOST_JUPYTER_RESTART_TIMEOUT": "soon"}, want: "KERNELHOST_JUPYTER_RESTART_TIMEOUT"},
		"missing token file":  {args: []string{"-jupyter-token-file", "/does/not/exist"}, want: "jupyter-token-file: open /does/not/exist"},
	} {
		t.Run(name, func(t *testing.T) {
			if tc.env == nil {
				tc.env = map[string]string{}
			}
			tc.env["KERNELHOST_PLUGIN_DIR"] = pluginDir
			_, err := settings.Load("kernelhost", tc.args, env(tc.env), io.Discard)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one mentioning %q", err, tc.want)
			}
		})
	}
}

func TestEnvVarName(t *testing.T) {
	t.Parallel()
	if got := settings.EnvVar("default-cwd"); got != "KERNELHOST_DEFAULT_CWD" {
		t.Fatal(got)
	}
}

// The plugins' settings are config file keys too, with the TOML type of
// their flag; the plugin directory may itself come from the file.
func TestPluginSettingsInTheConfigFile(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "kernelhost.toml")
	if err := os.WriteFile(file, []byte("plugin-dir = \""+pluginDir+"\"\njupyter-start-timeout = \"3m\"\ncontext-pids = 5\nkernel-cgroups = false\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := settings.Load("kernelhost", []string{"-config", file, "-context-pids", "6"}, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]string{"jupyter-start-timeout": "3m0s", "context-pids": "6", "kernel-cgroups": "false"}; !reflect.DeepEqual(c.TransportSettings, want) {
		t.Fatalf("transport settings %v, want %v", c.TransportSettings, want)
	}
	if err := os.WriteFile(file, []byte("plugin-dir = \""+pluginDir+"\"\ncontext-pids = \"5\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := settings.Load("kernelhost", []string{"-config", file}, env(nil), io.Discard); err == nil || !strings.Contains(err.Error(), "context-pids: want an integer") {
		t.Fatalf("a string for an int: %v", err)
	}
}

// Without its plugin, a plugin's setting is unknown, and the error says
// why; -help still works and says which settings it cannot list.
func TestPluginSettingsWithoutThePlugin(t *testing.T) {
	t.Parallel()
	empty := t.TempDir()
	_, err := settings.Load("kernelhost", []string{"-plugin-dir", empty, "-jupyter-url", "http://gw/"}, env(nil), io.Discard)
	if err == nil || !strings.Contains(err.Error(), "not defined: -jupyter-url") || !strings.Contains(err.Error(), "has no kernelhost-transport-* executables") {
		t.Fatalf("error %v", err)
	}
	broken := filepath.Join(empty, "kernelhost-transport-broken")
	if err := os.WriteFile(broken, []byte("#!/bin/sh\necho 'no transport here' >&2\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	var help strings.Builder
	if _, err := settings.Load("kernelhost", []string{"-help"}, env(map[string]string{"KERNELHOST_PLUGIN_DIR": empty}), &help); err == nil {
		t.Fatal("-help: no ErrHelp")
	}
	if !strings.Contains(help.String(), "  -queue-depth int") || !strings.Contains(help.String(), "broken: describe "+broken+": exit status 3 (not a kernelhost transport plugin, or one built before plugins described their settings); it said: no transport here") {
		t.Fatalf("-help:\n%s", help.String())
	}
}
