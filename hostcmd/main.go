// Command kernelhost serves the code-interpreter HTTP API (wire-compatible
// with E2B's code-interpreter SDKs) on kernels from a transport plugin (local
// interpreter processes by default). Every setting is a flag and a
// KERNELHOST_* environment variable; see -help. SIGHUP reloads the env-var
// policies; SIGINT or SIGTERM shut down.
package main

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

func main() {
	cfg, err := server.Load("kernelhost", os.Args[1:], os.Getenv, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "kernelhost:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	host, err := server.Start(ctx, cfg)
	if err != nil {
		cfg.Logger.Error("start failed", "err", err)
		os.Exit(1)
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go reloadOnHUP(host, hup, cfg.Logger)
	<-ctx.Done()
	signal.Stop(hup)
	stop() // a second signal kills the process the default way
	cfg.Logger.Info("shutting down")
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := host.Shutdown(shutdownCtx); err != nil {
		cfg.Logger.Error("shutdown", "err", err)
		os.Exit(1)
	}
}

// reloadOnHUP reloads the policies at every SIGHUP. A failed reload leaves
// the policies in use as they were.
func reloadOnHUP(host *server.Host, hup <-chan os.Signal, log *slog.Logger) {
	for range hup {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		modules, err := host.ReloadPolicies(ctx)
		cancel()
		switch {
		case errors.Is(err, server.ErrNoPolicies):
			log.Warn("SIGHUP: nothing to reload", "err", err)
		case err != nil:
			log.Error("policy reload failed; the previous policies stay in use", "err", err)
		default:
			log.Info("policies reloaded", "modules", modules)
		}
	}
}
