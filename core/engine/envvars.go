package engine

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"
)

// snippets generates the helper code the engine runs on a kernel of one
// language. Keys are always valid names (validateEnvKey) and every value is
// encoded as a literal of the language, never spliced (invariant 7).
type snippets struct {
	setEnv   func(key, value string) string
	unsetEnv func(key string) string
	chdir    func(path string) string
	// chdirFirst enters the first of paths that is a directory it can
	// enter, or stays where it is, and prints the working directory it is
	// in then, on a line of its own (see Config.DefaultCwdOnKernel).
	chdirFirst func(paths []string) string
	// saveAndSet, when set, applies an execution's env vars after keeping,
	// inside the kernel, the value each one shadows; restore puts those
	// values back byte for byte (an inherited PATH, a global). A key whose
	// kept value is missing (the kernel lost it) is removed, so a request's
	// value never outlives its request. Languages without them reset each
	// key to its global value or remove it.
	saveAndSet func(keys []string, env map[string]string) string
	restore    func(keys []string) string
	// helperMark is a comment line that starts every helper request, so
	// that the subprocess drivers run it apart from user code, with
	// references they took at start-up (see driver.py, driver.js). Other
	// kernels read a comment.
	helperMark string
	// silentHidesErrors: the language's kernel answers "ok" to a failing
	// silent request (IRkernel does, with no output), so helpers must be sent
	// as normal requests for the engine to learn that a cwd or env snippet
	// failed. Their output is dropped either way; the cost is that they count
	// as executions on such kernels.
	silentHidesErrors bool
}

// helperCode marks code as a helper request of the engine's own.
func helperCode(language, code string) string {
	return languageSnippets[language].helperMark + code
}

// helperSilent says whether the engine's helper requests may be silent on a
// kernel of this language.
func helperSilent(language string) bool {
	return !languageSnippets[language].silentHidesErrors
}

var languageSnippets = map[string]snippets{
	"python": {
		setEnv: func(k, v string) string {
			return "__import__('os').environ.__setitem__(" + pyString(k) + ", " + pyString(v) + ")"
		},
		unsetEnv: func(k string) string { return "__import__('os').environ.pop(" + pyString(k) + ", None)" },
		chdir:    func(p string) string { return "__import__('os').chdir(" + pyString(p) + ")" },
		chdirFirst: func(ps []string) string {
			return "(lambda o, ds: (next((o.chdir(d) for d in ds if o.path.isdir(d)), None), print(o.getcwd())))(__import__('os'), (" + joinQuoted(ps, pyString) + ",))"
		},
		saveAndSet: pySaveAndSet,
		restore:    pyRestore,
		helperMark: "# kernelhost helper\n",
	},
	"javascript": jsSnippets,
	"typescript": jsSnippets,
	"r": {
		setEnv:   func(k, v string) string { return "Sys.setenv(" + rString(k) + " = " + rString(v) + ")" },
		unsetEnv: func(k string) string { return "Sys.unsetenv(" + rString(k) + ")" },
		chdir:    func(p string) string { return "setwd(" + rString(p) + ")" },
		chdirFirst: func(ps []string) string {
			return "local({ for (d in c(" + joinQuoted(ps, rString) + ")) if (dir.exists(d) && !inherits(try(setwd(d), silent = TRUE), \"try-error\")) break; cat(getwd(), \"\\n\", sep = \"\") })"
		},
		saveAndSet: rSaveAndSet,
		restore:    rRestore,
		helperMark: "# kernelhost helper\n",

		silentHidesErrors: true,
	},
	// Java kernels get JVM system properties, as docs/api-contract.md §7.3
	// describes, and the process environment of System.getenv too where the
	// JVM lets the snippet reach it (see javaEnvBlock).
	"java": {
		setEnv: func(k, v string) string {
			return javaEnvBlock("java.lang.System.setProperty(" + javaString(k) + ", " + javaString(v) + "); if (e != null) e.put(" + javaString(k) + ", " + javaString(v) + ");")
		},
		unsetEnv: func(k string) string {
			return javaEnvBlock("java.lang.System.clearProperty(" + javaString(k) + "); if (e != null) e.remove(" + javaString(k) + ");")
		},
		chdir: func(p string) string { return `java.lang.System.setProperty("user.dir", ` + javaString(p) + ");" },
		chdirFirst: func(ps []string) string {
			return "{ for (java.lang.String d : new java.lang.String[] {" + joinQuoted(ps, javaString) + `}) { if (new java.io.File(d).isDirectory()) { java.lang.System.setProperty("user.dir", d); break; } } java.lang.System.out.println(java.lang.System.getProperty("user.dir")); }`
		},
		saveAndSet: javaSaveAndSet,
		restore:    javaRestore,
		helperMark: "// kernelhost helper\n",
	},
	"bash": {
		setEnv:   func(k, v string) string { return "\\export " + k + "=" + shString(v) },
		unsetEnv: func(k string) string { return "\\unset -v " + k },
		chdir:    func(p string) string { return "cd -- " + shString(p) },
		chdirFirst: func(ps []string) string {
			return "for __kh_d in " + strings.Join(mapStrings(ps, shString), " ") + "; do if [[ -d $__kh_d ]] && cd -- \"$__kh_d\"; then break; fi; done; \\unset -v __kh_d; pwd"
		},
		saveAndSet: bashSaveAndSet,
		restore:    bashRestore,
	},
}

