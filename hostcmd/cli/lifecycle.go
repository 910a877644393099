package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/kernelhost/kernelhost/hostcmd/server"
	"github.com/kernelhost/kernelhost/hostcmd/settings"
)

// shutdownTimeout bounds the graceful shutdown after SIGINT or SIGTERM.
const shutdownTimeout = 30 * time.Second

// hostCommand is what differs between the commands that run a whole host
// (serve, mcp); runHost does the rest, so both load settings, start, stop
// on a signal and shut down the same way.
type hostCommand struct {
	name  string // "serve": also names the command in messages
	start func(context.Context, settings.Config) (*server.Host, error)
	// serve runs the started host until ctx ends (SIGINT or SIGTERM) or
	// the command has nothing left to serve; it returns why it stopped,
	// for the log.
	serve func(ctx context.Context, host *server.Host, cfg settings.Config) (reason string)
}

// runHost loads the settings from args and the environment, starts the
// host, runs c.serve and shuts the host down within shutdownTimeout.
func runHost(s Streams, args []string, c hostCommand) int {
	cfg, err := settings.Load("kernelhost "+c.name, args, s.Getenv, s.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		fmt.Fprintf(s.Stderr, "kernelhost %s: %v (kernelhost help %s lists the settings)\n", c.name, err, c.name)
		return exitUsage
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	host, err := c.start(ctx, cfg)
	if err != nil && ctx.Err() != nil {
		// SIGINT or SIGTERM while starting: what was asked for, not a failure.
		cfg.Logger.Info("stopped during start-up", "err", err)
		return exitOK
	}
	if err != nil {
		cfg.Logger.Error("start failed", "err", err)
		return exitFail
	}
	reason := c.serve(ctx, host, cfg)
	stop() // a second signal kills the process the default way
	cfg.Logger.Info("shutting down", "reason", reason)
	shutdownCtx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	if err := host.Shutdown(shutdownCtx); err != nil {
		cfg.Logger.Error("shutdown", "err", err)
		return exitFail
	}
	return exitOK
}
