package server_test

import (
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/kernelhost/kernelhost/core/engine"
	"github.com/kernelhost/kernelhost/hostcmd/server"
)

func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestLoadDefaults(t *testing.T) {
	c, err := server.Load("kernelhost", nil, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.Addr != "127.0.0.1:49999" || c.DefaultCwd != "/home/user" || c.DisconnectPolicy != engine.DisconnectInterrupt ||
		c.MaxBodyBytes != 16<<20 || c.Keepalive != 5*time.Second || c.Interpreters.Python != "python3" || len(c.GlobalEnv) != 0 {
		t.Fatalf("defaults: %+v", c)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if c.TransportName != "subprocess" || c.PluginDir != filepath.Join(filepath.Dir(exe), "plugins") || c.Policies != "" || c.Jupyter.URL != "http://127.0.0.1:8888/" || c.Jupyter.Token != "" || c.Jupyter.KernelEnv != nil {
		t.Fatalf("transport defaults: %q in %q, policies %q, jupyter %+v", c.TransportName, c.PluginDir, c.Policies, c.Jupyter)
	}
}

func TestLoadTransportAndPolicies(t *testing.T) {
	vars := map[string]string{
		"KERNELHOST_TRANSPORT":               "jupyter",
		"KERNELHOST_PLUGIN_DIR":              "/opt/kh/plugins",
		"KERNELHOST_JUPYTER_URL":             "http://127.0.0.1:8888/",
		"KERNELHOST_JUPYTER_TOKEN":           "tok",
		"KERNELHOST_JUPYTER_KERNEL_ENV":      `{"KERNEL_USERNAME":"alice","KERNEL_NAMESPACE":"team-a"}`,
		"KERNELHOST_JUPYTER_HEADERS":         `{"X-Proxy-Auth":"p"}`,
		"KERNELHOST_JUPYTER_KERNEL_NAMES":    `{"python":"python_kubernetes"}`,
		"KERNELHOST_JUPYTER_CA_FILE":         "/etc/ca.pem",
		"KERNELHOST_POLICIES":                "/a.wasm,/b.wasm",
		"KERNELHOST_POLICY_CONFIG_DENYLIST":  "{}",
		"KERNELHOST_POLICY_CONFIG_UNSET_ONE": "",
	}
	c, err := server.Load("kernelhost", []string{"-jupyter-token", "flag"}, env(vars), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.TransportName != "jupyter" || c.PluginDir != "/opt/kh/plugins" || c.Jupyter.URL != "http://127.0.0.1:8888/" || c.Policies != "/a.wasm,/b.wasm" {
		t.Fatalf("settings not applied: %+v", c)
	}
	if c.Jupyter.Token != "flag" {
		t.Fatalf("token %q: the flag must win", c.Jupyter.Token)
	}
	if len(c.Jupyter.KernelEnv) != 2 || c.Jupyter.KernelEnv["KERNEL_USERNAME"] != "alice" || c.Jupyter.KernelEnv["KERNEL_NAMESPACE"] != "team-a" {
		t.Fatalf("jupyter kernel env %v", c.Jupyter.KernelEnv)
	}
	if c.Jupyter.Headers["X-Proxy-Auth"] != "p" || c.Jupyter.KernelNames["python"] != "python_kubernetes" || c.Jupyter.CAFile != "/etc/ca.pem" {
		t.Fatalf("jupyter connection settings %+v", c.Jupyter)
	}
	// The plugin gets its settings, typed.
	got := server.PluginSettings(c)
	if !reflect.DeepEqual(got["jupyter-kernel-env"], map[string]string{"KERNEL_NAMESPACE": "team-a", "KERNEL_USERNAME": "alice"}) ||
		!reflect.DeepEqual(got["jupyter-headers"], map[string]string{"X-Proxy-Auth": "p"}) || got["jupyter-ca-file"] != "/etc/ca.pem" ||
		got["jupyter-start-timeout"] != 2*time.Minute || got["jupyter-insecure-skip-verify"] != false {
		t.Fatalf("plugin settings %v", got)
	}
	if _, ok := got["python"]; ok {
		t.Fatalf("the jupyter plugin gets the subprocess transport's settings: %v", got)
	}
	if v, ok := c.LookupEnv("KERNELHOST_POLICY_CONFIG_DENYLIST"); !ok || v != "{}" {
		t.Fatalf("LookupEnv: %q %v", v, ok)
	}
	if _, ok := c.LookupEnv("KERNELHOST_POLICY_CONFIG_UNSET_ONE"); ok {
		t.Fatal("an empty variable must count as unset")
	}
}

func TestLoadEnvAndFlags(t *testing.T) {
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
		"KERNELHOST_LOG_FORMAT":        "json",
		"KERNELHOST_PPROF_ADDR":        "127.0.0.1:6060",
	}
	c, err := server.Load("kernelhost", []string{"-addr", "127.0.0.1:2"}, env(vars), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.Addr != "127.0.0.1:2" {
		t.Errorf("addr %q: the flag must win over KERNELHOST_ADDR", c.Addr)
	}
	if c.QueueDepth != 7 || c.DisconnectPolicy != engine.DisconnectContinue || c.Interpreters.Python != "/opt/python" || c.PprofAddr != "127.0.0.1:6060" {
		t.Errorf("env settings not applied: %+v", c)
	}
	if c.GlobalEnv["A"] != "inline" || c.GlobalEnv["B"] != "file" {
		t.Errorf("global env %q: inline must win over the file", c.GlobalEnv)
	}
}

func TestLoadErrors(t *testing.T) {
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
	} {
		t.Run(name, func(t *testing.T) {
			_, err := server.Load("kernelhost", tc.args, env(tc.env), io.Discard)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one mentioning %q", err, tc.want)
			}
		})
	}
}

func TestEnvVarName(t *testing.T) {
	if got := server.EnvVar("default-cwd"); got != "KERNELHOST_DEFAULT_CWD" {
		t.Fatal(got)
	}
}
