package cli

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// HideSecrets keeps the host's secrets from other processes of its user
// (the interpreters, where they are not sandboxed): the process is made
// non-dumpable, which closes its /proc/<pid>/mem, environ and the like to
// them, and the tokens given in the environment are wiped from the initial
// environment block, which /proc/<pid>/environ shows even to root. The
// process keeps them: its environment holds copies. Call it first in main.
func HideSecrets() {
	var wipe []string
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		if isSecretVar(k) && v != "" {
			os.Setenv(k, strings.Clone(v)) // a copy outside the block, for Load
			wipe = append(wipe, k)
		}
	}
	if len(wipe) > 0 {
		_ = wipeEnvBlock(wipe)
	}
	// Last: a non-dumpable process's /proc/self/mem belongs to root, and an
	// unprivileged host could not open it to wipe the block any more.
	_ = unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
}

// isSecretVar says whether the host's environment variable k holds a secret.
func isSecretVar(k string) bool {
	return strings.HasPrefix(k, "KERNELHOST_") && strings.HasSuffix(k, "_TOKEN")
}

// wipeEnvBlock overwrites the values of keys in the process's initial
// environment block (/proc/self/stat's env_start to env_end) with zeros.
func wipeEnvBlock(keys []string) error {
	stat, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return err
	}
	// After the command name: field 3 (state) on; env_start and env_end are
	// fields 50 and 51.
	f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	if len(f) < 49 {
		return fmt.Errorf("/proc/self/stat has %d fields", len(f)+2)
	}
	start, err1 := strconv.ParseInt(f[47], 10, 64)
	end, err2 := strconv.ParseInt(f[48], 10, 64)
	if err1 != nil || err2 != nil || end <= start {
		return fmt.Errorf("/proc/self/stat: env_start %q, env_end %q", f[47], f[48])
	}
	mem, err := os.OpenFile("/proc/self/mem", os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer mem.Close()
	block := make([]byte, end-start)
	if _, err := mem.ReadAt(block, start); err != nil {
		return err
	}
	for off := 0; off < len(block); {
		n := bytes.IndexByte(block[off:], 0)
		if n < 0 {
			n = len(block) - off
		}
		entry := block[off : off+n]
		for _, k := range keys {
			if bytes.HasPrefix(entry, []byte(k+"=")) {
				value := int64(off + len(k) + 1)
				if _, err := mem.WriteAt(make([]byte, n-len(k)-1), start+value); err != nil {
					return err
				}
			}
		}
		off += n + 1
	}
	return nil
}
