// Command kernelhost serves the code-interpreter HTTP API (wire-compatible
// with E2B's code-interpreter SDKs) on local interpreter processes. Every
// setting is a flag and a KERNELHOST_* environment variable; see -help.
package main

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
	<-ctx.Done()
	stop() // a second signal kills the process the default way
	cfg.Logger.Info("shutting down")
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := host.Shutdown(shutdownCtx); err != nil {
		cfg.Logger.Error("shutdown", "err", err)
		os.Exit(1)
	}
}
