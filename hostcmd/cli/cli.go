// Package cli is the kernelhost command line: one subcommand per file, each
// with its own flag.FlagSet. Main dispatches; hostcmd's main only calls it.
package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

// Exit statuses shared by every command.
const (
	exitOK    = 0
	exitFail  = 1 // the command ran and failed (policy eval: a rejection)
	exitUsage = 2 // bad arguments, or (policy eval) a module that does not work
)

// Streams are the process's standard streams and environment, os's outside
// tests.
type Streams struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	Getenv         func(string) string
}

// OS are the process's own streams.
func OS() Streams {
	return Streams{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv}
}

// command is one subcommand. run gets the arguments after its name; with
// "-help" it prints its usage to s.Stderr and returns exitOK.
type command struct {
	name, args, summary string
	run                 func(s Streams, args []string) int
}

// commands in the order help lists them. A var initialised in init: help's
// run refers to the table.
var commands []command

func init() {
	commands = []command{
		{"serve", "[flags]", "serve the code-interpreter HTTP API (every setting: kernelhost help serve)", serve},
		{"mcp", "[flags]", "serve the MCP tools on stdin/stdout, for an MCP client that starts it", mcpStdio},
		{"plugins list", "[flags]", "start each transport plugin, print its name, version and languages", pluginsList},
		{"policy eval", "[-config VALUE] MODULE.wasm < input.json", "run one env-var policy module on one input, print its decision", policyEval},
		{"version", "", "print the version, the commit and the Go version", version},
		{"help", "[command]", "print this, or a command's usage", help},
	}
}

// Main runs the command line args (without the program name) and returns
// the exit status.
func Main(args []string, s Streams) int {
	if len(args) == 0 {
		usage(s.Stderr)
		return exitUsage
	}
	cmd, rest, err := lookup(args)
	if err != nil {
		fmt.Fprintf(s.Stderr, "kernelhost: %v\n\n", err)
		usage(s.Stderr)
		return exitUsage
	}
	return cmd.run(s, rest)
}

// lookup finds the command args start with: one word, or a group and its
// subcommand ("plugins list").
func lookup(args []string) (command, []string, error) {
	for _, c := range commands {
		words := strings.Fields(c.name)
		if len(args) >= len(words) && strings.Join(args[:len(words)], " ") == c.name {
			return c, args[len(words):], nil
		}
	}
	switch args[0] {
	case "-h", "-help", "--help":
		return command{run: help}, nil, nil
	}
	for _, c := range commands {
		if group, _, ok := strings.Cut(c.name, " "); ok && group == args[0] {
			return command{}, nil, fmt.Errorf("%s: want a subcommand: %s", args[0], c.name)
		}
	}
	return command{}, nil, fmt.Errorf("unknown command %q", args[0])
}

func usage(w io.Writer) {
	fmt.Fprint(w, `kernelhost runs code in stateful interpreter sessions behind the HTTP API of
the E2B code-interpreter SDKs.

Usage:
  kernelhost <command> [arguments]

Commands:
`)
	for _, c := range commands {
		fmt.Fprintf(w, "  %-13s %s\n", c.name, c.summary)
	}
	fmt.Fprint(w, "\nkernelhost help <command> prints a command's usage.\n")
}

// help prints the usage, or a command's (its -help, on stdout).
func help(s Streams, args []string) int {
	if len(args) == 0 {
		usage(s.Stdout)
		return exitOK
	}
	cmd, rest, err := lookup(args)
	if err != nil || len(rest) > 0 {
		fmt.Fprintf(s.Stderr, "kernelhost help: unknown command %q\n", strings.Join(args, " "))
		return exitUsage
	}
	if cmd.name == "help" {
		usage(s.Stdout)
		return exitOK
	}
	s.Stderr = s.Stdout
	return cmd.run(s, []string{"-help"})
}

// newFlags is a subcommand's flag set; its usage line shows the command's
// arguments, then its flags.
func newFlags(s Streams, name, args, about string) *flag.FlagSet {
	fs := flag.NewFlagSet("kernelhost "+name, flag.ContinueOnError)
	fs.SetOutput(s.Stderr)
	fs.Usage = func() {
		fmt.Fprintf(s.Stderr, "Usage: kernelhost %s %s\n\n%s\n", name, args, about)
		var n int
		fs.VisitAll(func(*flag.Flag) { n++ })
		if n > 0 {
			fmt.Fprintln(s.Stderr, "\nFlags:")
			fs.PrintDefaults()
		}
	}
	return fs
}

// parseStatus is the exit status of a failed fs.Parse: 0 for -help.
func parseStatus(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	return exitUsage
}
