package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/sys/unix"

	"github.com/kernelhost/kernelhost/hostcmd/server"
	"github.com/kernelhost/kernelhost/hostcmd/settings"
)

const mcpAbout = `kernelhost mcp is an MCP server on stdin and stdout, for an MCP client that
starts it ({"command": "kernelhost", "args": ["mcp"]}): its tools run code in a
whole host in this process, with the engine, transport plugin, env-var policies,
settings and config file of kernelhost serve, but no HTTP listener. Logs go to
stderr, never stdout. It ends when the client closes stdin, or on SIGINT or
SIGTERM. docs/mcp.md shows the tools; serve offers the same ones on /mcp.

`

// mcpStdio serves the MCP tools (hostcmd/mcpserver) on stdin and stdout
// until the client closes stdin or a signal comes.
func mcpStdio(s Streams, args []string) int {
	if slices.ContainsFunc(args, func(a string) bool { return a == "-h" || a == "-help" || a == "--help" }) {
		fmt.Fprint(s.Stderr, mcpAbout)
	}
	var out io.Writer
	restore := func() {}
	defer func() { restore() }()
	return runHost(s, args, hostCommand{name: "mcp",
		start: func(ctx context.Context, cfg settings.Config) (*server.Host, error) {
			// After the settings (help and their errors go to s.Stdout or
			// s.Stderr as given), before the plugins inherit fd 1.
			w, undo, err := claimStdout(s)
			if err != nil {
				return nil, err
			}
			out, restore = w, undo
			return server.StartInProcess(ctx, cfg)
		},
		serve: func(ctx context.Context, host *server.Host, cfg settings.Config) string {
			transport := &mcp.IOTransport{Reader: io.NopCloser(s.Stdin), Writer: nopWriteCloser{out}, MaxLineLength: int(cfg.MaxBodyBytes)}
			return runReason(ctx, host.MCPServer().Run(ctx, transport))
		}})
}

// runReason says why the MCP session ended, for the log.
func runReason(ctx context.Context, err error) string {
	switch {
	case ctx.Err() != nil:
		return "signal"
	case err == nil || errors.Is(err, io.EOF):
		return "the client closed stdin"
	}
	return err.Error()
}

// claimStdout reserves the process's stdout for MCP messages: when s.Stdout
// is the real one, fd 1 is moved to a new descriptor that only the MCP
// transport writes, and fd 1 becomes stderr, so a stray print of any
// library (or of a child that inherits fd 1) lands in the log instead of
// corrupting the client's stream.
func claimStdout(s Streams) (io.Writer, func(), error) {
	if s.Stdout != os.Stdout {
		return s.Stdout, func() {}, nil
	}
	fd, err := unix.Dup(1)
	if err != nil {
		return nil, nil, fmt.Errorf("reserve stdout: %w", err)
	}
	unix.CloseOnExec(fd)
	if err := unix.Dup2(2, 1); err != nil {
		_ = unix.Close(fd)
		return nil, nil, fmt.Errorf("reserve stdout: %w", err)
	}
	out := os.NewFile(uintptr(fd), "mcp-stdout")
	return out, func() { _ = out.Close() }, nil
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }
