package policysdk

import (
	"errors"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"
)

// A small JSON codec for the ABI's fixed shapes (strings and string maps),
// plus DecodeJSON for configs. encoding/json works in a module but costs far
// more per call under wasm and adds to its size and compile time
// (docs/RATIONALE.md, "Hand-written JSON codecs"); this does not use
// reflection, fmt or strconv.

var errSyntax = errors.New("policysdk: malformed input JSON")

type decoder struct {
	b []byte
	i int
	// reuse, when set, lends the decoder maps to fill and lets strings point
	// into b instead of being copied: the wasm export's call-scoped mode.
	reuse *scratch
	maps  int
}

// scratch holds the maps the export reuses from call to call.
type scratch struct{ maps [3]map[string]string }

var reused scratch

func (d *decoder) newMap() map[string]string {
	if d.reuse == nil || d.maps >= len(d.reuse.maps) {
		return map[string]string{}
	}
	m := d.reuse.maps[d.maps]
	if m == nil {
		m = map[string]string{}
		d.reuse.maps[d.maps] = m
	}
	d.maps++
	if len(m) > 0 { // clear costs a few runtime calls even on an empty map
		clear(m)
	}
	return m
}

func (d *decoder) text(from, to int) string {
	if d.reuse != nil {
		if from == to {
			return ""
		}
		return unsafe.String(&d.b[from], to-from)
	}
	return string(d.b[from:to])
}

