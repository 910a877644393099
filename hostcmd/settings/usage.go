package settings

import (
	"flag"
	"fmt"
	"io"
	"strings"
)

// printUsage is the -help of the settings: every flag with its environment
// variable and default, and the precedence of the three sources; then the
// transport plugins whose settings are missing from it, and why.
func printUsage(w io.Writer, fs *flag.FlagSet, name string, plugins *pluginCatalog) {
	fmt.Fprintf(w, "Usage: %s [flags]\n\n", name)
	fmt.Fprintf(w, `Every setting is a flag, an environment variable (%sNAME: -default-cwd is
%s) and a key of the TOML config file named by -config or
%s (the flag name: default-cwd = "/home/user", queue-depth = 8,
keepalive = "5s"). Precedence: command-line flag > environment variable >
config file > default. An empty variable counts as unset.

Settings:
`, envPrefix, EnvVar("default-cwd"), EnvVar(configFlag))
	fs.VisitAll(func(f *flag.Flag) {
		typ, usage := flag.UnquoteUsage(f)
		fmt.Fprintf(w, "  -%s", f.Name)
		if typ != "" {
			fmt.Fprintf(w, " %s", typ)
		}
		fmt.Fprintf(w, "\n    \t%s\n    \t%s", strings.ReplaceAll(usage, "\n", "\n    \t"), EnvVar(f.Name))
		if f.DefValue != "" {
			fmt.Fprintf(w, ", default %q", f.DefValue)
		}
		fmt.Fprintln(w)
	})
	if note := plugins.missing(); note != "" {
		fmt.Fprintf(w, "\n%s\n", note)
	}
}
