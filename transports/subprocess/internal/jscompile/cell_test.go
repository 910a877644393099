package jscompile

import (
	"strings"
	"testing"
)

// The rewrite of each import and export form, and cells left as written.
func TestRewriteModuleSyntax(t *testing.T) {
	for _, c := range []struct {
		code          string
		imports       string // the binding code, "" for none
		contains      string // in the code that runs
		unchanged     bool   // the cell runs exactly as written
		typescript    bool
		compileErrors bool
		errLine       int // the compile error's line, if not 0
	}{
		{code: "1+1", unchanged: true},
		{code: "await import('fs')", unchanged: true},
		{code: "const s = 'import x from \"y\"; export default 1'", unchanged: true},
		{code: "import { a } from", unchanged: true}, // node reports it, as before
		{code: "import d from 'm'", imports: `({ default: globalThis.d } = await import("m"));`},
		{code: "import * as ns from 'm'", imports: `globalThis.ns = await import("m");`},
		{code: "import d, * as ns from 'm'", imports: `({ default: globalThis.d } = globalThis.ns = await import("m"));`},
		{code: "import {\n  a,\n  b as c,\n  'x-y' as z,\n} from 'm'\nc", imports: `({ a: globalThis.a, b: globalThis.c, "x-y": globalThis.z } = await import("m"));`, contains: "  \nc;"},
		{code: "import 'm'", imports: `await import("m");`},
		{code: "import data from './d.json' with { type: 'json' }", imports: `({ default: globalThis.data } = await import("./d.json", { with: { type: "json" } }));`},
		{code: "export const x = 1", contains: "       const x = 1;"},
		{code: "export default function f() {}", contains: "               function f() {"},
		{code: "export default () => 1", contains: "0,             () => 1;"},
		{code: "export default class extends Array {}", contains: "0,             class extends Array {"},
		{code: "const x = 1\nexport { x as y }\nexport * from 'm'", contains: "const x = 1;\n                  \n                  \n"},
		{code: "import type { T } from 'm'\nimport { type U, v } from 'm'\nexport type W = T", typescript: true, imports: `({ v: globalThis.v } = await import("m"));`},
		{code: "let x: number = (", typescript: true, compileErrors: true},
		// Forms esbuild parses that the rewrite does not know: an error at
		// the cell's line, not a wrong binding.
		{code: "1\nimport defer * as ns from 'm'", compileErrors: true, errLine: 2},
		{code: "import source x from 'm'", compileErrors: true, errLine: 1},
	} {
		prepare := JavaScript
		if c.typescript {
			prepare = TypeScript
		}
		got := prepare(c.code)
		switch {
		case (got.Err != nil) != c.compileErrors:
			t.Errorf("%q: compile error %+v", c.code, got.Err)
		case c.compileErrors:
			if c.errLine != 0 && got.Err.Line != c.errLine {
				t.Errorf("%q: error at line %d, want %d: %+v", c.code, got.Err.Line, c.errLine, got.Err)
			}
		case c.unchanged && (got.Code != c.code || got.Imports != "" || got.SourceMap != ""):
			t.Errorf("%q: changed to %q (imports %q)", c.code, got.Code, got.Imports)
		case got.Imports != c.imports:
			t.Errorf("%q: imports\n%s\nwant\n%s", c.code, got.Imports, c.imports)
		case !strings.Contains(got.Code, c.contains):
			t.Errorf("%q: code\n%q\nwant it to contain %q", c.code, got.Code, c.contains)
		case !c.unchanged && !c.typescript && strings.Count(got.Code, "\n") < strings.Count(c.code, "\n"):
			t.Errorf("%q: lost lines: %q", c.code, got.Code)
		case !c.unchanged && (strings.Contains(got.Code, "import ") || strings.Contains(got.Code, "export ")):
			t.Errorf("%q: module syntax left: %q", c.code, got.Code)
		}
	}
}
