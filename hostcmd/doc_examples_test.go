package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kernelhost/kernelhost/internal/testkit"
)

// The doc-example harness: TestDocExamples runs the examples of README.md and
// docs/*.md. A reader sees plain fenced blocks; an HTML comment on the line
// before a fence marks it for the test:
//
//	<!-- example: NAME -->  a sh block, run with `bash -euo pipefail`
//	<!-- output: NAME -->   a text block: what example NAME prints (stdout
//	                        and stderr together); every example has one
//	<!-- serve: NAME -->    a sh block of one `kernelhost serve ...` or
//	                        `bin/kernelhost serve ...` command: the host
//	                        example NAME talks to (default: `kernelhost serve`)
//	<!-- file: PATH -->     a go block that must equal the file PATH of the
//	                        repository (which the build compiles and tests)
//
// Names are per doc. Each example runs in a fresh directory holding bin/ as
// `make build plugins policies` lays it out in a checkout (bin/kernelhost,
// bin/plugins/, bin/policies/*.wasm, all built from this tree), with that
// bin/ first on PATH and no KERNELHOST_* variable set. An example that
// mentions localhost:49999 or 127.0.0.1:49999 gets its own host, started for
// it on a free loopback port: the test rewrites those addresses in the block
// to the host's. Before the comparison both outputs are normalised: UUIDs
// become <uuid>, RFC 3339 timestamps <time>, trailing spaces and blank lines
// go.
//
// A doc in requiredExamples without an example, a marker without its block,
// an example without its output, a failing example or a differing output
// fails the test.

// requiredExamples are the docs that must have at least one example.
var requiredExamples = []string{"README.md", "docs/operating.md", "docs/writing-a-transport.md", "docs/writing-a-policy.md"}

// exampleTimeout bounds one example's run.
const exampleTimeout = 2 * time.Minute

type docExample struct {
	name            string
	line            int    // of the example's marker
	script          string // the sh block
	serve           []string
	output          string
	hasServe, hasOK bool // a serve block; an output block
}

type docFile struct {
	path     string // in the repository, from a file marker
	line     int
	contents string
}

type parsedDoc struct {
	examples []*docExample // in the doc's order
	files    []docFile
}

var (
	markerRE = regexp.MustCompile(`^<!-- (example|output|serve|file): (\S+) -->$`)
	fenceRE  = regexp.MustCompile("^```")
)

// parseDoc reads the marked blocks of a markdown document.
func parseDoc(text string) (*parsedDoc, error) {
	lines := strings.Split(text, "\n")
	doc := &parsedDoc{}
	byName := map[string]*docExample{}
	get := func(name string) *docExample {
		if e := byName[name]; e != nil {
			return e
		}
		e := &docExample{name: name}
		byName[name] = e
		return e
	}
	for i := 0; i < len(lines); i++ {
		m := markerRE.FindStringSubmatch(strings.TrimSpace(lines[i]))
		if m == nil {
			continue
		}
		kind, name, at := m[1], m[2], i+1
		if i+1 >= len(lines) || !fenceRE.MatchString(lines[i+1]) {
			return nil, fmt.Errorf("line %d: marker %q is not followed by a fenced block on the next line", at, lines[i])
		}
		var body []string
		j := i + 2
		for ; j < len(lines) && strings.TrimSpace(lines[j]) != "```"; j++ {
			body = append(body, lines[j])
		}
		if j == len(lines) {
			return nil, fmt.Errorf("line %d: the block after marker %q is not closed", at, lines[i])
		}
		block := strings.Join(body, "\n") + "\n"
		i = j
		switch kind {
		case "file":
			doc.files = append(doc.files, docFile{path: name, line: at, contents: block})
		case "example":
			e := get(name)
			if e.script != "" {
				return nil, fmt.Errorf("line %d: a second example %q (the first is on line %d)", at, name, e.line)
			}
			e.script, e.line = block, at
			doc.examples = append(doc.examples, e)
		case "output":
			e := get(name)
			if e.hasOK {
				return nil, fmt.Errorf("line %d: a second output block for example %q", at, name)
			}
			e.output, e.hasOK = block, true
		case "serve":
			e := get(name)
			args, err := serveArgs(block)
			if err != nil {
				return nil, fmt.Errorf("line %d: serve block of %q: %v", at, name, err)
			}
			e.serve, e.hasServe = args, true
		}
	}
	for name, e := range byName {
		switch {
		case e.script == "":
			return nil, fmt.Errorf("an output or serve block names example %q, which the doc does not have", name)
		case !e.hasOK:
			return nil, fmt.Errorf("line %d: example %q has no output block (<!-- output: %s --> before a text block)", e.line, name, name)
		}
	}
	return doc, nil
}

