package core

import "strings"

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

// KernelLanguage is the language a kernel is started for on a transport that
// does not run lang itself: typescript runs on the javascript kernel (in its
// own context), as Jupyter's javascript kernels take typescript.
func KernelLanguage(lang string) string {
	if lang == "typescript" {
		return "javascript"
	}
	return lang
}