func (d *decoder) ws() {
	for d.i < len(d.b) {
		switch d.b[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

func (d *decoder) peek() byte {
	d.ws()
	if d.i >= len(d.b) {
		return 0
	}
	return d.b[d.i]
}

func (d *decoder) expect(c byte) error {
	if d.peek() != c {
		return errSyntax
	}
	d.i++
	return nil
}

// members iterates over an object without closures (which would allocate):
//
//	for more, err := d.open(); more; more, err = d.next() { key, err := d.key(); ... }
//
// open consumes '{' and reports whether a member follows; next consumes ','
// or '}' after a member's value.
func (d *decoder) open() (bool, error) {
	if err := d.expect('{'); err != nil {
		return false, err
	}
	if d.peek() == '}' {
		d.i++
		return false, nil
	}
	return true, nil
}

func (d *decoder) next() (bool, error) {
	switch d.peek() {
	case ',':
		d.i++
		return true, nil
	case '}':
		d.i++
		return false, nil
	}
	return false, errSyntax
}

// key reads a member's key and the colon after it.
func (d *decoder) key() (string, error) {
	k, err := d.str()
	if err != nil {
		return "", err
	}
	return k, d.expect(':')
}

// object calls member for each key of the object at the cursor.
func (d *decoder) object(member func(key string) error) error {
	if err := d.expect('{'); err != nil {
		return err
	}
	if d.peek() == '}' {
		d.i++
		return nil
	}
	for {
		key, err := d.str()
		if err != nil {
			return err
		}
		if err := d.expect(':'); err != nil {
			return err
		}
		if err := member(key); err != nil {
			return err
		}
		switch d.peek() {
		case ',':
			d.i++
		case '}':
			d.i++
			return nil
		default:
			return errSyntax
		}
	}
}

func (d *decoder) null() bool {
	if d.peek() == 'n' && d.i+4 <= len(d.b) && string(d.b[d.i:d.i+4]) == "null" {
		d.i += 4
		return true
	}
	return false
}

func (d *decoder) strMap() (map[string]string, error) {
	if d.null() {
		return nil, nil
	}
	m := d.newMap()
	more, err := d.open()
	for ; more && err == nil; more, err = d.next() {
		var k, v string
		if k, err = d.key(); err != nil {
			break
		}
		if v, err = d.str(); err != nil {
			break
		}
		m[k] = v
	}
	return m, err
}

func (d *decoder) str() (string, error) {
	if d.peek() != '"' {
		return "", errSyntax
	}
	d.i++
	start := d.i
	for d.i < len(d.b) { // fast path: no escapes
		c := d.b[d.i]
		if c == '"' {
			s := d.text(start, d.i)
			d.i++
			return s, nil
		}
		if c == '\\' {
			break
		}
		d.i++
	}
	out := append([]byte(nil), d.b[start:d.i]...)
	for d.i < len(d.b) {
		c := d.b[d.i]
		switch {
		case c == '"':
			d.i++
			return string(out), nil
		case c != '\\':
			out = append(out, c)
			d.i++
			continue
		}
		if d.i+1 >= len(d.b) {
			return "", errSyntax
		}
		e := d.b[d.i+1]
		d.i += 2
		switch e {
		case '"', '\\', '/':
			out = append(out, e)
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r, ok := d.hex4()
			if !ok {
				return "", errSyntax
			}
			if utf16.IsSurrogate(r) {
				r2 := rune(-1)
				if d.i+1 < len(d.b) && d.b[d.i] == '\\' && d.b[d.i+1] == 'u' {
					d.i += 2
					if r2, ok = d.hex4(); !ok {
						return "", errSyntax
					}
				}
				r = utf16.DecodeRune(r, r2)
			}
			out = utf8.AppendRune(out, r)
		default:
			return "", errSyntax
		}
	}
	return "", errSyntax
}

func (d *decoder) hex4() (rune, bool) {
	if d.i+4 > len(d.b) {
		return 0, false
	}
	var r rune
	for _, c := range d.b[d.i : d.i+4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	d.i += 4
	return r, true
}

// DecodeJSON decodes a JSON document the way encoding/json decodes into an
// any: objects become map[string]any, arrays []any, numbers float64, and
// strings, booleans and null string, bool and nil. It is meant for a policy's
// config value, without pulling encoding/json into the module.
func DecodeJSON(s string) (any, error) {
	d := &decoder{b: []byte(s)}
	v, err := d.value()
	if err == nil && d.peek() != 0 {
		err = errSyntax
	}
	return v, err
}

func (d *decoder) value() (any, error) {
	switch c := d.peek(); {
	case c == '"':
		return d.str()
	case c == '{':
		m := map[string]any{}
		err := d.object(func(k string) error {
			v, err := d.value()
			m[k] = v
			return err
		})
		return m, err
	case c == '[':
		d.i++
		a := []any{}
		if d.peek() == ']' {
			d.i++
			return a, nil
		}
		for {
			v, err := d.value()
			if err != nil {
				return nil, err
			}
			a = append(a, v)
			switch d.peek() {
			case ',':
				d.i++
			case ']':
				d.i++
				return a, nil
			default:
				return nil, errSyntax
			}
		}
	default:
		start := d.i
		if err := d.skip(); err != nil {
			return nil, err
		}
		switch lit := string(d.b[start:d.i]); lit {
		case "null":
			return nil, nil
		case "true":
			return true, nil
		case "false":
			return false, nil
		default:
			return parseNumber(lit)
		}
	}
}

// parseNumber handles the JSON number grammar well enough for configs
// (integers and decimals, optional exponent).
func parseNumber(s string) (float64, error) {
	i, neg := 0, false
	if i < len(s) && s[i] == '-' {
		neg, i = true, i+1
	}
	var v float64
	digits := 0
	for ; i < len(s) && s[i] >= '0' && s[i] <= '9'; i++ {
		v, digits = v*10+float64(s[i]-'0'), digits+1
	}
	if i < len(s) && s[i] == '.' {
		scale := 0.1
		for i++; i < len(s) && s[i] >= '0' && s[i] <= '9'; i++ {
			v, scale, digits = v+float64(s[i]-'0')*scale, scale/10, digits+1
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		eneg := false
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			eneg, i = s[i] == '-', i+1
		}
		e := 0
		for ; i < len(s) && s[i] >= '0' && s[i] <= '9'; i++ {
			e = e*10 + int(s[i]-'0')
		}
		for ; e > 0; e-- {
			if eneg {
				v /= 10
			} else {
				v *= 10
			}
		}
	}
	if digits == 0 || i != len(s) {
		return 0, errSyntax
	}
	if neg {
		v = -v
	}
	return v, nil
}

// skip passes over any JSON value (members a newer host may add).
func (d *decoder) skip() error {
	switch c := d.peek(); {
	case c == '"':
		_, err := d.str()
		return err
	case c == '{':
		return d.object(func(string) error { return d.skip() })
	case c == '[':
		d.i++
		if d.peek() == ']' {
			d.i++
			return nil
		}
		for {
			if err := d.skip(); err != nil {
				return err
			}
			switch d.peek() {
			case ',':
				d.i++
			case ']':
				d.i++
				return nil
			default:
				return errSyntax
			}
		}
	case c == 0:
		return errSyntax
	default: // number, true, false, null
		start := d.i
		for d.i < len(d.b) && !isDelim(d.b[d.i]) {
			d.i++
		}
		if d.i == start {
			return errSyntax
		}
		return nil
	}
}

func isDelim(c byte) bool {
	switch c {
	case ',', '}', ']', ' ', '\t', '\n', '\r':
		return true
	}
	return false
}

// decodeInput decodes the ABI input. With reuse set, the Input's maps come
// from reuse and its strings share b's memory: it is valid only while b and
// reuse are left alone.
func decodeInput(b []byte, reuse *scratch) (Input, error) {
	if in, ok := decodeCanonical(b, reuse); ok {
		return in, nil
	}
	return decodeGeneral(b, reuse)
}

// decodeGeneral decodes any JSON object: members in any order, whitespace,
// escapes, unknown members skipped.
func decodeGeneral(b []byte, reuse *scratch) (Input, error) {
	var in Input
	d := decoder{b: b, reuse: reuse}
	more, err := d.open()
	for ; more && err == nil; more, err = d.next() {
		var k string
		if k, err = d.key(); err != nil {
			break
		}
		switch k {
		case "config":
			in.Config, err = d.str()
		case "env_vars":
			in.EnvVars, err = d.strMap()
		case "global_env":
			in.GlobalEnv, err = d.strMap()
		case "metadata":
			in.Metadata, err = d.strMap()
		case "context_id":
			in.ContextID, err = d.str()
		case "language":
			in.Language, err = d.str()
		case "cwd":
			in.Cwd, err = d.str()
		default:
			err = d.skip()
		}
	}
	if err == nil && d.peek() != 0 {
		err = errSyntax
	}
	return in, err
}

const hexDigits = "0123456789abcdef"

func appendStr(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c == '\n':
			b = append(b, '\\', 'n')
		case c == '\r':
			b = append(b, '\\', 'r')
		case c == '\t':
			b = append(b, '\\', 't')
		case c < 0x20:
			b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}

func appendDecision(b []byte, dec Decision) []byte {
	b = append(b, `{"env_vars":`...)
	if dec.EnvVars == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '{')
		first := true
		for k, v := range dec.EnvVars {
			if !first {
				b = append(b, ',')
			}
			first = false
			b = appendStr(b, k)
			b = append(b, ':')
			b = appendStr(b, v)
		}
		b = append(b, '}')
	}
	if len(dec.Rejections) > 0 {
		b = append(b, `,"rejections":[`...)
		for i, r := range dec.Rejections {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"key":`...)
			b = appendStr(b, r.Key)
			b = append(b, `,"reason":`...)
			b = appendStr(b, r.Reason)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	return append(b, '}')
}

// decodeCanonical decodes an input in the host's canonical layout
// (docs/policy-abi.md: the members in their order, compact, nothing after
// metadata) whose strings have no escapes: what the host sends for nearly
// every execution. It reports false for anything else, and decodeInput then
// runs the general decoder from the start. Under wasm each Go function call
// costs tens of ns and each map insert over a µs, so this path scans in few
// calls (its helpers are small enough to be inlined) and does nothing but
// the map inserts it must.
func decodeCanonical(b []byte, reuse *scratch) (in Input, ok bool) {
	d := decoder{b: b, reuse: reuse}
	if !d.lit(`{"config":`) {
		return in, false
	}
	if in.Config, ok = d.plainStr(); !ok || !d.lit(`,"env_vars":`) {
		return in, false
	}
	if in.EnvVars, ok = d.plainMap(); !ok || !d.lit(`,"global_env":`) {
		return in, false
	}
	if in.GlobalEnv, ok = d.plainMap(); !ok || !d.lit(`,"context_id":`) {
		return in, false
	}
	if in.ContextID, ok = d.plainStr(); !ok || !d.lit(`,"language":`) {
		return in, false
	}
	if in.Language, ok = d.plainStr(); !ok || !d.lit(`,"cwd":`) {
		return in, false
	}
	if in.Cwd, ok = d.plainStr(); !ok || !d.lit(`,"metadata":`) {
		return in, false
	}
	if in.Metadata, ok = d.plainMap(); !ok || !d.lit("}") || d.i != len(b) {
		return in, false
	}
	return in, true
}

// lit consumes s if the input continues with it. A byte loop rather than a
// string comparison: under wasm that is two runtime calls fewer.
func (d *decoder) lit(s string) bool {
	if len(d.b)-d.i < len(s) {
		return false
	}
	for j := 0; j < len(s); j++ {
		if d.b[d.i+j] != s[j] {
			return false
		}
	}
	d.i += len(s)
	return true
}

// plainStr reads a string without escapes; false for anything else.
func (d *decoder) plainStr() (string, bool) {
	if d.i >= len(d.b) || d.b[d.i] != '"' {
		return "", false
	}
	end := plainEnd(d.b, d.i+1)
	if end < 0 {
		return "", false
	}
	s := d.text(d.i+1, end)
	d.i = end + 1
	return s, true
}

// plainEnd returns the index of the quote that ends the string whose
// content starts at i, or -1 if the string has an escape or does not end.
func plainEnd(b []byte, i int) int {
	for ; i < len(b); i++ {
		switch b[i] {
		case '"':
			return i
		case '\\':
			return -1
		}
	}
	return -1
}

// plainMap reads a compact object of plain strings; false for anything else.
func (d *decoder) plainMap() (map[string]string, bool) {
	if d.i >= len(d.b) || d.b[d.i] != '{' {
		return nil, false
	}
	d.i++
	m := d.newMap()
	if d.i < len(d.b) && d.b[d.i] == '}' {
		d.i++
		return m, true
	}
	for {
		// "key":"value", scanned here rather than with two plainStr calls
		// (too large to inline): a call per string shows under wasm.
		if d.i >= len(d.b) || d.b[d.i] != '"' {
			return nil, false
		}
		keyEnd := plainEnd(d.b, d.i+1)
		if keyEnd < 0 || keyEnd+2 >= len(d.b) || d.b[keyEnd+1] != ':' || d.b[keyEnd+2] != '"' {
			return nil, false
		}
		valEnd := plainEnd(d.b, keyEnd+3)
		if valEnd < 0 || valEnd+1 >= len(d.b) {
			return nil, false
		}
		m[d.text(d.i+1, keyEnd)] = d.text(keyEnd+3, valEnd)
		d.i = valEnd + 1
		switch d.b[d.i] {
		case ',':
			d.i++
		case '}':
			d.i++
			return m, true
		default:
			return nil, false
		}
	}
}
