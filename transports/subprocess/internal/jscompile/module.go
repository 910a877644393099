package jscompile

import (
	"errors"
	"fmt"
	"strings"
)

// This file rewrites one import or export statement as esbuild printed it
// (see cell.go). esbuild prints these few forms in one way, which a
// small tokenizer reads: names, quoted strings, and { } , * ; :.

// token is one token of a printed statement.
type token struct {
	kind       byte   // 'n' a name (identifier or keyword), 's' a string, else the punctuation itself
	text       string // as printed
	start, end int    // offsets in the code
}

// stmtScanner tokenizes code from an offset.
type stmtScanner struct {
	code []byte
	pos  int
}

func (s *stmtScanner) next() (token, error) {
	for s.pos < len(s.code) && strings.IndexByte(" \t\r\n", s.code[s.pos]) >= 0 {
		s.pos++
	}
	start := s.pos
	if start >= len(s.code) {
		return token{}, errors.New("unexpected end of the statement")
	}
	switch c := s.code[start]; {
	case c == '"' || c == '\'':
		for s.pos++; s.pos < len(s.code) && s.code[s.pos] != c; s.pos++ {
			if s.code[s.pos] == '\\' {
				s.pos++
			} else if s.code[s.pos] == '\n' {
				break
			}
		}
		if s.pos >= len(s.code) || s.code[s.pos] != c {
			return token{}, errors.New("unterminated string")
		}
		s.pos++
		return s.token('s', start), nil
	case isIdentByte(c) || c == '\\':
		for s.pos < len(s.code) && (isIdentByte(s.code[s.pos]) || s.code[s.pos] == '\\') {
			s.pos++
		}
		return s.token('n', start), nil
	case strings.IndexByte("{},*;:", c) >= 0:
		s.pos++
		return s.token(c, start), nil
	default:
		return token{}, fmt.Errorf("unexpected %q", c)
	}
}

func (s *stmtScanner) token(kind byte, start int) token {
	return token{kind: kind, text: string(s.code[start:s.pos]), start: start, end: s.pos}
}

// expect reads a token of kind (and text, if not "").
func (s *stmtScanner) expect(kind byte, text string) (token, error) {
	t, err := s.next()
	if err == nil && (t.kind != kind || (text != "" && t.text != text)) {
		err = fmt.Errorf("unexpected %s", t.text)
	}
	return t, err
}

// peek returns the next token without consuming it.
func (s *stmtScanner) peek() token {
	pos := s.pos
	t, _ := s.next()
	s.pos = pos
	return t
}

// rewriteStatement rewrites the import or export statement at off in code,
// in place and keeping every line and column of the rest: an import is
// blanked and returned as the JS that binds its names; an export loses its
// export. An error means a form this does not know.
func rewriteStatement(code []byte, off int) (imports string, err error) {
	s := &stmtScanner{code: code, pos: off}
	kw, _ := s.next()
	if kw.text == "import" {
		imports, err = parseImport(s)
		if err != nil {
			return "", fmt.Errorf("import statement not supported here: %w", err)
		}
		blank(code, off, s.pos)
		return imports, nil
	}
	if err := rewriteExport(s, kw); err != nil {
		return "", fmt.Errorf("export statement not supported here: %w", err)
	}
	return "", nil
}

// parseImport reads the rest of an import statement and returns JS that
// loads the module with import() and binds the imported names as globals:
//
//	import "m"                   await import("m");
//	import * as ns from "m"      globalThis.ns = await import("m");
//	import d, { a, b as c } ...  ({ default: globalThis.d, a: globalThis.a, b: globalThis.c } = await import("m"));
func parseImport(s *stmtScanner) (string, error) {
	var (
		namespace string
		bindings  []string // "key: globalThis.local"
	)
	t, err := s.next()
	if err != nil {
		return "", err
	}
	if t.kind != 's' {
		if t.kind == 'n' { // the default import, then `,` or from
			bindings = append(bindings, "default: globalThis."+t.text)
			if t, err = s.next(); err != nil {
				return "", err
			}
			switch {
			case t.kind == ',':
				if t, err = s.next(); err != nil {
					return "", err
				}
				if t.kind != '*' && t.kind != '{' {
					return "", fmt.Errorf("unexpected %s", t.text)
				}
			case t.kind != 'n' || t.text != "from":
				// e.g. import defer * as ns, import source x
				return "", fmt.Errorf("unexpected %s", t.text)
			}
		}
		switch {
		case t.kind == '*':
			if _, err := s.expect('n', "as"); err != nil {
				return "", err
			}
			ns, err := s.expect('n', "")
			if err != nil {
				return "", err
			}
			namespace = ns.text
			t, err = s.next()
		case t.kind == '{':
			if bindings, err = parseNamedImports(s, bindings); err != nil {
				return "", err
			}
			t, err = s.next()
		}
		if err != nil {
			return "", err
		}
		if t.kind != 'n' || t.text != "from" {
			return "", fmt.Errorf("unexpected %s", t.text)
		}
		if t, err = s.expect('s', ""); err != nil {
			return "", err
		}
	}
	load, err := importCall(s, t.text)
	if err != nil {
		return "", err
	}
	switch {
	case len(bindings) > 0 && namespace != "":
		return "({ " + strings.Join(bindings, ", ") + " } = globalThis." + namespace + " = " + load + ");", nil
	case len(bindings) > 0:
		return "({ " + strings.Join(bindings, ", ") + " } = " + load + ");", nil
	case namespace != "":
		return "globalThis." + namespace + " = " + load + ";", nil
	}
	return load + ";", nil
}

