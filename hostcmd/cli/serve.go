package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/kernelhost/kernelhost/hostcmd/server"
)

// shutdownTimeout bounds the graceful shutdown after SIGINT or SIGTERM.
const shutdownTimeout = 30 * time.Second

// serve runs the host until SIGINT or SIGTERM. SIGHUP reloads the env-var
// policies. Its settings are server.Load's. Under systemd it reports
// readiness and shutdown (systemd.go).
func serve(s Streams, args []string) int {
	sd := takeNotifySocket()
	cfg, err := server.Load("kernelhost serve", args, s.Getenv, s.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		fmt.Fprintf(s.Stderr, "kernelhost serve: %v (kernelhost help serve lists the settings)\n", err)
		return exitUsage
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	host, err := server.Start(ctx, cfg)
	if err != nil && ctx.Err() != nil {
		// SIGINT or SIGTERM while starting: what was asked for, not a failure.
		cfg.Logger.Info("stopped during start-up", "err", err)
		return exitOK
	}
	if err != nil {
		cfg.Logger.Error("start failed", "err", err)
		return exitFail
	}
	notify := func(state string) {
		if err := sd.notify(state); err != nil {
			cfg.Logger.Warn("cannot tell systemd", "err", err)
		}
	}
	notify("READY=1\nSTATUS=serving the API on " + host.Addr())
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	reloads := make(chan struct{})
	go func() {
		defer close(reloads)
		reloadOnHUP(host, hup, cfg.Logger, notify)
	}()
	<-ctx.Done()
	signal.Stop(hup)
	close(hup)
	stop() // a second signal kills the process the default way
	cfg.Logger.Info("shutting down")
	notify("STOPPING=1\nSTATUS=shutting down")
	shutdownCtx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	err = host.Shutdown(shutdownCtx)
	<-reloads
	if err != nil {
		cfg.Logger.Error("shutdown", "err", err)
		return exitFail
	}
	return exitOK
}

// reloadOnHUP reloads the policies at every SIGHUP until hup is closed. A
// failed reload leaves the policies in use as they were. Each outcome is
// also the service's status line under systemd.
func reloadOnHUP(host *server.Host, hup <-chan os.Signal, log *slog.Logger, notify func(state string)) {
	for range hup {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		modules, err := host.ReloadPolicies(ctx)
		cancel()
		switch {
		case errors.Is(err, server.ErrNoPolicies):
			log.Warn("SIGHUP: nothing to reload", "err", err)
		case err != nil:
			log.Error("policy reload failed; the previous policies stay in use", "err", err)
			notify("STATUS=serving the API on " + host.Addr() + "; the last policy reload failed (see the log)")
		default:
			log.Info("policies reloaded", "modules", modules)
			notify(fmt.Sprintf("STATUS=serving the API on %s; policies reloaded: %v", host.Addr(), modules))
		}
	}
}
