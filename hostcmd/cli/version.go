package cli

import (
	"fmt"
	"runtime"

	"github.com/kernelhost/kernelhost/hostcmd/internal/buildinfo"
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
	fmt.Fprintf(s.Stdout, "kernelhost %s\ncommit %s\ngo     %s %s/%s\n", buildinfo.Version(), buildinfo.Commit(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return exitOK
}
