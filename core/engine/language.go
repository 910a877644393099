package engine

import (
	"errors"
	"slices"
	"sort"
	"strings"

	"github.com/kernelhost/kernelhost/core"
)

// validateCode refuses code that a language cannot hold whatever runs it:
// bash reads its input as C strings, so a NUL byte would cut the code short
// (python and javascript report a NUL themselves, as a syntax error or as
// part of a string literal).
func validateCode(language, code string) error {
	if language == "bash" && strings.IndexByte(code, 0) >= 0 {
		return errors.New("bash code cannot contain a NUL byte")
	}
	return nil
}

// kernelLanguage is the language the engine asks its transport for: lang
// itself if the transport lists it (the subprocess transport compiles
// typescript), else KernelLanguage(lang).
func (e *Engine) kernelLanguage(lang string) string {
	if slices.Contains(e.cfg.Transport.Info().Languages, lang) {
		return lang
	}
	return core.KernelLanguage(lang)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
