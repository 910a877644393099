package subprocess

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kernelhost/kernelhost/core"
	"github.com/kernelhost/kernelhost/internal/testkit"
	tt "github.com/kernelhost/kernelhost/transports/transporttest"
)

// result runs code and returns its result's text/plain, failing on an error.
func result(t *testing.T, k *Kernel, code string) string {
	t.Helper()
	e := tt.Exec(t, k, code, false)
	if errs := e.OfType(core.MsgError); len(errs) > 0 {
		t.Fatalf("%q failed:%s", code, e)
	}
	text, _ := e.Result()
	return text
}

// failure runs code and returns its error's traceback, failing if it
// did not fail.
func failure(t *testing.T, k *Kernel, code string) (name, traceback string) {
	t.Helper()
	e := tt.Exec(t, k, code, false)
	errs := e.OfType(core.MsgError)
	if len(errs) != 1 {
		t.Fatalf("%q: want one error:%s", code, e)
	}
	return errs[0].EName, strings.Join(errs[0].Traceback, "\n")
}

func TestTypeScriptCells(t *testing.T) {
	t.Parallel()
	testkit.NeedCommand(t, "node", "nodejs")
	k := startKernel(t, "typescript", t.TempDir())
	for _, c := range []struct{ code, want string }{
		{"function subtract(x: number, y: number): number {\n  return x - y;\n}\n\nsubtract(1, 2)", "-1"},
		{"interface P { name: string }\nconst p: P = { name: 'kh' }\nlet n: number = 41", ""},
		{"p.name + (n + 1)", "'kh42'"},
		{"enum Color { Red, Green }\nColor.Green as number", "1"},
		// As in javascript: an awaiting expression has a result; an awaiting
		// statement list runs as an async function body (no result).
		{"(await Promise.resolve(3 as number)) * 2", "6"},
		{"type T = string\nconst s: T = `a${1 + 1}`\ns", "'a2'"},
	} {
		if got := result(t, k, c.code); got != c.want {
			t.Errorf("%q = %q, want %q", c.code, got, c.want)
		}
	}
	e := tt.Exec(t, k, "const message: string = \"Hello World!\"; console.log(message)", false)
	if got := e.Stream("stdout"); got != "Hello World!\n" {
		t.Errorf("stdout = %q:%s", got, e)
	}
}

// Errors point at the cell's own lines and columns, although the code that
// ran is esbuild's (types gone, lines reflowed).
func TestTypeScriptErrorLines(t *testing.T) {
	t.Parallel()
	testkit.NeedCommand(t, "node", "nodejs")
	k := startKernel(t, "typescript", t.TempDir())
	// A runtime error: f's throw is on line 6 of the cell, column 9.
	code := "interface Box {\n  value: number\n}\n\nfunction f(b: Box): number {\n  throw new RangeError('at six: ' + b.value)\n}\nf({ value: 1 })"
	name, tb := failure(t, k, code)
	if name != "RangeError" || !strings.Contains(tb, "Cell In[1]:6:9") || !strings.Contains(tb, "Cell In[1]:8:1") {
		t.Errorf("runtime error: %s\n%s\nwant frames at Cell In[1]:6:9 and 8:1", name, tb)
	}
	// The same in an awaiting cell, which runs wrapped.
	name, tb = failure(t, k, "type N = number\n\nconst n: N = 2\nawait Promise.resolve(n)\nundefinedThing")
	if name != "ReferenceError" || !strings.Contains(tb, "Cell In[2]:5:1") {
		t.Errorf("awaiting cell: %s\n%s\nwant Cell In[2]:5:1", name, tb)
	}
	// A syntax error esbuild finds: its line and a caret under the place.
	name, tb = failure(t, k, "const a: number = 1\n\nconst b: number = (a +\n")
	if name != "SyntaxError" || !strings.HasPrefix(tb, "Cell In[3]:4\n") || !strings.Contains(tb, "SyntaxError: ") {
		t.Errorf("compile error: %s\n%s\nwant Cell In[3]:4 first", name, tb)
	}
	// A syntax error node finds (esbuild allows a top-level return), on line 3.
	name, tb = failure(t, k, "const a: number = 1\n\n  return  a")
	if name != "SyntaxError" || !strings.HasPrefix(tb, "Cell In[4]:3\n  return  a\n  ^") {
		t.Errorf("node's syntax error: %s\n%s\nwant Cell In[4]:3, the cell's line and a caret under return", name, tb)
	}
	// Errors at the same lines in javascript cells with imports, which go
	// through esbuild too.
	k = startKernel(t, "javascript", t.TempDir())
	name, tb = failure(t, k, "import { join } from 'node:path'\n\n\nfunction g() {\n     throw new Error(join('a', 'b'))\n}\ng()")
	if name != "Error" || !strings.Contains(tb, "a/b") || !strings.Contains(tb, "Cell In[1]:5:12") {
		t.Errorf("javascript with imports: %s\n%s\nwant Cell In[1]:5:12", name, tb)
	}
}

