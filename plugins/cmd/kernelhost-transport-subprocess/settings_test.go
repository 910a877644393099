package main

import (
	"testing"

	"github.com/kernelhost/kernelhost/plugins/transportplugin"
	"github.com/kernelhost/kernelhost/transports/subprocess"
)

// The interpreters' settings, made from the transport's languages, keep
// the names users have in their configs, and a value set reaches
// subprocess.Options; those not set keep their defaults.
func TestInterpreterSettings(t *testing.T) {
	o, err := transportplugin.Configuration(settings, transportplugin.NewSettings(map[string]any{"python": "/opt/py/bin/python3", "rscript": "/opt/R/bin/Rscript"}))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"python": "/opt/py/bin/python3", "node": "node", "bash": "bash", "rscript": "/opt/R/bin/Rscript", "java": "java"}
	got := o.interpreterPaths()
	if len(got) != len(want) {
		t.Errorf("interpreters %v, want %v", got, want)
	}
	for name, path := range want {
		if got[name] != path {
			t.Errorf("interpreter %s: %q, want %q", name, got[name], path)
		}
	}
}

// The host reads some of this plugin's settings itself, by name
// (subprocess.Setting*): the sandbox API gives its commands a context's
// walls and limits from them (hostcmd/server/sandboxapi.go). Each must be
// one this plugin declares, setting the field the host takes it for;
// otherwise the sandbox API's commands silently run with the default.
func TestSettingsTheHostReads(t *testing.T) {
	for _, c := range []struct {
		name  string
		value any
		got   func(options) any
	}{
		{subprocess.SettingSandbox, "off", func(o options) any { return o.Sandbox }},
		{subprocess.SettingSandboxWritable, "/srv/data", func(o options) any { return o.SandboxWritable }},
		{subprocess.SettingContextNetwork, "none", func(o options) any { return o.Network }},
		{subprocess.SettingContextMemory, "512MiB", func(o options) any { return o.ContextMemory }},
		{subprocess.SettingContextPids, int64(64), func(o options) any { return int64(o.ContextPids) }},
		{subprocess.SettingContextCPUWeight, int64(50), func(o options) any { return int64(o.ContextCPUWeight) }},
		{subprocess.SettingKernelCgroups, false, func(o options) any { return o.KernelCgroups }},
	} {
		o, err := transportplugin.Configuration(settings, transportplugin.NewSettings(map[string]any{c.name: c.value}))
		if err != nil {
			t.Errorf("setting %s, which the host reads: %v", c.name, err)
			continue
		}
		if got := c.got(o); got != c.value {
			t.Errorf("setting %s = %v reached the plugin as %v", c.name, c.value, got)
		}
	}
}
