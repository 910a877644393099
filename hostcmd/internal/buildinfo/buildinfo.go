// Package buildinfo owns the version and commit of the kernelhost binary:
// what `kernelhost version` prints and what the MCP server tells clients.
//
// make build and make release stamp them with the linker:
//
//	-ldflags "-X github.com/kernelhost/kernelhost/hostcmd/internal/buildinfo.version=v1.2.3
//	          -X github.com/kernelhost/kernelhost/hostcmd/internal/buildinfo.commit=abcdef"
//
// The linker's -X can only set a package-level string variable, so the
// two stay variables; they are unexported so that nothing but the linker
// sets them, and read through Version and Commit.
package buildinfo

import "runtime/debug"

var (
	version = "dev"
	commit  = "" // when empty, the revision go build stamped, if any
)

// Version is the version make stamped, "dev" for a plain go build.
func Version() string { return version }

// Commit is the commit make stamped, else the VCS revision go build
// recorded (a plain `go build` in a git checkout does), else "unknown".
func Commit() string {
	if commit != "" {
		return commit
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