var jsSnippets = snippets{
	setEnv:   func(k, v string) string { return "process.env[" + jsString(k) + "] = " + jsString(v) + ";" },
	unsetEnv: func(k string) string { return "delete process.env[" + jsString(k) + "];" },
	chdir:    func(p string) string { return "process.chdir(" + jsString(p) + ");" },
	chdirFirst: func(ps []string) string {
		return "((ds) => { for (const d of ds) { try { process.chdir(d); break; } catch (e) { } } console.log(process.cwd()); })([" + joinQuoted(ps, jsString) + "]);"
	},
	saveAndSet: jsSaveAndSet,
	restore:    jsRestore,
	helperMark: "// kernelhost helper\n",
}

// The python snippets are one expression each, whatever the number of keys
// (one dict or tuple literal), so their cost is linear in the keys: a
// statement per key would make IPython and the compiler do far more per
// line. The kept values live in the sys module's namespace, not the user's; the
// subprocess driver runs helper requests with the os and sys it took at
// start-up, so user code that replaced __import__ or os.environ does not
// redirect them.
func pySaveAndSet(keys []string, env map[string]string) string {
	var b strings.Builder
	b.WriteString("(lambda e, s, n: (s.__setitem__('_kh_env_saved', {k: e.get(k) for k in n}), [e.__setitem__(k, v) for k, v in n.items()]))(__import__('os').environ, __import__('sys').__dict__, {")
	b.WriteString(joinPairs(keys, env, pyString, ": "))
	b.WriteString("})")
	return b.String()
}

func pyRestore(keys []string) string {
	var b strings.Builder
	b.WriteString("(lambda e, s, ks: [e.__setitem__(k, s[k]) if s.get(k) is not None else e.pop(k, None) for k in ks])(__import__('os').environ, __import__('sys').__dict__.pop('_kh_env_saved', None) or {}, (")
	for _, k := range keys {
		b.WriteString(pyString(k) + ",")
	}
	b.WriteString("))")
	return b.String()
}

// The javascript snippets keep the shadowed values on the process object
// (the subprocess driver gives helper requests the process.env it took at
// start-up).
func jsSaveAndSet(keys []string, env map[string]string) string {
	var b strings.Builder
	b.WriteString("((e, n) => { const s = {}; for (const k of Object.keys(n)) { if (Object.prototype.hasOwnProperty.call(e, k)) s[k] = e[k]; e[k] = n[k]; } process.__khEnvSaved = s; })(process.env, {")
	b.WriteString(joinPairs(keys, env, jsString, ": "))
	b.WriteString("});")
	return b.String()
}

func jsRestore(keys []string) string {
	var b strings.Builder
	b.WriteString("((e, s, ks) => { for (const k of ks) { if (Object.prototype.hasOwnProperty.call(s, k)) e[k] = s[k]; else delete e[k]; } })(process.env, process.__khEnvSaved || {}, [")
	b.WriteString(joinQuoted(keys, jsString))
	b.WriteString("]); delete process.__khEnvSaved;")
	return b.String()
}

// The R snippets keep the shadowed values (NA: unset) in .kh_env_saved.
// The subprocess driver runs helper requests in an environment of its own
// whose parent is base, so user code that redefined Sys.setenv, `[[` or
// exists in the global environment does not redirect them, and
// .kh_env_saved stays out of the user's sight; on IRkernel it is a hidden
// variable of the global environment.
func rSaveAndSet(keys []string, env map[string]string) string {
	var b strings.Builder
	b.WriteString(".kh_env_saved <- Sys.getenv(" + rVector(keys) + ", unset = NA, names = TRUE)\nSys.setenv(")
	b.WriteString(joinPairs(keys, env, rString, " = "))
	b.WriteString(")")
	return b.String()
}

