package transporttest

// LanguageSnippets is the per-language code the suite runs. A case whose
// snippet is empty is skipped for that language, so a language without, say,
// main results (bash) leaves Result empty. Python, Bash and the others
// return a fresh value each: a test may change its copy for its own case.
//
// Texts written by snippets are fixed by the suite: StdoutCode writes exactly
// "out\n" to stdout, StderrCode exactly "err\n" to stderr, PrintThenSleep and
// Sleep write exactly "start\n" to stdout before they sleep.
type LanguageSnippets struct {
	Language string // the normalised language the kernel is started for

	Result     string // code whose main result's text/plain is ResultText
	ResultText string

	StdoutCode string // writes "out\n" to stdout
	StderrCode string // writes "err\n" to stderr

	// PrintThenSleep writes "start\n" to stdout, then sleeps PrintSleepSeconds.
	PrintThenSleep    string
	PrintSleepSeconds float64

	// ErrorCode fails; the error message has name ErrorName (exact, when not
	// empty) and a value containing ErrorValue.
	ErrorCode  string
	ErrorName  string
	ErrorValue string

	// SetState stores 41 somewhere; GetState then shows 42, as the main
	// result's text/plain or as stdout "42\n". After a restart it must not.
	SetState string
	GetState string

	// Sleep writes "start\n" to stdout, then runs for at least SleepRunsFor
	// unless interrupted.
	Sleep string

	// Exit makes the interpreter exit at once (the kernel dies).
	Exit string

	// PrintEnv returns code that writes the value of env var key to stdout,
	// exactly and with nothing after it, or "<unset>" when it is not set. The
	// engine-level cases use it to prove env vars arrive byte for byte and are
	// reset afterwards.
	PrintEnv func(key string) string
	// PrintCwd writes the working directory to stdout, exactly.
	PrintCwd string
}

// Snippets returns the suite's snippets for language (a normalised name:
// "python", "r"), false when it has none. A transport that runs its
// conformance suite for each language it registers (the subprocess
// transport's) fails for a language without snippets here: adding one is
// a function below and its line in this list.
func Snippets(language string) (LanguageSnippets, bool) {
	for _, of := range []func() LanguageSnippets{Python, Bash, JavaScript, TypeScript, R, Java} {
		if s := of(); s.Language == language {
			return s, true
		}
	}
	return LanguageSnippets{}, false
}

// Python returns the suite's default: the snippets for a Python kernel (the
// subprocess transport's and Jupyter's ipykernel alike).
func Python() LanguageSnippets {
	return LanguageSnippets{
		Language:          "python",
		Result:            "1+1",
		ResultText:        "2",
		StdoutCode:        "print('out')",
		StderrCode:        "import sys\nprint('err', file=sys.stderr)",
		PrintThenSleep:    "import time\nprint('start')\ntime.sleep(1.5)",
		PrintSleepSeconds: 1.5,
		ErrorCode:         "def f():\n    raise ValueError('boom')\nf()",
		ErrorName:         "ValueError",
		ErrorValue:        "boom",
		SetState:          "kh_state = 41",
		GetState:          "kh_state + 1",
		Sleep:             "import time\nprint('start')\ntime.sleep(60)",
		Exit:              "import os\nos._exit(1)",
		PrintEnv: func(key string) string {
			return "import os, sys\nsys.stdout.write(os.environ.get('" + key + "', '<unset>'))\nsys.stdout.flush()"
		},
		PrintCwd: "import os, sys\nsys.stdout.write(os.getcwd())\nsys.stdout.flush()",
	}
}

// Bash returns the suite's snippets for a bash kernel. Bash has no main results.
func Bash() LanguageSnippets {
	return LanguageSnippets{
		Language:          "bash",
		StdoutCode:        "echo out",
		StderrCode:        "echo err >&2",
		PrintThenSleep:    "echo start; sleep 1.5",
		PrintSleepSeconds: 1.5,
		ErrorCode:         "ls /no/such/dir/kh-missing",
		ErrorValue:        "",
		SetState:          "kh_state=41",
		GetState:          "echo $((kh_state + 1))",
		// Short sleeps: bash runs a trap only between commands, so an interrupt
		// that lands just before a long sleep starts would wait for its end.
		Sleep: "echo start; for i in $(seq 600); do sleep 0.1; done",
		Exit:  "exit 3",
		PrintEnv: func(key string) string {
			return `if [ -n "${` + key + `+x}" ]; then printf '%s' "$` + key + `"; else printf '<unset>'; fi`
		},
		PrintCwd: `printf '%s' "$PWD"`,
	}
}

