// Package jscompile prepares a javascript or typescript cell in the host,
// before driver.js runs it: typescript's types are removed by esbuild (a real
// compiler, in-process, so node is all a context needs), and ES module
// syntax, which a REPL's scripts cannot contain, is rewritten:
//
//   - Each static import becomes a line of the cell's imports, JS that
//     driver.js runs (awaited) before the cell, through import() in the
//     context: the module is loaded as node loads it (built-ins, packages
//     installed with npm, resolved from the current directory) and the
//     imported names are bound as globals, so later cells see them too.
//   - `export` is dropped: the declaration stays, a default export becomes
//     an expression, `export { ... }` and `export ... from` go.
//
// esbuild parses the cell; what is rewritten is esbuild's own printed
// output, in which every top-level statement starts a line. A line that
// starts with import or export is such a statement only if the source map
// says so (see moduleStatementLines). The source map goes to driver.js,
// which maps the line and column of errors back to the cell as written;
// rewritten statements keep their lines, so the map stays exact.
//
// A javascript cell goes through esbuild only if it contains module syntax
// (an import or export statement, as scanJS finds it): any other cell (the
// words absent, or only in import(), a comment or a string) runs exactly as
// written, at no cost. Before esbuild sees a cell, scanJS bounds how deeply
// it nests (maxJSNesting): esbuild's parser recurses per level on the
// plugin's stack.
package jscompile

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/evanw/esbuild/pkg/api"
)

// Cell is a cell ready for driver.js.
type Cell struct {
	Code      string        // what runs
	Imports   string        // run first, awaited: binds the cell's imports as globals
	SourceMap string        // maps Code back to the cell as written; "" when Code is the cell
	Err       *CompileError // the cell does not compile; nothing runs
}

// CompileError is a compile error at a place in the cell as written.
type CompileError struct {
	Name     string `json:"name"`
	Message  string `json:"message"`
	Line     int    `json:"line"`   // 1-based; 0 when unknown
	Column   int    `json:"column"` // 0-based, in bytes
	LineText string `json:"line_text,omitempty"`
}

// esbuildOptions are the transform's options. verbatimModuleSyntax keeps an
// import whose names the cell itself does not use: a later cell may use
// them (typescript would otherwise drop it as type-only).
func esbuildOptions(loader api.Loader) api.TransformOptions {
	return api.TransformOptions{
		Loader:      loader,
		Target:      api.ESNext,
		Charset:     api.CharsetUTF8,
		Sourcemap:   api.SourceMapExternal,
		Sourcefile:  "cell",
		TsconfigRaw: `{"compilerOptions":{"verbatimModuleSyntax":true}}`,
	}
}

// TypeScript compiles a typescript cell to javascript.
func TypeScript(code string) Cell {
	if scan := scanJS(code); scan.tooDeep != nil {
		return Cell{Err: scan.tooDeep}
	}
	r := api.Transform(code, esbuildOptions(api.LoaderTS))
	if len(r.Errors) > 0 {
		return Cell{Err: esbuildError(r.Errors[0])}
	}
	return rewriteModuleSyntax(r.Code, r.Map, code)
}

// JavaScript rewrites a javascript cell's module syntax, if any.
// A cell esbuild cannot parse runs as written: node reports its error, as
// it did before cells went through esbuild.
func JavaScript(code string) Cell {
	scan := scanJS(code)
	if !scan.moduleSyntax {
		return Cell{Code: code}
	}
	if scan.tooDeep != nil {
		return Cell{Err: scan.tooDeep}
	}
	r := api.Transform(code, esbuildOptions(api.LoaderJS))
	if len(r.Errors) > 0 {
		return Cell{Code: code}
	}
	c := rewriteModuleSyntax(r.Code, r.Map, code)
	if c.Err == nil && c.Imports == "" && c.Code == string(r.Code) {
		return Cell{Code: code} // no module syntax after all
	}
	return c
}

func esbuildError(m api.Message) *CompileError {
	e := &CompileError{Name: "SyntaxError", Message: m.Text}
	if l := m.Location; l != nil {
		e.Line, e.Column, e.LineText = l.Line, l.Column, l.LineText
	}
	return e
}

// rewriteModuleSyntax rewrites the import and export statements of out,
// esbuild's output for src, whose source map is sourceMap.
func rewriteModuleSyntax(out, sourceMap []byte, src string) Cell {
	lines, err := moduleStatementLines(out, sourceMap, src)
	if err != nil {
		// esbuild wrote a map it cannot read back: a bug, not the user's.
		return Cell{Err: &CompileError{Name: "Error", Message: "kernelhost: " + err.Error()}}
	}
	code := []byte(string(out)) // a copy: statements are blanked in place
	var imports []string
	for _, off := range lines {
		imp, err := rewriteStatement(code, off)
		if err != nil {
			line := strings.Count(string(out[:off]), "\n")
			return Cell{Err: &CompileError{Name: "SyntaxError", Message: err.Error(), Line: originalLine(sourceMap, line)}}
		}
		if imp != "" {
			imports = append(imports, imp)
		}
	}
	return Cell{Code: string(code), Imports: strings.Join(imports, "\n"), SourceMap: string(sourceMap)}
}

