package main

import (
	"strings"
	"testing"
	"time"

	"github.com/kernelhost/kernelhost/plugins/transportplugin"
	"github.com/kernelhost/kernelhost/transports/jupyter"
)

func TestSettingsMakeTheConfig(t *testing.T) {
	c, err := transportplugin.Configuration(settings, transportplugin.NewSettings(map[string]any{
		"jupyter-url":                  "https://gateway.example/prefix/",
		"jupyter-token":                "tok",
		"jupyter-kernel-env":           map[string]string{"KERNEL_USERNAME": "alice"},
		"jupyter-start-timeout":        5 * time.Minute,
		"jupyter-restart-timeout":      3 * time.Minute,
		"jupyter-keep-alive":           45 * time.Second,
		"jupyter-ca-file":              "/etc/ca.pem",
		"jupyter-client-cert":          "/etc/c.pem",
		"jupyter-client-key":           "/etc/k.pem",
		"jupyter-insecure-skip-verify": true,
		"jupyter-headers":              map[string]string{"X-Proxy-Auth": "p"},
		"jupyter-kernel-names":         map[string]string{"python": "python_kubernetes"},
	}))
	if err != nil || c.URL != "https://gateway.example/prefix/" || c.Token != "tok" || len(c.KernelEnv) != 1 || c.KernelEnv["KERNEL_USERNAME"] != "alice" {
		t.Fatalf("config: %+v %v", c, err)
	}
	if c.StartTimeout != 5*time.Minute || c.RestartTimeout != 3*time.Minute || c.KeepAlive != 45*time.Second ||
		c.CAFile != "/etc/ca.pem" || c.ClientCertFile != "/etc/c.pem" || c.ClientKeyFile != "/etc/k.pem" || !c.InsecureSkipVerify ||
		c.Headers["X-Proxy-Auth"] != "p" || c.KernelNames["python"] != "python_kubernetes" {
		t.Fatalf("config: %+v", c)
	}
	// A setting not given keeps its declared default.
	if c.ConnectTimeout != jupyter.DefaultKernelTimeout {
		t.Fatalf("connect timeout %v, want the default %v", c.ConnectTimeout, jupyter.DefaultKernelTimeout)
	}
	c, err = transportplugin.Configuration(settings, transportplugin.NewSettings(nil))
	if err != nil || c.URL != "http://127.0.0.1:8888/" || c.StartTimeout != jupyter.DefaultKernelTimeout || c.KeepAlive != 0 || c.KernelEnv != nil {
		t.Fatalf("defaults: %+v %v", c, err)
	}
	// A setting of the wrong type, or one the plugin does not take (the
	// token file is the host's to read), names the setting, never the value.
	for name, v := range map[string]any{"jupyter-token": 7 * time.Second, "jupyter-token-file": "/run/secret", "python": "python3"} {
		_, err = transportplugin.Configuration(settings, transportplugin.NewSettings(map[string]any{name: v}))
		if err == nil || !strings.Contains(err.Error(), "setting "+name) {
			t.Errorf("%s = %v: %v", name, v, err)
		}
	}
}
