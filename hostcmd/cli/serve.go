package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/kernelhost/kernelhost/hostcmd/server"
	"github.com/kernelhost/kernelhost/hostcmd/settings"
)

// serve runs the host until SIGINT or SIGTERM. SIGHUP reloads the env-var
// policies. Its settings are settings.Load's. Under systemd it reports
// readiness and shutdown (systemd.go).
func serve(s Streams, args []string) int {
	sd := takeNotifySocket()
	return runHost(s, args, hostCommand{name: "serve", start: server.Start,
		serve: func(ctx context.Context, host *server.Host, cfg settings.Config) string {
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
				reloadOnHUP(ctx, host, hup, cfg.Logger, notify)
			}()
			<-ctx.Done()
			signal.Stop(hup)
			close(hup)
			<-reloads
			notify("STOPPING=1\nSTATUS=shutting down")
			return "signal"
		}})
}

// reloadOnHUP reloads the policies at every SIGHUP until hup is closed. A
// failed reload leaves the policies in use as they were. Each outcome is
// also the service's status line under systemd. The end of serveCtx (the
// shutdown's signal) cancels a reload under way, so the shutdown does not
// wait for it.
func reloadOnHUP(serveCtx context.Context, host *server.Host, hup <-chan os.Signal, log *slog.Logger, notify func(state string)) {
	for range hup {
		ctx, cancel := context.WithTimeout(serveCtx, time.Minute)
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
