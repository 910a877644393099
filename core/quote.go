package core

import (
	"strconv"
	"unicode/utf8"
)

// MaxShownBytes is how much of a client-chosen string (an id, a language
// name, a cwd, an env key, a path) error messages and logs show: the whole
// of any real one, and a bounded piece of a hostile one, so that a huge
// string cannot make a huge error body or log line (docs/reliability.md).
const MaxShownBytes = 128

// Clip returns s whole when it is at most MaxShownBytes long, else its first
// MaxShownBytes (cut at a rune boundary) followed by its length. For log
// attributes: the log handlers escape what needs escaping.
func Clip(s string) string {
	head, clipped := clip(s)
	if !clipped {
		return s
	}
	return head + lengthNote(s)
}

// Quote returns s Go-quoted for an error message: control characters
// escaped (a newline cannot pass for the start of another line) and clipped
// like Clip, the length after the closing quote.
func Quote(s string) string {
	head, clipped := clip(s)
	if !clipped {
		return strconv.Quote(s)
	}
	return strconv.Quote(head) + lengthNote(s)
}

// ShowID returns an id as messages show it: bare when it could be one of
// ours (up to MaxShownBytes of letters, digits and - _ . :), so that
// "Context <id> not found" reads as the contract has it, else Quote(id).
func ShowID(id string) string {
	if id == "" || len(id) > MaxShownBytes {
		return Quote(id)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.' || c == ':') {
			return Quote(id)
		}
	}
	return id
}

// clip returns the first MaxShownBytes of s, cut at a rune boundary, and
// whether that is less than s.
func clip(s string) (string, bool) {
	if len(s) <= MaxShownBytes {
		return s, false
	}
	cut := MaxShownBytes
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut], true
}

func lengthNote(s string) string { return "... (" + strconv.Itoa(len(s)) + " bytes)" }