func rRestore(keys []string) string {
	return "local({\n" +
		"  saved <- get0(\".kh_env_saved\", ifnotfound = NULL)\n" +
		"  for (k in " + rVector(keys) + ") {\n" +
		"    v <- if (k %in% names(saved)) saved[[k]] else NA_character_\n" +
		"    if (is.na(v)) Sys.unsetenv(k) else do.call(Sys.setenv, structure(list(v), names = k))\n" +
		"  }\n" +
		"})\n" +
		"if (exists(\".kh_env_saved\", inherits = FALSE)) rm(\".kh_env_saved\")"
}

// rVector is the R character vector of keys.
func rVector(keys []string) string {
	return "c(" + joinQuoted(keys, rString) + ")"
}

// joinQuoted is keys, each quoted by quote, separated by ", ": the body of
// a list literal in each language's snippets.
func joinQuoted(keys []string, quote func(string) string) string {
	quoted := make([]string, len(keys))
	for i, k := range keys {
		quoted[i] = quote(k)
	}
	return strings.Join(quoted, ", ")
}

// joinPairs is each key and its value in env, quoted by quote and joined by
// sep, the pairs separated by ", ": the body of a map literal or an argument
// list in each language's snippets.
func joinPairs(keys []string, env map[string]string, quote func(string) string, sep string) string {
	pairs := make([]string, len(keys))
	for i, k := range keys {
		pairs[i] = quote(k) + sep + quote(env[k])
	}
	return strings.Join(pairs, ", ")
}

// javaEnvBlock wraps body in a block statement where e is the map behind
// System.getenv(), made writable, or null. System.getenv() is an
// unmodifiable view (Collections.UnmodifiableMap, field m) of the JVM's
// environment map, which System.getenv(name) and ProcessBuilder read: with
// java.util opened to unnamed modules (the subprocess transport starts the
// JVM with --add-opens java.base/java.util=ALL-UNNAMED) the snippet writes
// through it. A JVM without that (another Java kernel) gets the properties
// only, as the contract describes.
func javaEnvBlock(body string) string {
	return "{ java.util.Map<java.lang.String, java.lang.String> e = null; try { java.lang.reflect.Field f = java.lang.System.getenv().getClass().getDeclaredField(\"m\"); f.setAccessible(true); @java.lang.SuppressWarnings(\"unchecked\") java.util.Map<java.lang.String, java.lang.String> m = (java.util.Map<java.lang.String, java.lang.String>) f.get(java.lang.System.getenv()); e = m; } catch (java.lang.Exception x) { } " + body + " }"
}

// javaSavedProperty holds, during a request, the values its env vars
// shadowed: for each key, the key, the property and the environment value,
// each NUL-terminated, a value as "=" plus the text or "-" for unset (env
// values cannot hold a NUL).
const javaSavedProperty = "kernelhost.env.saved"

func javaSaveAndSet(keys []string, env map[string]string) string {
	var b strings.Builder
	b.WriteString("java.lang.StringBuilder s = new java.lang.StringBuilder(); java.lang.String[][] n = {")
	pairs := make([]string, len(keys))
	for i, k := range keys {
		pairs[i] = "{" + javaString(k) + ", " + javaString(env[k]) + "}"
	}
	b.WriteString(strings.Join(pairs, ", "))
	b.WriteString("}; for (java.lang.String[] kv : n) { java.lang.String p = java.lang.System.getProperty(kv[0]); java.lang.String v = e == null ? null : e.get(kv[0]); " +
		"s.append(kv[0]).append('\\0').append(p == null ? \"-\" : \"=\" + p).append('\\0').append(v == null ? \"-\" : \"=\" + v).append('\\0'); " +
		"java.lang.System.setProperty(kv[0], kv[1]); if (e != null) e.put(kv[0], kv[1]); } " +
		"java.lang.System.setProperty(" + javaString(javaSavedProperty) + ", s.toString());")
	return javaEnvBlock(b.String())
}

