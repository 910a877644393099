package sandbox_test

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"

	"github.com/kernelhost/kernelhost/hostcmd/internal/hosttest"
	"github.com/kernelhost/kernelhost/hostcmd/settings"
)

// The host's secrets never reach user code: not in an interpreter's
// environment (python, bash, node), and, through the plugin, not in the
// plugin's /proc/<pid>/environ either (the interpreter's parent), and no
// KERNELHOST_* or go-plugin (PLUGIN_*) variable in the interpreter's.
func TestSecretsDoNotReachUserCode(t *testing.T) {
	const accessToken, jupyterToken = "access-secret-7f3a", "jupyter-secret-9c1b"
	t.Setenv("KERNELHOST_ACCESS_TOKEN", accessToken) // as systemd's Environment= would pass it
	t.Setenv("KERNELHOST_JUPYTER_TOKEN", jupyterToken)
	hosttest.EachTransport(t, func(t *testing.T, start func(...func(*settings.Config)) *hosttest.Host) {
		h := start(func(c *settings.Config) { c.SetTransportSetting("jupyter-token", jupyterToken) })
		noSecret := func(what, text string) {
			t.Helper()
			for _, secret := range []string{accessToken, jupyterToken} {
				if strings.Contains(text, secret) {
					t.Errorf("%s holds a secret: %q", what, text)
				}
			}
		}
		check := func(what, text string) {
			t.Helper()
			noSecret(what, text)
			for _, prefix := range []string{"KERNELHOST_", "PLUGIN_"} {
				if strings.Contains(text, prefix) {
					t.Errorf("%s holds a %s variable: %q", what, prefix, text)
				}
			}
		}
		lines := h.Run(map[string]any{"language": "python", "code": "import os, json\n" +
			"print(json.dumps(dict(os.environ)))\n" +
			"print(json.dumps(open('/proc/%d/environ' % os.getppid(), 'rb').read().decode('utf-8', 'replace')))"})
		hosttest.NoError(t, lines)
		out := strings.SplitN(hosttest.Stdout(lines), "\n", 2)
		var env map[string]string
		if err := json.Unmarshal([]byte(out[0]), &env); err != nil || len(env) == 0 {
			t.Fatalf("python's environment: %v %q", err, out[0])
		}
		check("python's os.environ", out[0])
		if strings.Contains(t.Name(), "plugin") {
			// go-plugin's handshake stays there (it reads it from the
			// environment): no secret, the host's public certificate.
			noSecret("the plugin's /proc/<pid>/environ", out[1])
		}
		lines = h.Run(map[string]any{"language": "bash", "code": "env"})
		hosttest.NoError(t, lines)
		check("bash's env", hosttest.Stdout(lines))
		if _, err := exec.LookPath("node"); err == nil {
			lines = h.Run(map[string]any{"language": "javascript", "code": "console.log(JSON.stringify(process.env))"})
			hosttest.NoError(t, lines)
			check("node's process.env", hosttest.Stdout(lines))
		}
	})
}
