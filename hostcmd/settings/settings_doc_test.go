package settings_test

import (
	"bufio"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kernelhost/kernelhost/hostcmd/settings"
)

// docs/operating.md's settings table names every setting of the table in
// hostcmd/settings/settings.go and of the transport plugins (their
// settings.go), each once, with its variable and its default: the test
// fails when one of them drifts from the other.
func TestOperatingDocSettings(t *testing.T) {
	t.Parallel()
	defaults, err := settings.SettingDefaults(pluginDir)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open("../../docs/operating.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// Defaults the doc describes rather than states: they depend on the
	// machine (the executable's directory, XDG_DATA_HOME).
	computed := map[string]bool{"workspace": true, "plugin-dir": true}
	code := regexp.MustCompile("`([^`]*)`")
	seen := map[string]bool{}
	sc := bufio.NewScanner(f)
	inSettings := false
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "## ") {
			inSettings = line == "## Settings"
		}
		if !inSettings || !strings.HasPrefix(line, "| `-") {
			continue
		}
		cells := strings.Split(line, " | ")
		names, vars, _ := strings.Cut(cells[0], " / ")
		var flags []string
		for _, m := range code.FindAllStringSubmatch(names, -1) {
			flags = append(flags, strings.TrimPrefix(m[1], "-"))
		}
		// "KERNELHOST_PYTHON`, `_NODE`": a variable after the first may give
		// only its end, to be put after a part of the first.
		var first string
		for i, m := range code.FindAllStringSubmatch(vars, -1) {
			v := m[1]
			if i == 0 {
				first = v
			} else if i < len(flags) {
				v = expandVar(first, v, settings.EnvVar(flags[i]))
			}
			if i >= len(flags) || v != settings.EnvVar(flags[i]) {
				t.Errorf("operating.md: %q: variable %s does not go with the flags %v", cells[0], v, flags)
			}
		}
		docDefaults := code.FindAllStringSubmatch(cells[1], -1)
		for i, name := range flags {
			def, ok := defaults[name]
			if !ok {
				t.Errorf("operating.md lists -%s, which is no setting", name)
				continue
			}
			if seen[name] {
				t.Errorf("operating.md lists -%s twice", name)
			}
			seen[name] = true
			if computed[name] {
				continue
			}
			doc := "" // "—": no default
			switch {
			case len(docDefaults) == 1:
				doc = docDefaults[0][1]
			case i < len(docDefaults):
				doc = docDefaults[i][1]
			}
			if err := sameDefault(def, doc); err != nil {
				t.Errorf("operating.md: -%s: the default is %q there, %v in the settings table: %v", name, doc, def, err)
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	for name := range defaults {
		if !seen[name] {
			t.Errorf("the setting -%s is missing from docs/operating.md's table", name)
		}
	}
}

// sameDefault says whether doc, the default as the doc writes it, is def.
func sameDefault(def any, doc string) error {
	var got any
	var err error
	switch def.(type) {
	case string:
		got = doc
	case time.Duration:
		got, err = time.ParseDuration(doc)
	case int:
		got, err = strconv.Atoi(doc)
	case int64:
		got, err = strconv.ParseInt(doc, 10, 64)
	case bool:
		got, err = strconv.ParseBool(doc)
	}
	if err != nil {
		return err
	}
	if got != def {
		return fmt.Errorf("differs")
	}
	return nil
}

// expandVar is the variable the abbreviation end ("_NODE") stands for after
// first ("KERNELHOST_PYTHON"), if one of first's prefixes makes want of it.
func expandVar(first, end, want string) string {
	if !strings.HasPrefix(end, "_") {
		return end
	}
	for cut := len(first); cut > 0; cut = strings.LastIndex(first[:cut], "_") {
		if first[:cut]+end == want {
			return want
		}
	}
	return end
}
