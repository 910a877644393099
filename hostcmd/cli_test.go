package main

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kernelhost/kernelhost/internal/testkit"
)

var update = flag.Bool("update", false, "rewrite the golden files of the CLI tests")

// run runs exe (kernelhost) with the environment env and returns its status
// and output.
func run(t *testing.T, exe, stdin string, env []string, args ...string) (status int, stdout, stderr string) {
	t.Helper()
	cmd := exec.Command(exe, args...)
	cmd.Env = env
	cmd.Stdin = strings.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(2 * time.Minute):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("kernelhost %q did not exit in time", args)
	}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		status = ee.ExitCode()
	default:
		t.Fatal(err)
	}
	return status, out.String(), errOut.String()
}

// golden compares a run with testdata/cli/NAME.golden (-update rewrites it).
// mask replaces what varies between machines and runs in the output first.
func golden(t *testing.T, name string, status int, stdout, stderr string, mask func(string) string) {
	t.Helper()
	got := mask("status " + strconv.Itoa(status) + "\n-- stdout --\n" + stdout + "-- stderr --\n" + stderr)
	path := filepath.Join("testdata", "cli", name+".golden")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test -run %s -update writes it)", err, t.Name())
	}
	if got != string(want) {
		t.Errorf("output differs from %s (-update rewrites it)\ngot:\n%s\nwant:\n%s", path, got, want)
	}
}

func replacer(oldnew ...string) func(string) string { return strings.NewReplacer(oldnew...).Replace }

