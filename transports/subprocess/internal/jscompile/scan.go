package jscompile

import (
	"fmt"
	"strings"
)

// maxJSNesting is how deeply a cell that goes through esbuild may nest.
// esbuild's parser recurses once per level (a bracket, a prefix operator,
// an assignment, an else-if...) on the plugin's own stack: a deep enough
// cell is a fatal stack overflow of the plugin, which every context of the
// transport shares, and far below that the stack costs the plugin hundreds
// of MiB. Real code nests tens of levels; node's own parser gives up a
// little above this limit.
const maxJSNesting = 1000

// jsScan is what one linear pass over a cell finds before esbuild sees it.
type jsScan struct {
	moduleSyntax bool          // an import or export statement, outside comments and strings
	tooDeep      *CompileError // the place where the nesting passed maxJSNesting; nil if it did not
}

// nestingError is the error of a cell that nests deeper than maxJSNesting.
func nestingError(src string, at int) *CompileError {
	line := strings.Count(src[:at], "\n")
	start := strings.LastIndexByte(src[:at], '\n') + 1
	end := strings.IndexByte(src[at:], '\n')
	if end < 0 {
		end = len(src) - at
	}
	text := src[start : at+end]
	if len(text) > 200 {
		text = "" // a line of a nesting bomb is no use to show
	}
	return &CompileError{
		Name:     "SyntaxError",
		Message:  fmt.Sprintf("the cell nests more than %d levels deep (brackets, prefix operators, assignments, conditions), kernelhost's limit for cells it compiles", maxJSNesting),
		Line:     line + 1,
		Column:   at - start,
		LineText: text,
	}
}

// scanJS reads src's tokens once, as well as a tokenizer without a parser
// can: comments, strings, template literals (with their ${} parts) and
// regular expression literals are skipped, so a keyword or bracket in them
// counts for nothing. It counts an estimate of the parser's recursion
// depth: open brackets, plus per bracket the right-recursive operators
// (prefix operators, assignments, ?, =>, <, if/else...) of the expression
// or statement in progress, reset at ; and , and at a newline that ends a
// statement. The estimate errs high rather than low: a false "too deep"
// costs a cell of absurd shape an error, a false "fine" the plugin.
// It stops at the first place that is too deep: the rest cannot matter.
func scanJS(src string) jsScan {
	s := jsScanner{src: src, levels: []nestLevel{{}}}
	for s.scan.tooDeep == nil && s.skipBlank() {
		s.token()
	}
	return s.scan
}

// nestLevel is one open bracket (or the whole cell, at the bottom).
type nestLevel struct {
	open  byte // ( [ { or $ for a template's ${
	chain int  // right-recursive operators since the level's last ; or ,
	head  bool // the ( of if, while, for or with: what follows is a statement
}

// jsScanner is scanJS's state between two tokens.
type jsScanner struct {
	src      string
	pos      int // where the next token or blank starts; may pass len(src) after an unterminated literal
	scan     jsScan
	levels   []nestLevel // open brackets; levels[0] is the cell itself and is never closed
	depth    int         // len(levels)-1 plus every level's chain
	operand  bool        // the last token ends an operand: / divides, a newline may end a statement
	newline  bool        // a newline since the last token
	lastWord string      // the last token if it was a word: tells if( from f(
	afterDot bool        // the last token is . or ?.: a word now is a property name
}

func (s *jsScanner) top() *nestLevel { return &s.levels[len(s.levels)-1] }

// deeper counts one more level of the parser's recursion, which the
// token ending at (or starting at) at opens; past maxJSNesting it records
// the place, which ends the scan.
func (s *jsScanner) deeper(at int) {
	s.depth++
	if s.depth > maxJSNesting && s.scan.tooDeep == nil {
		s.scan.tooDeep = nestingError(s.src, at)
	}
}

// chain counts a right-recursive operator of the current level.
func (s *jsScanner) chain(at int) {
	s.top().chain++
	s.deeper(at)
}

// endChain ends the current level's expression or statement (at ; , or a
// statement's end), and with it the recursion of its operators.
func (s *jsScanner) endChain() {
	s.depth -= s.top().chain
	s.top().chain = 0
}