func javaRestore(keys []string) string {
	var b strings.Builder
	b.WriteString("java.lang.String[] saved = java.lang.System.getProperty(" + javaString(javaSavedProperty) + ", \"\").split(\"\\0\", -1); java.lang.System.clearProperty(" + javaString(javaSavedProperty) + "); " +
		"java.util.Map<java.lang.String, java.lang.String[]> old = new java.util.HashMap<>(); for (int i = 0; i + 2 < saved.length; i += 3) old.put(saved[i], new java.lang.String[] {saved[i + 1], saved[i + 2]}); " +
		"for (java.lang.String k : new java.lang.String[] {")
	b.WriteString(joinQuoted(keys, javaString))
	b.WriteString("}) { java.lang.String[] o = old.getOrDefault(k, new java.lang.String[] {\"-\", \"-\"}); " +
		"if (o[0].startsWith(\"=\")) java.lang.System.setProperty(k, o[0].substring(1)); else java.lang.System.clearProperty(k); " +
		"if (e != null) { if (o[1].startsWith(\"=\")) e.put(k, o[1].substring(1)); else e.remove(k); } }")
	return javaEnvBlock(b.String())
}

// The bash snippets run in POSIX mode, entered by assigning POSIXLY_CORRECT
// (an assignment, which no function or alias can stand in for): there the
// special builtins export and unset are found before functions, and the
// backslash keeps aliases out, so user code that defined `unset() { :; }`
// cannot turn the reset into a no-op. If POSIX mode cannot be entered (the
// user made POSIXLY_CORRECT readonly), the snippet does nothing and fails.
// The user's own POSIX setting is put back at the end.
//
// The keys (and values) are array literals walked by one loop, so a key
// costs its name and value and a few bytes: the driver reads a request from
// its pipe a byte at a time. The value the i-th key shadows is kept in
// __kh_sv[i]: "x" plus the value if it was exported, "s" plus the value if
// it was a shell variable only, empty if it was unset; the reset walks the
// same sorted keys.
func bashPosix(body string) string {
	return "__kh_pc=${POSIXLY_CORRECT+x}${POSIXLY_CORRECT-}; POSIXLY_CORRECT=y\n" +
		"if [[ -o posix ]]; then\n" + body +
		"if [[ $__kh_pc == x* ]]; then POSIXLY_CORRECT=${__kh_pc:1}; else \\unset -v POSIXLY_CORRECT; fi; \\unset -v __kh_pc __kh_k __kh_i __kh_keys __kh_vals\n" +
		"else [[ -o posix ]]; fi"
}

// bashWords writes words as the elements of a bash array literal.
func bashWords(b *strings.Builder, words []string, quote bool) {
	b.WriteByte('(')
	for i, w := range words {
		if i > 0 {
			b.WriteByte(' ')
		}
		if quote {
			w = shString(w)
		}
		b.WriteString(w)
	}
	b.WriteByte(')')
}

func bashSaveAndSet(keys []string, env map[string]string) string {
	values := make([]string, len(keys))
	for i, k := range keys {
		values[i] = env[k]
	}
	var b strings.Builder
	b.WriteString("__kh_keys=")
	bashWords(&b, keys, false)
	b.WriteString("; __kh_vals=")
	bashWords(&b, values, true)
	b.WriteString("; __kh_sv=()\n" +
		"for ((__kh_i = 0; __kh_i < ${#__kh_keys[@]}; __kh_i++)); do __kh_k=${__kh_keys[__kh_i]}; " +
		"if [[ ! -v $__kh_k ]]; then __kh_sv[__kh_i]=; elif [[ ${!__kh_k@a} == *x* ]]; then __kh_sv[__kh_i]=x${!__kh_k}; else __kh_sv[__kh_i]=s${!__kh_k}; fi; " +
		"\\export \"$__kh_k=${__kh_vals[__kh_i]}\"; done\n")
	return bashPosix(b.String())
}

func bashRestore(keys []string) string {
	var b strings.Builder
	b.WriteString("__kh_keys=")
	bashWords(&b, keys, false)
	b.WriteString("\n" +
		"for ((__kh_i = 0; __kh_i < ${#__kh_keys[@]}; __kh_i++)); do __kh_k=${__kh_keys[__kh_i]}; " +
		"case ${__kh_sv[__kh_i]-} in x*) \\export \"$__kh_k=${__kh_sv[__kh_i]:1}\";; s*) \\export \"$__kh_k=${__kh_sv[__kh_i]:1}\"; \\export -n \"$__kh_k\";; *) \\unset -v \"$__kh_k\";; esac; done; \\unset -v __kh_sv\n")
	return bashPosix(b.String())
}

// SupportsEnv reports whether the engine can set env vars and cwd on kernels of
// this language.
func SupportsEnv(language string) bool {
	_, ok := languageSnippets[language]
	return ok
}

// setupCode is the helper code run after a kernel starts or restarts: change
// to cwd (if any) and apply the global env vars.
func setupCode(language, cwd string, globals map[string]string) string {
	s, ok := languageSnippets[language]
	if !ok {
		return ""
	}
	var lines []string
	if cwd != "" {
		lines = append(lines, s.chdir(cwd))
	}
	for _, k := range sortedKeys(globals) {
		lines = append(lines, s.setEnv(k, globals[k]))
	}
	return strings.Join(lines, "\n")
}

