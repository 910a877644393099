package pluginrpc

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// script writes an executable shell script to a temporary directory.
func script(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kernelhost-transport-x")
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// A plugin describes its settings when run with DescribeArg, without the
// handshake; a binary that does not, or hangs, or says nonsense, is an
// error that says so, in bounded time.
func TestDescribe(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	configured := script(t, helperEnv+"=configured exec "+exe+` "$@"`)
	d, err := Describe(ctx, configured)
	if err != nil {
		t.Fatal(err)
	}
	if d.Protocol != ProtocolVersion || len(d.Settings) != 1 || d.Settings[0].Name != "greeting" || d.Settings[0].Type != TypeString {
		t.Fatalf("description %+v", d)
	}
	// A plugin without settings describes none.
	d, err = Describe(ctx, exampleBin)
	if err != nil || len(d.Settings) != 0 {
		t.Fatalf("example plugin: %+v %v", d, err)
	}

	// The host's settings and secrets stay out of its environment, as out
	// of a launched plugin's.
	t.Setenv("KERNELHOST_ACCESS_TOKEN", "secret-4b1e")
	d, err = Describe(ctx, script(t, `env | grep -q KERNELHOST_ && exit 9; echo '{"protocol":2,"settings":[]}'`))
	if err != nil {
		t.Fatalf("a host variable reached -describe: %v", err)
	}

	for name, tc := range map[string]struct{ body, want string }{
		"not a plugin": {"echo 'no transport here' >&2; exit 3", "exit status 3 (not a kernelhost transport plugin, or one built before plugins described their settings); it said: no transport here"},
		"nonsense":     {"echo hello", "not a plugin description"},
		"old protocol": {`echo '{"protocol":1,"settings":[]}'`, "plugin protocol 1"},
		"bad setting":  {`echo '{"protocol":2,"settings":[{"name":"x","type":"complex"}]}'`, `setting x: unknown type "complex"`},
		"flooding":     {"yes", "over 1048576 bytes"},
	} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			_, err := Describe(ctx, script(t, tc.body))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one with %q", err, tc.want)
			}
		})
	}
	t.Run("hangs", func(t *testing.T) {
		short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err := Describe(short, script(t, "exec sleep 60"))
		if err == nil || !strings.Contains(err.Error(), "no answer in time") || time.Since(start) > 10*time.Second {
			t.Fatalf("error %v after %v", err, time.Since(start))
		}
	})
}
