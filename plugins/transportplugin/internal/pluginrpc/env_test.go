package pluginrpc

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/kernelhost/kernelhost/core"
)

// User code in a plugin's interpreters must not see go-plugin's handshake
// variables (PLUGIN_CLIENT_CERT, the magic cookie, ...). A variable the host
// passes on purpose is the control: it must still be there.
func TestKernelsDoNotSeeHandshakeEnv(t *testing.T) {
	t.Parallel()
	const control = "KH_ENV_CONTROL=passed-on"
	cases := []struct {
		name, bin, lang, code string
	}{
		{"subprocess python", subprocessBin, "python",
			`import os; print(sorted(k for k in os.environ if k.startswith("PLUGIN_") or k.startswith("KERNELHOST_TRANSPORT_PLUGIN")), os.environ.get("KH_ENV_CONTROL"))`},
		{"subprocess bash", subprocessBin, "bash",
			`echo "[$(env | grep -E '^(PLUGIN_|KERNELHOST_TRANSPORT_PLUGIN)' | cut -d= -f1 | tr '\n' ' ')] $KH_ENV_CONTROL"`},
		{"example bash", exampleBin, "bash",
			`echo "[$(env | grep -E '^(PLUGIN_|KERNELHOST_TRANSPORT_PLUGIN)' | cut -d= -f1 | tr '\n' ' ')] $KH_ENV_CONTROL"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := launch(t, Config{Path: c.bin, Logger: testLogger(t), Env: []string{control}})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			k, err := s.StartKernel(ctx, core.KernelSpec{Language: c.lang, Cwd: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			defer k.Shutdown(ctx)
			got := strings.TrimSpace(stdout(run(t, k, "env", c.code)))
			if got != "[] passed-on" {
				t.Fatalf("kernel sees %q, want no handshake variable and the control (\"[] passed-on\")", got)
			}
		})
	}
}
