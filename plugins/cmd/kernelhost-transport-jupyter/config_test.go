package main

import (
	"strings"
	"testing"
	"time"
)

func getenv(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

func TestReadSettings(t *testing.T) {
	s, err := readSettings(getenv(nil))
	if err != nil || s.URL != defaultURL || s.Token != "" || s.KernelEnv != nil {
		t.Fatalf("defaults: %+v %v", s, err)
	}
	s, err = readSettings(getenv(map[string]string{
		envURL:       "https://gateway.example/prefix/",
		envToken:     "tok",
		envKernelEnv: `{"KERNEL_USERNAME":"alice"}`,
		envStart:     "5m",
		envConnect:   "90s",
		envRestart:   "3m",
		envKeepAlive: "45s",
		envCAFile:    "/etc/ca.pem",
		envInsecure:  "true",
		envHeaders:   `{"X-Proxy-Auth":"p"}`,
		envNames:     `{"python":"python_kubernetes"}`,
	}))
	if err != nil || s.URL != "https://gateway.example/prefix/" || s.Token != "tok" || len(s.KernelEnv) != 1 || s.KernelEnv["KERNEL_USERNAME"] != "alice" {
		t.Fatalf("settings: %+v %v", s, err)
	}
	if c := s.config(); c.StartTimeout != 5*time.Minute || c.ConnectTimeout != 90*time.Second || c.RestartTimeout != 3*time.Minute || c.KeepAlive != 45*time.Second ||
		c.CAFile != "/etc/ca.pem" || !c.InsecureSkipVerify || c.Headers["X-Proxy-Auth"] != "p" || c.KernelNames["python"] != "python_kubernetes" {
		t.Fatalf("timeouts: %+v", c)
	}
	if _, err := readSettings(getenv(map[string]string{envConnect: "soon"})); err == nil || !strings.Contains(err.Error(), envConnect) {
		t.Fatalf("bad timeout: %v", err)
	}
	_, err = readSettings(getenv(map[string]string{envKernelEnv: `{"KERNEL_USERNAME":1,"SECRET":"hunter2"}`}))
	if err == nil || !strings.Contains(err.Error(), envKernelEnv) || strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("bad kernel env: %v, want an error naming the variable, not the value", err)
	}
}