// linkPlugins hard-links the plugins TestMain built (bin/plugins beside
// kernelhost) into dir: a directory of the test's own to add files to,
// without building them again.
func linkPlugins(t *testing.T, dir string) {
	t.Helper()
	built := filepath.Join(filepath.Dir(kernelhost), "plugins")
	entries, err := os.ReadDir(built)
	if err != nil || len(entries) == 0 {
		t.Fatalf("the plugins TestMain built in %s: %v", built, err)
	}
	for _, e := range entries {
		if err := os.Link(filepath.Join(built, e.Name()), filepath.Join(dir, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
}

// goVersion masks the Go version and platform in version's output.
var goVersion = replacer(runtime.Version()+" "+runtime.GOOS+"/"+runtime.GOARCH, "GOVERSION")

func TestCLIUsageAndHelp(t *testing.T) {
	t.Parallel()
	binDir := filepath.Dir(kernelhost)
	masks := replacer(filepath.Join(binDir, "plugins"), "BIN/plugins")
	for name, args := range map[string][]string{
		"usage":             nil,
		"help":              {"help"},
		"help-serve":        {"help", "serve"},
		"help-mcp":          {"help", "mcp"},
		"serve-help":        {"serve", "-help"},
		"help-plugins-list": {"help", "plugins", "list"},
		"help-policy-eval":  {"help", "policy", "eval"},
		"unknown-command":   {"frobnicate"},
		"plugins-alone":     {"plugins"},
		"serve-bad-flag":    {"serve", "-queue-depth", "many"},
	} {
		t.Run(name, func(t *testing.T) {
			status, stdout, stderr := run(t, kernelhost, "", hostEnv(), args...)
			golden(t, name, status, stdout, stderr, masks)
		})
	}
}

func TestCLIVersion(t *testing.T) {
	t.Parallel()
	t.Run("dev", func(t *testing.T) {
		status, stdout, stderr := run(t, kernelhost, "", hostEnv(), "version")
		commit := regexp.MustCompile(`(?m)^commit .*$`)
		golden(t, "version-dev", status, stdout, stderr, func(s string) string {
			return commit.ReplaceAllString(goVersion(s), "commit COMMIT")
		})
	})
	t.Run("stamped", func(t *testing.T) {
		exe := filepath.Join(t.TempDir(), "kernelhost")
		const pkg = testkit.Module + "/hostcmd/internal/buildinfo"
		if err := testkit.Kernelhost(exe, "-X "+pkg+".version=v1.2.3-4-gabcdef0-dirty -X "+pkg+".commit=abcdef0123"); err != nil {
			t.Fatal(err)
		}
		status, stdout, stderr := run(t, exe, "", hostEnv(), "version")
		golden(t, "version-stamped", status, stdout, stderr, goVersion)
	})
}

// plugins list on the plugins TestMain built, plus one that crashes and one
// that is not executable; the jupyter plugin fails too (no server at its URL).
func TestCLIPluginsList(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	linkPlugins(t, dir)
	crash := "#!/bin/sh\necho 'no transport here' >&2\nexit 3\n"
	if err := os.WriteFile(filepath.Join(dir, "kernelhost-transport-crash"), []byte(crash), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "kernelhost-transport-notexec"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "README"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	url := "http://" + testkit.FreeAddr(t) + "/"
	status, stdout, stderr := run(t, kernelhost, "", hostEnv("KERNELHOST_JUPYTER_URL="+url), "plugins", "list", "-plugin-dir", dir)
	// The jupyter plugin's error (its transport found no server at url)
	// says so, without go-plugin's debug log of the plugin's start (JSON
	// records).
	jupyterErr := regexp.MustCompile(`(?m)^jupyter: .*$`)
	if l := jupyterErr.FindString(stdout); !strings.Contains(l, "configure: cannot start the jupyter transport at "+url) || !strings.Contains(l, "connection refused") ||
		strings.Contains(l, "@level") {
		t.Errorf("the jupyter plugin's error %q does not say (only) that it found no server at %s", l, url)
	}
	golden(t, "plugins-list", status, stdout, stderr, func(s string) string {
		s = strings.ReplaceAll(replacer(dir, "PLUGINS")(s), url, "URL")
		return regexp.MustCompile(`127\.0\.0\.1:[0-9]+`).ReplaceAllString(s, "127.0.0.1:PORT")
	})

	t.Run("missing directory", func(t *testing.T) {
		missing := filepath.Join(dir, "none")
		status, stdout, stderr := run(t, kernelhost, "", hostEnv(), "plugins", "list", "-plugin-dir", missing)
		golden(t, "plugins-list-missing", status, stdout, stderr, replacer(missing, "MISSING"))
	})
}

// serve -help without its plugins, or with one that cannot describe its
// settings, still lists the host's settings and says which it cannot list
// and why; a plugin's setting is then an error that says why it is unknown.
func TestCLIHelpWithoutPlugins(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	masks := replacer(dir, "PLUGINS", filepath.Join(filepath.Dir(kernelhost), "plugins"), "BIN/plugins")
	status, stdout, stderr := run(t, kernelhost, "", hostEnv(), "serve", "-help", "-plugin-dir", dir)
	golden(t, "serve-help-no-plugins", status, stdout, stderr, masks)

	crash := "#!/bin/sh\necho 'no transport here' >&2\nexit 3\n"
	if err := os.WriteFile(filepath.Join(dir, "kernelhost-transport-crash"), []byte(crash), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := testkit.Build(dir, "plugins/examples/cmd/kernelhost-transport-example-bash"); err != nil {
		t.Fatal(err)
	}
	status, stdout, stderr = run(t, kernelhost, "", hostEnv("KERNELHOST_PLUGIN_DIR="+dir), "serve", "-help")
	golden(t, "serve-help-broken-plugin", status, stdout, stderr, masks)
	status, stdout, stderr = run(t, kernelhost, "", hostEnv(), "serve", "-plugin-dir", dir, "-jupyter-url", "http://127.0.0.1:1/")
	golden(t, "serve-plugin-setting-without-plugin", status, stdout, stderr, masks)
}

// policy eval on the example modules: allow, rewrite and reject, and the
// errors: a module that is no module, one that traps, bad input.
func TestCLIPolicyEval(t *testing.T) {
	t.Parallel()
	if watErr != nil {
		testkit.Missing(t, watErr)
	}
	dir := t.TempDir()
	junk := filepath.Join(dir, "junk.wasm")
	if err := os.WriteFile(junk, []byte("not wasm"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A config file next to a copy of reserved.wasm, found as serve finds it.
	withFile := filepath.Join(dir, "reserved.wasm")
	if b, err := os.ReadFile(reserved); err != nil {
		t.Fatal(err)
	} else if err := os.WriteFile(withFile, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "reserved.config"), []byte("ACME_\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	const input = `{"context_id":"c1","language":"python","cwd":"/home/user","env_vars":%s,"global_env":{"HOME":"/home/user"},"metadata":{"request_id":"r1"}}`
	envs := func(m string) string { return strings.Replace(input, "%s", m, 1) }
	for name, tc := range map[string]struct {
		args  []string
		env   []string
		stdin string
	}{
		"allow":                 {[]string{denylist}, nil, envs(`{"APP_MODE":"test"}`)},
		"allow-empty-input":     {[]string{reserved}, nil, `{}`},
		"rewrite":               {[]string{"-config", `{"defaults":{"TZ":"UTC"}}`, denylist}, nil, envs(`{"APP_MODE":"test"}`)},
		"reject":                {[]string{denylist}, nil, envs(`{"LD_PRELOAD":"/x.so","PYTHONPATH":"/x","OK":"1"}`)},
		"reject-wat":            {[]string{reserved}, nil, envs(`{"KERNELHOST_TOKEN":"x"}`)},
		"config-from-env":       {[]string{reserved}, []string{"KERNELHOST_POLICY_CONFIG_RESERVED=ACME_"}, envs(`{"ACME_KEY":"x"}`)},
		"config-from-file":      {[]string{withFile}, nil, envs(`{"ACME_KEY":"x","KERNELHOST_TOKEN":"allowed now"}`)},
		"config-flag-wins":      {[]string{"-config", "OTHER_", withFile}, nil, envs(`{"ACME_KEY":"x"}`)},
		"broken-module":         {[]string{junk}, nil, `{}`},
		"trapping-module":       {[]string{trapping}, nil, envs(`{"A":"1"}`)},
		"missing-module":        {[]string{filepath.Join(dir, "none.wasm")}, nil, `{}`},
		"bad-input":             {[]string{reserved}, nil, `{"env_vars":{"A":1}}`},
		"misspelt-input-member": {[]string{reserved}, nil, `{"env_var":{}}`},
		"no-module":             {nil, nil, `{}`},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			status, stdout, stderr := run(t, kernelhost, tc.stdin, hostEnv(tc.env...), append([]string{"policy", "eval"}, tc.args...)...)
			golden(t, "policy-eval-"+name, status, stdout, stderr, replacer(dir, "DIR", filepath.Dir(denylist), "BUILD"))
		})
	}
}
