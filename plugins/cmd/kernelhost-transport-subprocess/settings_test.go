package main

import (
	"testing"

	"github.com/kernelhost/kernelhost/plugins/transportplugin"
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
