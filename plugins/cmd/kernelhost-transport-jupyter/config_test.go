package main

import (
	"strings"
	"testing"
	"time"

	"github.com/kernelhost/kernelhost/plugins/transportplugin"
)

func TestDecodeSettings(t *testing.T) {
	var s settings
	err := transportplugin.NewSettings(map[string]any{
		"jupyter-url":                  "https://gateway.example/prefix/",
		"jupyter-token":                "tok",
		"jupyter-kernel-env":           map[string]string{"KERNEL_USERNAME": "alice"},
		"jupyter-start-timeout":        5 * time.Minute,
		"jupyter-connect-timeout":      90 * time.Second,
		"jupyter-restart-timeout":      3 * time.Minute,
		"jupyter-keep-alive":           45 * time.Second,
		"jupyter-ca-file":              "/etc/ca.pem",
		"jupyter-client-cert":          "",
		"jupyter-client-key":           "",
		"jupyter-insecure-skip-verify": true,
		"jupyter-headers":              map[string]string{"X-Proxy-Auth": "p"},
		"jupyter-kernel-names":         map[string]string{"python": "python_kubernetes"},
	}).Decode(&s)
	if err != nil || s.URL != "https://gateway.example/prefix/" || s.Token != "tok" || len(s.KernelEnv) != 1 || s.KernelEnv["KERNEL_USERNAME"] != "alice" {
		t.Fatalf("settings: %+v %v", s, err)
	}
	if c := s.config(); c.StartTimeout != 5*time.Minute || c.ConnectTimeout != 90*time.Second || c.RestartTimeout != 3*time.Minute || c.KeepAlive != 45*time.Second ||
		c.CAFile != "/etc/ca.pem" || !c.InsecureSkipVerify || c.Headers["X-Proxy-Auth"] != "p" || c.KernelNames["python"] != "python_kubernetes" {
		t.Fatalf("config: %+v", c)
	}
	// A setting of the wrong type names the setting, never the value.
	err = transportplugin.NewSettings(map[string]any{"jupyter-token": 7 * time.Second}).Decode(&s)
	if err == nil || !strings.Contains(err.Error(), "jupyter-token") {
		t.Fatalf("a duration for the token: %v", err)
	}
}
