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
func scanJS(src string) jsScan {
	type level struct {
		open  byte // ( [ { or $ for a template's ${
		chain int  // right-recursive operators since the level's last ; or ,
		head  bool // the ( of if, while, for or with: what follows is a statement
	}
	var (
		scan     jsScan
		levels   = []level{{}}
		depth    int  // len(levels)-1 plus every level's chain
		operand  bool // the last token ends an operand: / divides, a newline may end a statement
		newline  bool // a newline since the last token
		lastWord string
		afterDot bool // the last token is . or ?.: a word now is a property name
	)
	top := func() *level { return &levels[len(levels)-1] }
	deeper := func(at int) bool {
		depth++
		if depth > maxJSNesting && scan.tooDeep == nil {
			scan.tooDeep = nestingError(src, at)
		}
		return scan.tooDeep != nil
	}
	reset := func() {
		depth -= top().chain
		top().chain = 0
	}
	chain := func(at int) bool {
		top().chain++
		return deeper(at)
	}
	// template skips a template literal's text from i to its end (after the
	// backquote, operand) or to a ${ (a new level); it returns where to go on.
	template := func(i int) (int, bool) {
		for ; i < len(src); i++ {
			switch src[i] {
			case '\\':
				i++
			case '`':
				operand = true
				return i + 1, false
			case '$':
				if i+1 < len(src) && src[i+1] == '{' {
					levels = append(levels, level{open: '$'})
					operand = false
					return i + 2, deeper(i)
				}
			}
		}
		return i, false
	}
	for i := 0; i < len(src); {
		c := src[i]
		switch {
		case c == '\n':
			newline = true
			i++
			continue
		case c == ' ' || c == '\t' || c == '\r':
			i++
			continue
		case c == '/' && i+1 < len(src) && src[i+1] == '/':
			for i < len(src) && src[i] != '\n' {
				i++
			}
			continue
		case c == '/' && i+1 < len(src) && src[i+1] == '*':
			end := strings.Index(src[i+2:], "*/")
			if end < 0 {
				end = len(src) - i - 2
			}
			newline = newline || strings.Contains(src[i+2:i+2+end], "\n")
			i += 2 + end + 2
			continue
		}
		// A token starts at i. A newline after a complete operand, before a
		// word or literal, is a statement's end (automatic semicolon).
		startsOperand := isIdentByte(c) || c == '#' || c == '"' || c == '\'' || c == '`'
		if newline && operand && startsOperand && !continuesExpression(src[i:]) {
			reset()
		}
		newline = false
		wasDot := afterDot
		afterDot = false
		word := ""
		var stop bool
		switch {
		case isIdentByte(c) || c == '#' || c == '\\':
			j := i + 1
			for j < len(src) && (isIdentByte(src[j]) || src[j] == '\\') {
				j++
			}
			if c >= '0' && c <= '9' { // a number: 1.5e+3 reads on over . and the sign
				for j < len(src) && (isIdentByte(src[j]) || src[j] == '.' ||
					((src[j] == '+' || src[j] == '-') && (src[j-1] == 'e' || src[j-1] == 'E'))) {
					j++
				}
				operand = true
				i = j
				break
			}
			word = src[i:j]
			i = j
			if wasDot {
				operand = true
				break
			}
			switch word {
			case "import":
				rest := strings.TrimLeft(src[i:], " \t\r\n")
				if rest == "" || (rest[0] != '(' && rest[0] != '.') {
					scan.moduleSyntax = true
				}
				operand = false
			case "export":
				scan.moduleSyntax = true
				operand = false
			case "typeof", "void", "delete", "await", "new", "yield", "else", "if", "while", "for", "with", "do", "return", "throw", "case", "in", "of", "instanceof", "extends", "keyof", "readonly", "infer":
				operand = false
				stop = chain(i)
			default:
				operand = true
			}
		case c == '"' || c == '\'':
			j := i + 1
			for j < len(src) && src[j] != c && src[j] != '\n' {
				if src[j] == '\\' {
					j++
				}
				j++
			}
			i = min(j+1, len(src))
			operand = true
		case c == '`':
			i, stop = template(i + 1)
		case c == '/' && !operand: // a regular expression literal
			j, inClass := i+1, false
			for ; j < len(src) && src[j] != '\n'; j++ {
				if src[j] == '\\' {
					j++
				} else if src[j] == '[' {
					inClass = true
				} else if src[j] == ']' {
					inClass = false
				} else if src[j] == '/' && !inClass {
					break
				}
			}
			for j++; j < len(src) && isIdentByte(src[j]); j++ {
			}
			i = min(j, len(src))
			operand = true
		case c == '(' || c == '[' || c == '{':
			head := c == '(' && (lastWord == "if" || lastWord == "while" || lastWord == "for" || lastWord == "with")
			levels = append(levels, level{open: c, head: head})
			operand = false
			stop = deeper(i)
			i++
		case c == ')' || c == ']' || c == '}':
			i++
			if len(levels) == 1 {
				operand = true // unbalanced: esbuild says so
				break
			}
			l := levels[len(levels)-1]
			depth -= 1 + l.chain
			levels = levels[:len(levels)-1]
			operand = !l.head
			if l.open == '$' && c == '}' {
				i, stop = template(i)
			}
		case c == ';' || c == ',':
			reset()
			operand = false
			i++
		case c == '.':
			switch {
			case strings.HasPrefix(src[i:], "..."):
				i += 3
				operand = false
				stop = chain(i)
			case i+1 < len(src) && src[i+1] >= '0' && src[i+1] <= '9':
				for i++; i < len(src) && (isIdentByte(src[i]) || src[i] == '.'); i++ {
				}
				operand = true
			default:
				i++
				afterDot, operand = true, false
			}
		default: // an operator
			op := operatorAt(src[i:])
			i += len(op)
			switch {
			case op == "?." && !(i < len(src) && src[i] >= '0' && src[i] <= '9'):
				afterDot, operand = true, false
			case op == "++" || op == "--":
				if !operand {
					stop = chain(i)
				} // else postfix: the operand stays complete
			case rightRecursive(op, operand):
				operand = false
				stop = chain(i)
			default:
				operand = false
			}
		}
		if word != "" {
			lastWord = word
		} else {
			lastWord = ""
		}
		if stop {
			break
		}
	}
	return scan
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