// moduleStatementLines returns the offsets in out of the lines that start
// an import or export statement. esbuild prints each top-level statement
// from the start of a line, but a line of a multi-line template literal
// may start with the same words; the source map tells them apart: a
// statement's first column maps to the keyword in src, a template's line
// to the template.
func moduleStatementLines(out, sourceMap []byte, src string) ([]int, error) {
	type candidate struct{ off, line int }
	var found []candidate
	for off, line := 0, 0; off < len(out); line++ {
		if moduleKeyword(out[off:]) != "" {
			found = append(found, candidate{off, line})
		}
		nl := strings.IndexByte(string(out[off:]), '\n')
		if nl < 0 {
			break
		}
		off += nl + 1
	}
	if len(found) == 0 {
		return nil, nil
	}
	origins, err := lineOrigins(sourceMap)
	if err != nil {
		return nil, err
	}
	var offs []int
	for _, c := range found {
		if o, ok := origins[c.line]; ok && isStatementAt(src, o, moduleKeyword(out[c.off:])) {
			offs = append(offs, c.off)
		}
	}
	return offs, nil
}

// moduleKeyword returns "import" or "export" if b starts with that
// statement (not import() or import.meta), else "".
func moduleKeyword(b []byte) string {
	for _, kw := range []string{"import", "export"} {
		if !bytes.HasPrefix(b, []byte(kw)) || (len(b) > len(kw) && isIdentByte(b[len(kw)])) {
			continue
		}
		rest := bytes.TrimLeft(b[len(kw):], " \t\r\n")
		if kw == "import" && (len(rest) == 0 || rest[0] == '(' || rest[0] == '.') {
			return ""
		}
		return kw
	}
	return ""
}

func isIdentByte(c byte) bool {
	return c == '_' || c == '$' || c >= 0x80 || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')
}

// isStatementAt reports whether the place pos of src is a kw statement:
// the keyword itself, or (where esbuild maps an exported declaration) what
// follows it.
func isStatementAt(src string, pos [2]int, kw string) bool {
	at := srcOffset(src, pos)
	if at < 0 {
		return false
	}
	if moduleKeyword([]byte(src[at:])) == kw {
		return true
	}
	before := strings.TrimRight(src[:at], " \t\r\n")
	return kw == "export" && strings.HasSuffix(before, kw) &&
		(len(before) == len(kw) || !isIdentByte(before[len(before)-len(kw)-1]))
}

// srcOffset returns the offset in src of a position of a source map: a
// 0-based line and a column in UTF-16 code units; -1 if there is none.
func srcOffset(src string, pos [2]int) int {
	off := 0
	for i := 0; i < pos[0]; i++ {
		nl := strings.IndexByte(src[off:], '\n')
		if nl < 0 {
			return -1
		}
		off += nl + 1
	}
	for units := 0; units < pos[1]; {
		if off >= len(src) || src[off] == '\n' {
			return -1
		}
		r, size := utf8.DecodeRuneInString(src[off:])
		units += utf16.RuneLen(r)
		off += size
	}
	return off
}

// originalLine returns the 1-based line of src that generated line line
// (0-based) comes from, or 0.
func originalLine(sourceMap []byte, line int) int {
	origins, err := lineOrigins(sourceMap)
	if o, ok := origins[line]; err == nil && ok {
		return o[0] + 1
	}
	return 0
}

// lineOrigins decodes a source map's mappings: for each generated line
// with a segment at column 0, the original line and column (0-based) it
// maps to.
func lineOrigins(sourceMap []byte) (map[int][2]int, error) {
	var m struct {
		Mappings string `json:"mappings"`
	}
	if err := json.Unmarshal(sourceMap, &m); err != nil {
		return nil, fmt.Errorf("source map: %w", err)
	}
	origins := map[int][2]int{}
	var fields [5]int // running values: generated column, source, original line, original column, name
	for line, group := range strings.Split(m.Mappings, ";") {
		fields[0] = 0 // the generated column restarts on each line
		for _, seg := range strings.Split(group, ",") {
			if seg == "" {
				continue
			}
			vals, err := decodeVLQ(seg)
			if err != nil {
				return nil, err
			}
			for i, v := range vals {
				fields[i] += v
			}
			if fields[0] == 0 && len(vals) >= 4 {
				origins[line] = [2]int{fields[2], fields[3]}
			}
		}
	}
	return origins, nil
}

const base64Digits = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"

// decodeVLQ decodes one segment of a source map's mappings: base64 digits
// of 5 bits each, least significant first, bit 6 meaning "more", the
// lowest bit of a value its sign.
func decodeVLQ(seg string) ([]int, error) {
	var vals []int
	value, shift := 0, 0
	for i := 0; i < len(seg); i++ {
		d := strings.IndexByte(base64Digits, seg[i])
		if d < 0 {
			return nil, fmt.Errorf("source map: bad mapping %q", seg)
		}
		value += (d & 31) << shift
		if d&32 != 0 {
			shift += 5
			continue
		}
		if value&1 != 0 {
			vals = append(vals, -(value >> 1))
		} else {
			vals = append(vals, value>>1)
		}
		value, shift = 0, 0
	}
	if shift != 0 {
		return nil, fmt.Errorf("source map: truncated mapping %q", seg)
	}
	return vals, nil
}
