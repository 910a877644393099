package jscompile

import (
	"strings"
	"testing"
)

// Module syntax is an import or export statement, not the word in a
// comment, a string, a template, a regular expression or a property name.
func TestScanJSModuleSyntax(t *testing.T) {
	for code, want := range map[string]bool{
		"import fs from 'node:fs'":                    true,
		"const a = 1\nexport const b = a":             true,
		"export default 3":                            true,
		"import {x} from './x.js'; x()":               true,
		"// export this later\n1 + 1":                 false,
		"/* import x from 'y' */ 2":                   false,
		"'export' + \"import a from 'b'\"":            false,
		"`export ${1 + 1} import x from 'y'`":         false,
		"const m = await import('node:fs')":           false,
		"import.meta.url":                             false,
		"obj.export = 1; obj.import(2)":               false,
		"/export|import x/.test(s)":                   false,
		"const t = `a${`b${'export'}`}c`; export {t}": true,
	} {
		if got := scanJS(code).moduleSyntax; got != want {
			t.Errorf("moduleSyntax(%q) = %v, want %v", code, got, want)
		}
	}
}

// Deep nesting of any kind the parser recurses on is found; ordinary code
// of any length is not too deep.
func TestScanJSNesting(t *testing.T) {
	deep := maxJSNesting + 1
	for name, code := range map[string]string{
		"brackets":       strings.Repeat("[", deep) + strings.Repeat("]", deep),
		"parens":         strings.Repeat("(", deep) + "1" + strings.Repeat(")", deep),
		"braces":         strings.Repeat("{", deep) + strings.Repeat("}", deep),
		"templates":      strings.Repeat("`${", deep) + strings.Repeat("}`", deep),
		"prefix":         strings.Repeat("!", deep) + "x",
		"assignments":    strings.Repeat("a = ", deep) + "1",
		"conditions":     strings.Repeat("a ? b : ", deep) + "c",
		"arrows":         strings.Repeat("x => ", deep) + "x",
		"else if":        "if (a) {}" + strings.Repeat(" else if (a) {}", deep),
		"else if lines":  "if (a) {}" + strings.Repeat("\nelse if (a) {}", deep),
		"if lines":       strings.Repeat("if (a)\n", deep) + "x",
		"generics":       "let x: " + strings.Repeat("A<", deep) + "B" + strings.Repeat(">", deep),
		"after comments": "/* ( */ // [\n" + strings.Repeat("(", deep) + strings.Repeat(")", deep),
	} {
		if scanJS(code).tooDeep == nil {
			t.Errorf("%s: %d levels not found too deep", name, deep)
		}
	}
	long := strings.Repeat("const a = [1, -2, !x, y ? 3 : 4, (z) => z + 1]\nlet b = a.map(v => v * 2); if (b) { f(b) } else { g() }\n", 5000)
	for name, code := range map[string]string{
		"ordinary lines":     long,
		"brackets in text":   strings.Repeat("'((((' + \"[[[[\" + `{{{{` // ((((\n", 5000),
		"closed brackets":    strings.Repeat("((((((((((1))))))))))", 5000),
		"statements no semi": strings.Repeat("x = 1\ny = !x\nz = -y\n", 5000),
	} {
		if e := scanJS(code).tooDeep; e != nil {
			t.Errorf("%s: too deep at line %d: %s", name, e.Line, e.Message)
		}
	}
}

// A 2 MB nesting bomb's error names the limit and its place.
func TestScanJSNestingError(t *testing.T) {
	bomb := "let a = 1;\n" + strings.Repeat("[", 1000000) + strings.Repeat("]", 1000000)
	e := scanJS(bomb).tooDeep
	if e == nil || !strings.Contains(e.Message, "1000 levels") || e.Name != "SyntaxError" || e.Line != 2 || e.Column != maxJSNesting {
		t.Fatalf("error %+v, want a SyntaxError naming the limit at line 2", e)
	}
}
