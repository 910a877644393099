// Package mcpserver is kernelhost's Model Context Protocol server: the tool
// set (run_code and the context tools) that any MCP client uses to run code
// in the host's contexts. It knows only the engine; the transports that
// carry it are elsewhere: stdio in `kernelhost mcp` (hostcmd/cli/mcp.go),
// streamable HTTP on /mcp (hostcmd/httpapi/mcp.go), both over one *mcp.Server
// from New. docs/mcp.md shows the tools; docs/RATIONALE.md ("MCP") says why
// the official Go SDK.
package mcpserver

import (
	"log/slog"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/kernelhost/kernelhost/core/engine"
)

// Options configure the server.
type Options struct {
	Engine  *engine.Engine // required
	Logger  *slog.Logger   // default: discard
	Version string         // reported to clients in serverInfo
	// Refused, if set, is told of every execution the engine refused (the
	// host's metrics count them as it counts /execute's).
	Refused func(error)
}

// instructions tell the model what the server is for, in the initialize
// result; languages are the transport's.
func instructions(languages []string) string {
	return `kernelhost runs code in stateful interpreter sessions ("contexts") on this machine, in ` +
		orList(languages, "and") + ` (python with matplotlib, pandas and numpy when installed). ` +
		`Variables, imports and files persist across run_code calls in one context. ` +
		`Without a context_id, run_code uses the language's default context, shared by every client of the host; ` +
		`create_context gives you a fresh one of your own. Charts drawn with matplotlib come back as images.`
}

// New returns the MCP server with kernelhost's tools, ready to Run on a
// transport or to serve over HTTP (mcp.NewStreamableHTTPHandler).
func New(opts Options) *mcp.Server {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Version == "" {
		opts.Version = "dev"
	}
	languages := opts.Engine.Transport().Info().Languages
	s := mcp.NewServer(&mcp.Implementation{Name: "kernelhost", Title: "kernelhost code interpreter", Version: opts.Version},
		&mcp.ServerOptions{Instructions: instructions(languages), Logger: opts.Logger})
	t := &tools{opts: opts, engine: opts.Engine, languages: languages}
	t.register(s)
	return s
}