// setupCodeChoosingCwd is setupCode for a cwd chosen where the kernel runs:
// the first of cwds it can enter (see snippets.chdirFirst).
func setupCodeChoosingCwd(language string, cwds []string, globals map[string]string) string {
	s, ok := languageSnippets[language]
	if !ok {
		return ""
	}
	lines := []string{s.chdirFirst(cwds)}
	for _, k := range sortedKeys(globals) {
		lines = append(lines, s.setEnv(k, globals[k]))
	}
	return strings.Join(lines, "\n")
}

func mapStrings(in []string, f func(string) string) []string {
	out := make([]string, len(in))
	for i, s := range in {
		out[i] = f(s)
	}
	return out
}

// setEnvCode applies one execution's env vars, keeping the values they shadow
// where the language can (see snippets.saveAndSet).
func setEnvCode(language string, env map[string]string) string {
	s := languageSnippets[language]
	keys := sortedKeys(env)
	if s.saveAndSet != nil {
		return s.saveAndSet(keys, env)
	}
	lines := make([]string, 0, len(env))
	for _, k := range keys {
		lines = append(lines, s.setEnv(k, env[k]))
	}
	return strings.Join(lines, "\n")
}

// resetEnvCode undoes setEnvCode: each key gets back the value it shadowed;
// in languages that cannot keep it, its global value, or it is removed when
// there is none.
func resetEnvCode(language string, env, globals map[string]string) string {
	s := languageSnippets[language]
	keys := sortedKeys(env)
	if s.restore != nil {
		return s.restore(keys)
	}
	lines := make([]string, 0, len(env))
	for _, k := range keys {
		if g, ok := globals[k]; ok {
			lines = append(lines, s.setEnv(k, g))
		} else {
			lines = append(lines, s.unsetEnv(k))
		}
	}
	return strings.Join(lines, "\n")
}

// quoted writes s between quote characters with the escapes Python, R and
// Java share (backslash, the quote, \n, \r, \t); every other rune goes
// through other, which writes it in the language's own way.
func quoted(s string, quote rune, other func(b *strings.Builder, r rune)) string {
	var b strings.Builder
	b.WriteRune(quote)
	for _, r := range s {
		switch r {
		case '\\', quote:
			b.WriteByte('\\')
			b.WriteRune(r)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		default:
			other(&b, r)
		}
	}
	b.WriteRune(quote)
	return b.String()
}

// pyString encodes s as a Python str literal. Non-ASCII stays as UTF-8 (Python
// source is UTF-8); control characters are \x escapes so no line of the
// snippet ever starts inside the literal (IPython would treat `!` or `%` there
// as syntax).
func pyString(s string) string {
	return quoted(s, '\'', func(b *strings.Builder, r rune) {
		switch {
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(b, `\x%02x`, r)
		case r == 0x85 || r == 0x2028 || r == 0x2029:
			fmt.Fprintf(b, `\u%04x`, r) // line separators: keep the snippet on one line for every tokenizer
		default:
			b.WriteRune(r)
		}
	})
}

// jsString encodes s as a JSON string, which is a valid JS literal.
func jsString(s string) string {
	out, _ := json.Marshal(s) // cannot fail for a string
	return string(out)
}

// shString single-quotes s for bash: nothing inside single quotes is special
// except the quote itself, written as '\”.
func shString(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// rString encodes s as an R double-quoted literal: non-ASCII as \u{…}/\U{…}.
func rString(s string) string {
	return quoted(s, '"', func(b *strings.Builder, r rune) {
		switch {
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(b, `\x%02x`, r)
		case r < utf8.RuneSelf:
			b.WriteRune(r)
		case r <= 0xFFFF:
			fmt.Fprintf(b, `\u{%04x}`, r)
		default:
			fmt.Fprintf(b, `\U{%08x}`, r)
		}
	})
}

// javaString encodes s as a Java string literal. It never emits \uXXXX escapes,
// which Java turns into raw characters before parsing; control characters are
// octal escapes and other text stays UTF-8.
func javaString(s string) string {
	return quoted(s, '"', func(b *strings.Builder, r rune) {
		if r < 0x20 || r == 0x7f {
			fmt.Fprintf(b, `\%03o`, r) // three digits, so a following digit is not read into it
			return
		}
		b.WriteRune(r)
	})
}
