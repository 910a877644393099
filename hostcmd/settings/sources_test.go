package settings_test

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kernelhost/kernelhost/hostcmd/settings"
)

// writeConfig writes a config file and returns its path.
func writeConfig(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kernelhost.toml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// One setting of each kind (string, integer, duration) in the file, the
// environment and on the command line: the first source that has it wins.
func TestConfigPrecedence(t *testing.T) {
	t.Parallel()
	file := writeConfig(t, `# the settings' flag names are the keys
default-cwd = "/from/file"
queue-depth = 8
keepalive = "7s"
`)
	type want struct {
		cwd       string
		depth     int
		keepalive time.Duration
	}
	for name, tc := range map[string]struct {
		args []string
		env  map[string]string
		want want
	}{
		"defaults without a file": {
			want: want{"/home/user", 32, settings.DefaultKeepalive},
		},
		"file over defaults": {
			args: []string{"-config", file},
			want: want{"/from/file", 8, 7 * time.Second},
		},
		"file named by the variable": {
			env:  map[string]string{"KERNELHOST_CONFIG": file},
			want: want{"/from/file", 8, 7 * time.Second},
		},
		"env over file": {
			args: []string{"-config", file},
			env:  map[string]string{"KERNELHOST_QUEUE_DEPTH": "9", "KERNELHOST_KEEPALIVE": "9s"},
			want: want{"/from/file", 9, 9 * time.Second},
		},
		"flag over env over file": {
			args: []string{"-config", file, "-queue-depth", "10", "-default-cwd", "/from/flag"},
			env:  map[string]string{"KERNELHOST_QUEUE_DEPTH": "9", "KERNELHOST_DEFAULT_CWD": "/from/env"},
			want: want{"/from/flag", 10, 7 * time.Second},
		},
		"empty variable counts as unset": {
			args: []string{"-config", file},
			env:  map[string]string{"KERNELHOST_QUEUE_DEPTH": ""},
			want: want{"/from/file", 8, 7 * time.Second},
		},
		"the -config flag over KERNELHOST_CONFIG": {
			args: []string{"-config", file},
			env:  map[string]string{"KERNELHOST_CONFIG": "/does/not/exist.toml"},
			want: want{"/from/file", 8, 7 * time.Second},
		},
	} {
		t.Run(name, func(t *testing.T) {
			c, err := settings.Load("kernelhost serve", tc.args, env(tc.env), io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			if got := (want{c.DefaultCwd, c.QueueDepth, c.Keepalive}); got != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

// Every config file mistake stops the start with the file, the line and the
// key, even when a flag overrides the key.
func TestConfigErrors(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		text string
		args []string
		want string // after "config file PATH"
	}{
		"unknown key":       {text: "addr = \"127.0.0.1:1\"\n\nqueue-dept = 8\n", want: ":3: queue-dept: unknown setting"},
		"integer as string": {text: "queue-depth = \"8\"\n", want: ":1: queue-depth: want an integer, got a string"},
		"string as integer": {text: "# c\ndefault-cwd = 5\n", want: ":2: default-cwd: want a string, got an integer"},
		"duration number":   {text: "keepalive = 5\n", want: ":1: keepalive: want a duration string"},
		"bad duration":      {text: "keepalive = \"5 parsecs\"\n", want: ":1: keepalive: invalid value \"5 parsecs\": parse error"},
		"a table":           {text: "[server]\naddr = \"x\"\n", want: ":1: server: unknown setting"},
		"config in config":  {text: "config = \"other.toml\"\n", want: ":1: config: unknown setting"},
		"syntax":            {text: "addr = \n", want: ":1: addr: expected value"},
		"overridden key is still checked": {
			text: "queue-depth = \"8\"\n", args: []string{"-queue-depth", "3"},
			want: ":1: queue-depth: want an integer",
		},
		"invalid value reaches the setting's check": {
			text: "max-body-bytes = 0\n", want: "", // checked after loading, like a flag
		},
	} {
		t.Run(name, func(t *testing.T) {
			path := writeConfig(t, tc.text)
			_, err := settings.Load("kernelhost serve", append([]string{"-config", path}, tc.args...), env(nil), io.Discard)
			prefix := "config file " + path
			if tc.want == "" {
				prefix = "max-body-bytes must be positive"
			}
			if err == nil || !strings.HasPrefix(err.Error(), prefix+tc.want) {
				t.Fatalf("error %v,\nwant one starting %q", err, prefix+tc.want)
			}
		})
	}
	t.Run("unreadable file", func(t *testing.T) {
		missing := filepath.Join(t.TempDir(), "none.toml")
		_, err := settings.Load("kernelhost serve", nil, env(map[string]string{"KERNELHOST_CONFIG": missing}), io.Discard)
		if err == nil || !strings.Contains(err.Error(), missing) {
			t.Fatalf("error %v, want one naming %s", err, missing)
		}
	})
}

// The example config of deploy/ is valid and means what its comments say.
// It sets the subprocess plugin's settings, which only the plugins describe,
// so the host is pointed at the plugins as an installed kernelhost finds them.
func TestDeployConfigLoads(t *testing.T) {
	t.Parallel()
	_, err := settings.Load("kernelhost serve", []string{"-config", "../../deploy/kernelhost.toml", "-plugin-dir", pluginDir}, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
}

func TestPluginDirFor(t *testing.T) {
	t.Parallel()
	prefix := t.TempDir()
	exe := filepath.Join(prefix, "bin", "kernelhost")
	beside := filepath.Join(prefix, "bin", "plugins")
	installed := filepath.Join(prefix, "lib", "kernelhost", "plugins")
	if got := settings.PluginDirFor(exe); got != beside {
		t.Fatalf("neither exists: %s, want %s (where make puts them)", got, beside)
	}
	if err := os.MkdirAll(installed, 0o755); err != nil {
		t.Fatal(err)
	}
	if got := settings.PluginDirFor(exe); got != installed {
		t.Fatalf("installed layout: %s, want %s", got, installed)
	}
	if err := os.MkdirAll(beside, 0o755); err != nil {
		t.Fatal(err)
	}
	if got := settings.PluginDirFor(exe); got != beside {
		t.Fatalf("both: %s, want %s (next to the executable first)", got, beside)
	}
}
