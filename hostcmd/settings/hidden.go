package settings

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/kernelhost/kernelhost/plugins/policy"
	"github.com/kernelhost/kernelhost/plugins/transportplugin/pluginhost"
)

// hiddenPathsSetting is the host setting a transport plugin takes to hide
// the host's own files from the code it runs (the subprocess transport's
// sandboxes): their paths, one a line.
const hiddenPathsSetting = "host-private-paths"

// privatePaths are the host's own files, which no context may read: the
// token files (the access token's, and each file setting of a plugin's,
// as jupyter-token-file), the config file, the env file, the policies'
// list and config files; and the config file's directory when it is
// kernelhost's own (/etc/kernelhost, where the shipped unit keeps its
// EnvironmentFile of secrets). specs are the plugin's settings. Relative
// paths are made absolute; the plugin leaves out those that do not exist.
func (c Config) PrivatePaths(specs map[string]pluginhost.SettingSpec) []string {
	paths := []string{c.accessTokenFile, c.configFile, c.envFile}
	if c.configFile != "" && filepath.Base(filepath.Dir(c.configFile)) == "kernelhost" {
		paths = append(paths, filepath.Dir(c.configFile))
	}
	paths = append(paths, c.settingFiles...) // read by Load: any plugin's
	for name, v := range c.TransportSettings {
		if specs[name].Type == pluginhost.TypeFile { // set in code, read for the launch
			paths = append(paths, v)
		}
	}
	paths = append(paths, policyFiles(c.Policies)...)
	var out []string
	for _, p := range paths {
		if abs, err := filepath.Abs(p); p != "" && err == nil && !slices.Contains(out, abs) {
			out = append(out, abs)
		}
	}
	return out
}

// filePaths are the paths given to the file settings of fs (any plugin's
// token file), which values replaces by what they hold.
func (cat *pluginCatalog) filePaths(fs *flag.FlagSet) []string {
	var out []string
	fs.Visit(func(f *flag.Flag) {
		if s, ok := cat.specs[f.Name]; ok && s.Type == pluginhost.TypeFile && f.Value.String() != "" {
			out = append(out, f.Value.String())
		}
	})
	return out
}

// policyFiles are the files of the -policies setting that may hold
// secrets: the list file of "@FILE", and each module's config file (of
// the modules the list names now).
func policyFiles(setting string) []string {
	var out []string
	if file, ok := strings.CutPrefix(setting, "@"); ok {
		out = append(out, file)
		setting, _ = PolicyList(setting) // unreadable: the policies' load says why
	}
	// Without a variable of its own, each module's config is a file.
	modules, _ := policy.ParseList(setting, func(string) (string, bool) { return "", false })
	for _, m := range modules {
		out = append(out, m.ConfigFile)
	}
	return out
}

// PolicyList is the -policies setting as a list of modules separated by
// commas: setting itself, or for "@FILE" what FILE lists.
func PolicyList(setting string) (string, error) {
	file, ok := strings.CutPrefix(setting, "@")
	if !ok {
		return setting, nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("%s: read the policy list: %w", EnvVar("policies"), err)
	}
	return listFile(string(b), filepath.Dir(file)), nil
}

// listFile turns a policy list file into a KERNELHOST_POLICIES value: paths
// separated by commas or newlines, # comments, relative paths taken from
// the file's directory.
func listFile(text, dir string) string {
	var paths []string
	for _, l := range strings.Split(text, "\n") {
		l, _, _ = strings.Cut(l, "#")
		for _, p := range strings.Split(l, ",") {
			if p = strings.TrimSpace(p); p == "" {
				continue
			}
			if !filepath.IsAbs(p) {
				p = filepath.Join(dir, p)
			}
			paths = append(paths, p)
		}
	}
	return strings.Join(paths, ",")
}
