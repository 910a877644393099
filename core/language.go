package core

import (
	"errors"
	"slices"
	"sort"
	"strings"
)

// NormalizeLanguage turns a requested language into the name contexts are keyed
// by: empty means python; otherwise trimmed and lowercased, with the aliases
// js → javascript and ts → typescript (and py → python, sh → bash).
func NormalizeLanguage(lang string) string {
	lang = strings.ToLower(strings.TrimSpace(lang))
	switch lang {
	case "", "py", "python3":
		return "python"
	case "js", "node":
		return "javascript"
	case "ts":
		return "typescript"
	case "sh", "shell":
		return "bash"
	}
	return lang
}

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

// KernelLanguage is the language a kernel is started for on a transport that
// does not run lang itself: typescript runs on the javascript kernel (in its
// own context), as Jupyter's javascript kernels take typescript.
func KernelLanguage(lang string) string {
	if lang == "typescript" {
		return "javascript"
	}
	return lang
}

// kernelLanguage is the language the engine asks its transport for: lang
// itself if the transport lists it (the subprocess transport compiles
// typescript), else KernelLanguage(lang).
func (e *Engine) kernelLanguage(lang string) string {
	if slices.Contains(e.cfg.Transport.Info().Languages, lang) {
		return lang
	}
	return KernelLanguage(lang)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
