package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/kernelhost/kernelhost/hostcmd/server"
	"github.com/kernelhost/kernelhost/hostcmd/settings"
)

// pluginStartTimeout bounds each plugin's start, handshake and description.
const pluginStartTimeout = 30 * time.Second

// pluginsList starts every transport plugin in the plugin directory with the
// settings serve would give it (the same flags, variables and config file),
// and prints what each says it is. A plugin that fails is listed with its
// error; the status is 1 only when there is no plugin to list.
func pluginsList(s Streams, args []string) int {
	cfg, err := settings.Load("kernelhost plugins list", args, s.Getenv, s.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(s.Stderr, "\nplugins list takes serve's settings: it looks in plugin-dir and passes the plugins what serve passes them.")
		return exitOK
	}
	if err != nil {
		fmt.Fprintf(s.Stderr, "kernelhost plugins list: %v (kernelhost help plugins list lists the settings)\n", err)
		return exitUsage
	}
	found, err := server.DiscoverPlugins(context.Background(), cfg, pluginStartTimeout)
	if err != nil {
		fmt.Fprintln(s.Stderr, "kernelhost plugins list:", err)
		return exitFail
	}
	fmt.Fprintf(s.Stdout, "plugin directory: %s\n", cfg.PluginDir)
	if len(found) == 0 {
		fmt.Fprintf(s.Stderr, "kernelhost plugins list: no %s* executables in %s (make plugins builds them into bin/plugins)\n", settings.PluginPrefix, cfg.PluginDir)
		return exitFail
	}
	fmt.Fprintln(s.Stdout)
	tw := tabwriter.NewWriter(s.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TRANSPORT\tNAME\tVERSION\tLANGUAGES\tSTATUS")
	var failed []server.DiscoveredPlugin
	for _, p := range found {
		if p.Err != nil {
			failed = append(failed, p)
			fmt.Fprintf(tw, "%s\t-\t-\t-\tfailed (below)\n", p.Transport)
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\tok\n", p.Transport, p.Info.Name, p.Info.Version, strings.Join(p.Info.Languages, ","))
	}
	tw.Flush()
	for _, p := range failed {
		fmt.Fprintf(s.Stdout, "\n%s: %v\n", p.Transport, p.Err)
	}
	return exitOK
}