// skipBlank skips spaces and comments, noting a newline among them. It
// reports whether a token follows.
func (s *jsScanner) skipBlank() bool {
	for s.pos < len(s.src) {
		rest := s.src[s.pos:]
		switch c := rest[0]; {
		case c == '\n':
			s.newline = true
			s.pos++
		case c == ' ' || c == '\t' || c == '\r':
			s.pos++
		case strings.HasPrefix(rest, "//"):
			// The newline that ends the comment is left for the next round: it
			// may end a statement.
			if end := strings.IndexByte(rest, '\n'); end >= 0 {
				s.pos += end
			} else {
				s.pos = len(s.src)
			}
		case strings.HasPrefix(rest, "/*"):
			end := strings.Index(rest[2:], "*/")
			if end < 0 {
				end = len(rest) - 2
			}
			s.newline = s.newline || strings.Contains(rest[2:2+end], "\n")
			s.pos += 2 + end + 2
		default:
			return true
		}
	}
	return false
}

// token reads the token at s.pos.
func (s *jsScanner) token() {
	c := s.src[s.pos]
	// A newline after a complete operand, before a word or literal, is a
	// statement's end (automatic semicolon).
	startsOperand := isIdentByte(c) || c == '#' || c == '"' || c == '\'' || c == '`'
	if s.newline && s.operand && startsOperand && !continuesExpression(s.src[s.pos:]) {
		s.endChain()
	}
	s.newline = false
	wasDot := s.afterDot
	s.afterDot = false
	word := ""
	switch {
	case isIdentByte(c) || c == '#' || c == '\\':
		word = s.wordOrNumber(wasDot)
	case c == '"' || c == '\'':
		s.quoted(c)
	case c == '`':
		s.pos++
		s.templateText()
	case c == '/' && !s.operand: // after an operand, / divides
		s.regexp()
	case c == '(' || c == '[' || c == '{':
		s.open(c)
	case c == ')' || c == ']' || c == '}':
		s.close(c)
	case c == ';' || c == ',':
		s.endChain()
		s.operand = false
		s.pos++
	case c == '.':
		s.dot()
	default:
		s.operator()
	}
	s.lastWord = word
}

// wordOrNumber reads an identifier, keyword, private name or number, and
// returns the word ("" for a number). A word after . is a property name,
// whatever it spells.
func (s *jsScanner) wordOrNumber(afterDot bool) string {
	start := s.pos
	end := start + 1
	for end < len(s.src) && (isIdentByte(s.src[end]) || s.src[end] == '\\') {
		end++
	}
	if c := s.src[start]; c >= '0' && c <= '9' { // a number: 1.5e+3 reads on over . and the sign
		for end < len(s.src) && (isIdentByte(s.src[end]) || s.src[end] == '.' ||
			((s.src[end] == '+' || s.src[end] == '-') && (s.src[end-1] == 'e' || s.src[end-1] == 'E'))) {
			end++
		}
		s.operand = true
		s.pos = end
		return ""
	}
	word := s.src[start:end]
	s.pos = end
	if afterDot {
		s.operand = true
	} else {
		s.keyword(word)
	}
	return word
}

// keyword notes module syntax and the keywords after which the parser
// recurses; any other word is an operand.
func (s *jsScanner) keyword(word string) {
	switch word {
	case "import":
		// import( and import.meta are expressions, not module syntax.
		rest := strings.TrimLeft(s.src[s.pos:], " \t\r\n")
		if rest == "" || (rest[0] != '(' && rest[0] != '.') {
			s.scan.moduleSyntax = true
		}
		s.operand = false
	case "export":
		s.scan.moduleSyntax = true
		s.operand = false
	case "typeof", "void", "delete", "await", "new", "yield", "else", "if", "while", "for", "with", "do", "return", "throw", "case", "in", "of", "instanceof", "extends", "keyof", "readonly", "infer":
		s.operand = false
		s.chain(s.pos)
	default:
		s.operand = true
	}
}

// quoted skips a string in single or double quotes; an unterminated one
// ends at the line's end.
func (s *jsScanner) quoted(quote byte) {
	end := s.pos + 1
	for end < len(s.src) && s.src[end] != quote && s.src[end] != '\n' {
		if s.src[end] == '\\' {
			end++
		}
		end++
	}
	s.pos = min(end+1, len(s.src))
	s.operand = true
}

// templateText skips a template literal's text from s.pos to its end (after
// the backquote: an operand) or to a ${, which opens a level that its } closes.
func (s *jsScanner) templateText() {
	for ; s.pos < len(s.src); s.pos++ {
		switch s.src[s.pos] {
		case '\\':
			s.pos++
		case '`':
			s.operand = true
			s.pos++
			return
		case '$':
			if s.pos+1 < len(s.src) && s.src[s.pos+1] == '{' {
				s.levels = append(s.levels, nestLevel{open: '$'})
				s.operand = false
				s.deeper(s.pos)
				s.pos += 2
				return
			}
		}
	}
}