// JavaScript returns the suite's snippets for a JavaScript (node) kernel.
func JavaScript() LanguageSnippets {
	return LanguageSnippets{
		Language:          "javascript",
		Result:            "1+1",
		ResultText:        "2",
		StdoutCode:        "console.log('out')",
		StderrCode:        "console.error('err')",
		PrintThenSleep:    "console.log('start'); await new Promise(r => setTimeout(r, 1500))",
		PrintSleepSeconds: 1.5,
		ErrorCode:         "function f() { throw new TypeError('boom') }\nf()",
		ErrorName:         "TypeError",
		ErrorValue:        "boom",
		SetState:          "var kh_state = 41",
		GetState:          "kh_state + 1",
		// A synchronous loop: the hard case, it never yields to the event loop.
		Sleep: "console.log('start'); { const end = Date.now() + 60000; while (Date.now() < end) {} }",
		Exit:  "process.exit(1)",
		PrintEnv: func(key string) string {
			return "process.stdout.write(process.env['" + key + "'] ?? '<unset>')"
		},
		PrintCwd: "process.stdout.write(process.cwd())",
	}
}

// TypeScript returns the suite's snippets for a TypeScript kernel: JavaScript's,
// each with type syntax, so a kernel that ran them as plain JavaScript
// would fail.
func TypeScript() LanguageSnippets {
	return LanguageSnippets{
		Language:          "typescript",
		Result:            "(1 + 1) as number",
		ResultText:        "2",
		StdoutCode:        "console.log('out' as string)",
		StderrCode:        "console.error('err' as string)",
		PrintThenSleep:    "console.log('start' as string); await new Promise<void>((r) => setTimeout(r, 1500))",
		PrintSleepSeconds: 1.5,
		ErrorCode:         "function f(msg: string): never { throw new TypeError(msg) }\nf('boom')",
		ErrorName:         "TypeError",
		ErrorValue:        "boom",
		SetState:          "var kh_state: number = 41",
		GetState:          "(kh_state as number) + 1",
		Sleep:             "console.log('start'); { const end: number = Date.now() + 60000; while (Date.now() < end) {} }",
		Exit:              "process.exit(1 as number)",
		PrintEnv: func(key string) string {
			return "process.stdout.write((process.env['" + key + "'] as string | undefined) ?? '<unset>')"
		},
		PrintCwd: "process.stdout.write(process.cwd() as string)",
	}
}

// R returns the suite's snippets for an R kernel: the subprocess transport's
// driver and Jupyter's IRkernel alike. A value's text is R's printed form.
func R() LanguageSnippets {
	return LanguageSnippets{
		Language:   "r",
		Result:     "1+1",
		ResultText: "[1] 2",
		StdoutCode: `cat("out\n")`,
		StderrCode: `cat("err\n", file = stderr())`,
		// IRkernel sends the output of each top-level expression when it ends,
		// so "start" is out before the sleep begins.
		PrintThenSleep:    "cat(\"start\\n\")\nSys.sleep(1.5)",
		PrintSleepSeconds: 1.5,
		ErrorCode:         `f <- function() stop("boom"); f()`,
		ErrorValue:        "boom",
		SetState:          "kh_state <- 41",
		GetState:          `cat(kh_state + 1, "\n", sep = "")`,
		Sleep:             "cat(\"start\\n\")\nSys.sleep(60)",
		// quit() is IRkernel's own shutdown; a dying interpreter is SIGKILL.
		Exit: "tools::pskill(Sys.getpid(), tools::SIGKILL)",
		PrintEnv: func(key string) string {
			return "cat(Sys.getenv('" + key + "', unset = '<unset>'))"
		},
		PrintCwd: "cat(getwd())",
	}
}

// Java returns the suite's snippets for a Java (jshell) kernel. Env vars are
// read with System.getenv: the subprocess transport sets both the process
// environment and the system properties (see core/engine/envvars.go).
func Java() LanguageSnippets {
	return LanguageSnippets{
		Language:          "java",
		Result:            "1+1",
		ResultText:        "2",
		StdoutCode:        `System.out.println("out");`,
		StderrCode:        `System.err.println("err");`,
		PrintThenSleep:    "System.out.println(\"start\");\nThread.sleep(1500);",
		PrintSleepSeconds: 1.5,
		ErrorCode:         "void f() { throw new IllegalStateException(\"boom\"); }\nf();",
		ErrorName:         "java.lang.IllegalStateException",
		ErrorValue:        "boom",
		SetState:          "int khState = 41;",
		GetState:          "khState + 1",
		Sleep:             "System.out.println(\"start\");\nThread.sleep(60000);",
		Exit:              "System.exit(1);",
		PrintEnv: func(key string) string {
			return `System.out.print(System.getenv("` + key + `") == null ? "<unset>" : System.getenv("` + key + `"));`
		},
		PrintCwd: `System.out.print(System.getProperty("user.dir"));`,
	}
}
