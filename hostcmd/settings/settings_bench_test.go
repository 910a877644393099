package settings_test

import (
	"io"
	"testing"

	"github.com/kernelhost/kernelhost/hostcmd/settings"
)

// BenchmarkLoad is the cost of asking the transport plugins for their
// settings: Load with the plugins built into pluginDir (each run with
// -describe, at once) against Load on a directory without plugins (the
// host's own settings only). docs/RATIONALE.md quotes it.
//
//	go test -run '^$' -bench Load -count 5 ./hostcmd/settings/
func BenchmarkLoad(b *testing.B) {
	for _, bc := range []struct{ name, dir string }{{"plugins", pluginDir}, {"no-plugins", b.TempDir()}} {
		b.Run(bc.name, func(b *testing.B) {
			vars := env(map[string]string{"KERNELHOST_PLUGIN_DIR": bc.dir})
			for b.Loop() {
				if _, err := settings.Load("kernelhost", nil, vars, io.Discard); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