// parseNamedImports reads `a, b as c, "d" as e }` (the { is read).
func parseNamedImports(s *stmtScanner, bindings []string) ([]string, error) {
	for {
		t, err := s.next()
		if err != nil || t.kind == '}' {
			return bindings, err
		}
		if t.kind != 'n' && t.kind != 's' {
			return nil, fmt.Errorf("unexpected %s", t.text)
		}
		local := t.text
		if p := s.peek(); p.kind == 'n' && p.text == "as" {
			s.next()
			l, err := s.expect('n', "")
			if err != nil {
				return nil, err
			}
			local = l.text
		}
		bindings = append(bindings, t.text+": globalThis."+local)
		if t, err = s.next(); err != nil {
			return nil, err
		}
		if t.kind == '}' {
			return bindings, nil
		}
		if t.kind != ',' {
			return nil, fmt.Errorf("unexpected %s", t.text)
		}
	}
}

// importCall reads the end of a statement, `[with|assert { ... }] ;`, and
// returns the import() of spec (a string literal) with those attributes.
func importCall(s *stmtScanner, spec string) (string, error) {
	t, err := s.next()
	if err != nil {
		return "", err
	}
	attrs := ""
	if t.kind == 'n' && (t.text == "with" || t.text == "assert") {
		open, err := s.expect('{', "")
		if err != nil {
			return "", err
		}
		if err := skipBraces(s); err != nil {
			return "", err
		}
		attrs = ", { with: " + string(s.code[open.start:s.pos]) + " }"
		if t, err = s.next(); err != nil {
			return "", err
		}
	}
	if t.kind != ';' {
		return "", fmt.Errorf("unexpected %s", t.text)
	}
	return "await import(" + spec + attrs + ")", nil
}

// skipBraces reads up to the } that closes a { already read.
func skipBraces(s *stmtScanner) error {
	for depth := 1; depth > 0; {
		t, err := s.next()
		if err != nil {
			return err
		}
		switch t.kind {
		case '{':
			depth++
		case '}':
			depth--
		}
	}
	return nil
}

// rewriteExport removes the export of the statement whose export keyword
// kw was read:
//
//	export const x = 1 / export function f() {}     the declaration stays
//	export default function f() {} / class C {}    the declaration stays
//	export default <expression>                    0, <expression>
//	export { a, b as c } / export * from "m" / ... the statement goes
func rewriteExport(s *stmtScanner, kw token) error {
	t := s.peek()
	switch {
	case t.kind == '{' || t.kind == '*':
		for {
			t, err := s.next()
			if err != nil {
				return err
			}
			if t.kind == '{' {
				if err := skipBraces(s); err != nil {
					return err
				}
			}
			if t.kind == ';' {
				break
			}
		}
		blank(s.code, kw.start, s.pos)
	case t.kind == 'n' && t.text == "default":
		s.next()
		if namedDeclaration(s) {
			blank(s.code, kw.start, t.end)
		} else {
			blank(s.code, kw.start, t.end)
			copy(s.code[kw.start:], "0,")
		}
	default:
		blank(s.code, kw.start, kw.end)
	}
	return nil
}

// namedDeclaration reports whether a named function or class declaration
// follows (which stays a declaration once its `export default` goes).
func namedDeclaration(s *stmtScanner) bool {
	t, _ := s.next()
	if t.text == "async" {
		t, _ = s.next()
	}
	switch t.text {
	case "function":
		if s.peek().kind == '*' {
			s.next()
		}
		return s.peek().kind == 'n'
	case "class":
		name := s.peek()
		return name.kind == 'n' && name.text != "extends"
	}
	return false
}

// blank replaces code[from:to] with spaces, keeping its line breaks.
func blank(code []byte, from, to int) {
	for i := from; i < to; i++ {
		if code[i] != '\n' {
			code[i] = ' '
		}
	}
}
