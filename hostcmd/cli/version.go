package cli

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Set at build time by make build and make release:
//
//	-ldflags "-X github.com/kernelhost/kernelhost/hostcmd/cli.Version=v1.2.3
//	          -X github.com/kernelhost/kernelhost/hostcmd/cli.Commit=abcdef"
var (
	Version = "dev"
	Commit  = "" // when empty, the revision go build stamped, if any
)

func version(s Streams, args []string) int {
	fs := newFlags(s, "version", "", "Prints the version, the commit and the Go version it was built with.")
	if err := fs.Parse(args); err != nil {
		return parseStatus(err)
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(s.Stderr, "kernelhost version: unexpected arguments %q\n", fs.Args())
		return exitUsage
	}
	fmt.Fprintf(s.Stdout, "kernelhost %s\ncommit %s\ngo     %s %s/%s\n", Version, commit(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return exitOK
}

// commit is Commit, else the VCS revision go build recorded (a plain
// `go build` in a git checkout does), else "unknown".
func commit() string {
	if Commit != "" {
		return Commit
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	var rev, dirty string
	for _, s := range info.Settings {
		switch {
		case s.Key == "vcs.revision":
			rev = s.Value
		case s.Key == "vcs.modified" && s.Value == "true":
			dirty = "-dirty"
		}
	}
	if rev == "" {
		return "unknown"
	}
	return rev + dirty
}