// Static imports of built-ins and of packages in the cwd, in javascript and
// typescript cells: default, named and namespace; the names stay for later
// cells; export is harmless.
func TestESMImports(t *testing.T) {
	t.Parallel()
	testkit.NeedCommand(t, "node", "nodejs")
	cwd := t.TempDir()
	writePackage(t, cwd, "kh-esm", `{"name":"kh-esm","type":"module","exports":"./index.js"}`,
		"export default function greet(who) { return 'hi ' + who }\nexport const answer = 42\n")
	writePackage(t, cwd, "kh-cjs", `{"name":"kh-cjs","main":"index.js"}`,
		"exports.isOdd = (n) => n % 2 === 1\n")
	for _, lang := range []string{"javascript", "typescript"} {
		t.Run(lang, func(t *testing.T) {
			k := startKernel(t, lang, cwd)
			e := tt.Exec(t, k, "\n    import { readFileSync } from 'fs'\n    console.log(typeof readFileSync)\n    ", false)
			if got := e.Stream("stdout"); got != "function\n" {
				t.Fatalf("the SDK's esm import: stdout %q:%s", got, e)
			}
			for _, c := range []struct{ code, want string }{
				{"import path, { sep as separator } from 'node:path'\nimport * as os from 'os'\nimport greet, { answer } from 'kh-esm'\nimport { isOdd } from 'kh-cjs'\nimport 'node:util'", ""},
				{"[typeof readFileSync, path.join('a', 'b'), separator, typeof os.platform, greet('kh'), answer, isOdd(3)].join(' ')",
					"'function a/b / function hi kh 42 true'"},
				{"export const kh_exported = 7\nexport function kh_fn() { return kh_exported + 1 }\nexport { kh_fn as renamed }\nexport default kh_fn()", "8"},
				{"kh_fn() + kh_exported", "15"},
				// A template literal whose line starts with import is not an import.
				{"const kh_tpl = `x\nimport nothing from 'kh-missing'\n`\nimport { basename } from 'path'\nbasename('/a/b') + kh_tpl.length", "'b35'"},
				{"(await import('kh-esm')).answer", "42"},
			} {
				if got := result(t, k, c.code); got != c.want {
					t.Errorf("%q = %q, want %q", c.code, got, c.want)
				}
			}
			name, tb := failure(t, k, "import nothing from 'kh-missing'")
			if name != "Error" || !strings.Contains(tb, "kh-missing") {
				t.Errorf("missing package: %s %s", name, tb)
			}
		})
	}
}

// writePackage lays out an npm package in cwd/node_modules, as npm install does.
func writePackage(t *testing.T, cwd, name, packageJSON, index string) {
	t.Helper()
	dir := filepath.Join(cwd, "node_modules", name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for file, text := range map[string]string{"package.json": packageJSON, "index.js": index} {
		if err := os.WriteFile(filepath.Join(dir, file), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