// serveArgs are the arguments after `serve` of a serve block's one command
// (comments and blank lines aside; no shell quoting).
func serveArgs(block string) ([]string, error) {
	var cmd []string
	for _, l := range strings.Split(block, "\n") {
		if i := strings.Index(l, "#"); i >= 0 {
			l = l[:i]
		}
		if f := strings.Fields(l); len(f) > 0 {
			if cmd != nil {
				return nil, fmt.Errorf("want one command, got more")
			}
			cmd = f
		}
	}
	if len(cmd) < 2 || (cmd[0] != "kernelhost" && cmd[0] != "bin/kernelhost") || cmd[1] != "serve" {
		return nil, fmt.Errorf("want `kernelhost serve ...`, got %q", strings.Join(cmd, " "))
	}
	return cmd[2:], nil
}

var (
	uuidRE      = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)
	timestampRE = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)`)
	hostAddrRE  = regexp.MustCompile(`\b(localhost|127\.0\.0\.1):49999\b`)
	// A table's columns are padded to their widest cell, which depends on
	// every plugin installed (the subprocess plugin's language list grows
	// with each language), not on what the example shows.
	columnGapRE = regexp.MustCompile(` {2,}`)
	// One stream line of the NDJSON output, after timestamps are normalised.
	streamLineRE = regexp.MustCompile(`^\{"type":"(stdout|stderr)","text":"(.*)","timestamp":"<time>"\}$`)
)

// keepaliveLine is what the host sends while an execution runs past the
// keepalive interval: how many come depends on how busy the machine is.
const keepaliveLine = `{"type":"keepalive"}`

// normalizeOutput makes an example's output comparable with the doc's.
func normalizeOutput(s string) string {
	s = uuidRE.ReplaceAllString(s, "<uuid>")
	s = timestampRE.ReplaceAllString(s, "<time>")
	var lines []string
	for _, l := range strings.Split(s, "\n") {
		l = strings.TrimRight(l, " \t\r")
		if l == keepaliveLine {
			continue
		}
		if !strings.HasPrefix(l, "{") {
			l = columnGapRE.ReplaceAllString(l, "  ")
		}
		lines = appendMergingStreams(lines, l)
	}
	return strings.TrimRight(strings.Join(lines, "\n"), "\n") + "\n"
}

// appendMergingStreams appends line to lines, merged into the last line when
// both are stream lines of the same stream: how a transport splits output
// into stream messages depends on timing (TestNDJSONGolden merges the same
// way). JSON escapes each character on its own, so the escaped texts
// concatenate as they are.
func appendMergingStreams(lines []string, line string) []string {
	if len(lines) > 0 {
		prev, cur := streamLineRE.FindStringSubmatch(lines[len(lines)-1]), streamLineRE.FindStringSubmatch(line)
		if prev != nil && cur != nil && prev[1] == cur[1] {
			lines[len(lines)-1] = `{"type":"` + cur[1] + `","text":"` + prev[2] + cur[2] + `","timestamp":"<time>"}`
			return lines
		}
	}
	return append(lines, line)
}

func TestDocExamples(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("curl"); err != nil {
		testkit.Missing(t, fmt.Errorf("the doc examples need curl (apt-get install curl; `make test` installs it): %v", err))
	}
	if watErr != nil {
		testkit.Missing(t, watErr) // bin/policies/reserved.wasm
	}
	root := testkit.Root()
	bin := docExampleBin(t)

	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	docs = append([]string{filepath.Join(root, "README.md")}, docs...)
	seen := map[string]int{}
	for _, path := range docs {
		rel, _ := filepath.Rel(root, path)
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		doc, err := parseDoc(string(b))
		if err != nil {
			t.Errorf("%s: %v", rel, err)
			continue
		}
		seen[rel] = len(doc.examples)
		t.Run(rel, func(t *testing.T) {
			t.Parallel()
			for _, f := range doc.files {
				want, err := os.ReadFile(filepath.Join(root, f.path))
				if err != nil {
					t.Errorf("%s:%d: file marker: %v", rel, f.line, err)
				} else if f.contents != string(want) {
					t.Errorf("%s:%d: the doc's copy of %s differs from the file; copy the file into the doc", rel, f.line, f.path)
				}
			}
			for _, e := range doc.examples {
				t.Run(e.name, func(t *testing.T) {
					t.Parallel() // each example has a host of its own on a port of its own
					runDocExample(t, rel, bin, e)
				})
			}
		})
	}
	for _, rel := range requiredExamples {
		if seen[rel] == 0 {
			t.Errorf("%s has no runnable example (<!-- example: NAME --> before a sh block, then its <!-- output: NAME -->)", rel)
		}
	}
}

// docExampleBin lays out bin/ as make build plugins policies does in a
// checkout, from the binaries TestMain built, plus the Go example policy of
// writing-a-policy.md.
func docExampleBin(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "bin")
	policies := filepath.Join(bin, "policies")
	if err := os.MkdirAll(policies, 0o755); err != nil {
		t.Fatal(err)
	}
	for link, target := range map[string]string{
		filepath.Join(bin, "kernelhost"):         kernelhost,
		filepath.Join(bin, "plugins"):            filepath.Join(filepath.Dir(kernelhost), "plugins"),
		filepath.Join(policies, "denylist.wasm"): denylist,
		filepath.Join(policies, "reserved.wasm"): reserved,
	} {
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
	}
	if err := testkit.GoPolicy("tzdefault", filepath.Join(policies, "tzdefault.wasm")); err != nil {
		t.Fatal(err)
	}
	return bin
}

func runDocExample(t *testing.T, doc, bin string, e *docExample) {
	dir := t.TempDir()
	if err := os.Symlink(bin, filepath.Join(dir, "bin")); err != nil {
		t.Fatal(err)
	}
	script := e.script
	if hostAddrRE.MatchString(script) {
		p := startServe(t, dir, append(e.serve, "-addr", "127.0.0.1:0"), "KERNELHOST_DEFAULT_CWD="+dir)
		addr := p.waitLog("listening")["addr"].(string)
		p.waitLog("ready")
		script = hostAddrRE.ReplaceAllString(script, addr)
	} else if e.hasServe {
		t.Fatalf("%s:%d: example %q has a serve block but never talks to localhost:49999", doc, e.line, e.name)
	}
	scriptFile := filepath.Join(t.TempDir(), e.name+".sh")
	if err := os.WriteFile(scriptFile, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), exampleTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", scriptFile)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=" + filepath.Join(dir, "bin") + string(os.PathListSeparator) + os.Getenv("PATH")}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "KERNELHOST_") && !strings.HasPrefix(kv, "PATH=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	// Its own process group, killed as a whole: nothing the block started
	// in the background outlives it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	if ctx.Err() != nil {
		t.Fatalf("%s:%d: example %q did not finish within %v; its output:\n%s", doc, e.line, e.name, exampleTimeout, out.String())
	}
	if err != nil {
		t.Fatalf("%s:%d: example %q failed: %v; its output:\n%s", doc, e.line, e.name, err, out.String())
	}
	if got, want := normalizeOutput(out.String()), normalizeOutput(e.output); got != want {
		t.Errorf("%s:%d: example %q printed (normalised)\n%s\nthe doc's output block says\n%s\ndiff (-doc +got):\n%s", doc, e.line, e.name, got, want, lineDiff(want, got))
	}
}

// lineDiff lists the lines of want and got that differ, by position.
func lineDiff(want, got string) string {
	w, g := bufio.NewScanner(strings.NewReader(want)), bufio.NewScanner(strings.NewReader(got))
	var b strings.Builder
	for n := 1; ; n++ {
		wok, gok := w.Scan(), g.Scan()
		if !wok && !gok {
			return b.String()
		}
		if wok && gok && w.Text() == g.Text() {
			continue
		}
		if wok {
			fmt.Fprintf(&b, "%d -%s\n", n, w.Text())
		}
		if gok {
			fmt.Fprintf(&b, "%d +%s\n", n, g.Text())
		}
	}
}

// The harness itself: what it refuses, and the normalisation.
func TestDocExampleParser(t *testing.T) {
	const ok = "<!-- serve: a -->\n```sh\nkernelhost serve -x 1 # comment\n```\n\n<!-- example: a -->\n```sh\ncurl localhost:49999/health\n```\n<!-- output: a -->\n```text\nOK\n```\n<!-- file: go.mod -->\n```go\nmodule m\n```\n"
	doc, err := parseDoc(ok)
	if err != nil {
		t.Fatal(err)
	}
	if len(doc.examples) != 1 || doc.examples[0].script != "curl localhost:49999/health\n" || doc.examples[0].output != "OK\n" ||
		strings.Join(doc.examples[0].serve, " ") != "-x 1" || len(doc.files) != 1 || doc.files[0].path != "go.mod" {
		t.Fatalf("parsed %+v %+v", doc.examples[0], doc.files)
	}
	for name, bad := range map[string]string{
		"no output":          "<!-- example: a -->\n```sh\ntrue\n```\n",
		"output of nothing":  "<!-- output: a -->\n```text\nx\n```\n",
		"marker, no block":   "<!-- example: a -->\n\n```sh\ntrue\n```\n",
		"unclosed block":     "<!-- example: a -->\n```sh\ntrue\n",
		"two examples":       "<!-- example: a -->\n```sh\ntrue\n```\n<!-- example: a -->\n```sh\ntrue\n```\n<!-- output: a -->\n```text\n```\n",
		"serve not serve":    "<!-- serve: a -->\n```sh\nmake run\n```\n<!-- example: a -->\n```sh\ntrue\n```\n<!-- output: a -->\n```text\n```\n",
		"two serve commands": "<!-- serve: a -->\n```sh\nkernelhost serve\nkernelhost serve\n```\n<!-- example: a -->\n```sh\ntrue\n```\n<!-- output: a -->\n```text\n```\n",
	} {
		if _, err := parseDoc(bad); err == nil {
			t.Errorf("%s: parsed without an error", name)
		}
	}
	got := normalizeOutput(`{"id":"0a1b2c3d-0000-4000-8000-00000000abcd","t":"2026-11-29T10:56:52.198190917Z"}  ` + "\n\n")
	if want := `{"id":"<uuid>","t":"<time>"}` + "\n"; got != want {
		t.Errorf("normalised to %q, want %q", got, want)
	}
	if got, want := normalizeOutput("A     B  C\n"+keepaliveLine+"\n{\"text\":\"a   b\"}\n"), "A  B  C\n{\"text\":\"a   b\"}\n"; got != want {
		t.Errorf("normalised to %q, want %q (column padding collapsed, keepalive lines dropped, JSON untouched)", got, want)
	}
	split := `{"type":"stdout","text":"x is","timestamp":"<time>"}` + "\n" + `{"type":"stdout","text":" 6\\n","timestamp":"<time>"}` + "\n" +
		`{"type":"stderr","text":"e","timestamp":"<time>"}` + "\n"
	if got, want := normalizeOutput(split), `{"type":"stdout","text":"x is 6\\n","timestamp":"<time>"}`+"\n"+`{"type":"stderr","text":"e","timestamp":"<time>"}`+"\n"; got != want {
		t.Errorf("normalised to %q, want %q (one stream's consecutive lines merged, not another's)", got, want)
	}
	if normalizeOutput("2\n") == normalizeOutput("3\n") {
		t.Error("normalisation hides a difference")
	}
}