// regexp skips a regular expression literal and its flags; a / inside a
// [class] does not end it.
func (s *jsScanner) regexp() {
	end, inClass := s.pos+1, false
	for ; end < len(s.src) && s.src[end] != '\n'; end++ {
		if s.src[end] == '\\' {
			end++
		} else if s.src[end] == '[' {
			inClass = true
		} else if s.src[end] == ']' {
			inClass = false
		} else if s.src[end] == '/' && !inClass {
			break
		}
	}
	for end++; end < len(s.src) && isIdentByte(s.src[end]); end++ {
	}
	s.pos = min(end, len(s.src))
	s.operand = true
}

// open reads an opening bracket: a level of its own.
func (s *jsScanner) open(c byte) {
	head := c == '(' && (s.lastWord == "if" || s.lastWord == "while" || s.lastWord == "for" || s.lastWord == "with")
	s.levels = append(s.levels, nestLevel{open: c, head: head})
	s.operand = false
	s.deeper(s.pos)
	s.pos++
}

// close reads a closing bracket: its level and that level's chain end. The
// } of a template's ${ goes back to the template's text.
func (s *jsScanner) close(c byte) {
	s.pos++
	if len(s.levels) == 1 {
		s.operand = true // unbalanced: esbuild says so
		return
	}
	l := s.levels[len(s.levels)-1]
	s.depth -= 1 + l.chain
	s.levels = s.levels[:len(s.levels)-1]
	s.operand = !l.head // after if (...) a statement starts, not an operator
	if l.open == '$' && c == '}' {
		s.templateText()
	}
}

// dot reads a spread (a prefix operator), a number like .5, or the . of a
// property access.
func (s *jsScanner) dot() {
	switch {
	case strings.HasPrefix(s.src[s.pos:], "..."):
		s.pos += 3
		s.operand = false
		s.chain(s.pos)
	case s.pos+1 < len(s.src) && s.src[s.pos+1] >= '0' && s.src[s.pos+1] <= '9':
		for s.pos++; s.pos < len(s.src) && (isIdentByte(s.src[s.pos]) || s.src[s.pos] == '.'); s.pos++ {
		}
		s.operand = true
	default:
		s.pos++
		s.afterDot, s.operand = true, false
	}
}

// operator reads an operator, counting those the parser recurses on.
func (s *jsScanner) operator() {
	op := operatorAt(s.src[s.pos:])
	s.pos += len(op)
	switch {
	case op == "?." && !(s.pos < len(s.src) && s.src[s.pos] >= '0' && s.src[s.pos] <= '9'):
		// Optional chaining (a?.b), not a ? followed by .5.
		s.afterDot, s.operand = true, false
	case op == "++" || op == "--":
		if !s.operand {
			s.chain(s.pos)
		} // else postfix: the operand stays complete
	case rightRecursive(op, s.operand):
		s.operand = false
		s.chain(s.pos)
	default:
		s.operand = false
	}
}

// continuesExpression reports whether a word at the start of a line goes on
// with the expression before it rather than starting a statement.
func continuesExpression(s string) bool {
	for _, w := range []string{"else", "instanceof", "in", "of", "as", "satisfies", "extends", "implements"} {
		if strings.HasPrefix(s, w) && (len(s) == len(w) || !isIdentByte(s[len(w)])) {
			return true
		}
	}
	return false
}

// operatorAt returns the operator that s starts with (at least one byte).
func operatorAt(s string) string {
	for _, op := range []string{">>>=", "...", "===", "!==", "**=", "<<=", ">>=", ">>>", "&&=", "||=", "??=",
		"=>", "==", "!=", "<=", ">=", "&&", "||", "??", "?.", "**", "++", "--", "<<", ">>",
		"+=", "-=", "*=", "/=", "%=", "&=", "|=", "^="} {
		if strings.HasPrefix(s, op) {
			return op
		}
	}
	return s[:1]
}

// rightRecursive reports whether esbuild's parser recurses into what
// follows op: assignments, =>, ?, **, <, and prefix operators.
func rightRecursive(op string, afterOperand bool) bool {
	switch op {
	case "=>", "?", "**", "<", "**=", "<<=", ">>=", ">>>=", "&&=", "||=", "??=", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "=":
		return true
	case "!", "~", "+", "-", "@":
		return !afterOperand || op == "!" || op == "~" || op == "@"
	}
	return false
}
