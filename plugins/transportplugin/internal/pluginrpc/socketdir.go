package pluginrpc

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Where the plugins' sockets live. go-plugin makes a private (0700)
// directory for each plugin it starts, for its socket and the kernel socket
// this package adds, and removes it when the plugin is stopped. A host
// killed with SIGKILL cannot: its directories stayed in $TMPDIR, one per
// plugin, for good. So each host process puts them in a directory of its
// own, host-<pid>, in one of its user's, kernelhost-<uid>, and a starting
// host removes the host-<pid> directories of processes that are gone.
//
// Launch holds the directory while its plugin may run and Close lets it go;
// the last one out removes it, so a host that stops cleanly leaves nothing.
var socketDirs struct {
	sync.Mutex
	users int    // supervisors holding dir
	dir   string // this process's host-<pid>, "" for go-plugin's default
	swept bool   // the dead hosts' directories were removed
}

// holdSocketDir returns the directory the next plugin's socket directory
// goes in ("" for go-plugin's default, $TMPDIR, if this process's cannot be
// made: the plugin still starts, and the reason is logged). Each call is
// ended by one releaseSocketDir.
func holdSocketDir(log *slog.Logger) string {
	socketDirs.Lock()
	defer socketDirs.Unlock()
	socketDirs.users++
	if socketDirs.users > 1 {
		return socketDirs.dir
	}
	base := filepath.Join(os.TempDir(), "kernelhost-"+strconv.Itoa(os.Getuid()))
	if err := privateDir(base); err != nil {
		log.Warn("plugin sockets go in the temporary directory: a host killed with SIGKILL leaves them there", "error", err)
		socketDirs.dir = ""
		return ""
	}
	if !socketDirs.swept {
		socketDirs.swept = true
		sweepDeadHosts(base, log)
	}
	dir := filepath.Join(base, "host-"+strconv.Itoa(os.Getpid()))
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		log.Warn("plugin sockets go in the temporary directory: a host killed with SIGKILL leaves them there", "error", err)
		dir = ""
	}
	socketDirs.dir = dir
	return dir
}

// releaseSocketDir ends one holdSocketDir; the last removes the directory,
// empty by then (go-plugin removed its plugins' when it stopped them).
func releaseSocketDir() {
	socketDirs.Lock()
	defer socketDirs.Unlock()
	socketDirs.users--
	if socketDirs.users == 0 && socketDirs.dir != "" {
		_ = os.Remove(socketDirs.dir)
		socketDirs.dir = ""
	}
}

// privateDir makes dir (0700) if it is missing and checks that it is a
// directory of this user's that no one else can write: it is in a shared
// temporary directory, where another user could have made it first.
func privateDir(dir string) error {
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case !fi.IsDir():
		return fmt.Errorf("%s is not a directory", dir)
	case !ok || int(st.Uid) != os.Getuid():
		return fmt.Errorf("%s belongs to another user", dir)
	case fi.Mode().Perm()&0o077 != 0:
		return fmt.Errorf("%s is open to other users (mode %v)", dir, fi.Mode().Perm())
	}
	return nil
}

// sweepDeadHosts removes base's host-<pid> directories whose process is
// gone and whose plugins answer on no socket. A pid reused since by another
// process keeps its directory until that one is gone too; the sockets keep
// that of a host alive in another PID namespace that shares this /tmp.
func sweepDeadHosts(base string, log *slog.Logger) {
	entries, err := os.ReadDir(base)
	if err != nil {
		return
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(strings.TrimPrefix(e.Name(), "host-"))
		if !e.IsDir() || !strings.HasPrefix(e.Name(), "host-") || err != nil || pid <= 0 || pid == os.Getpid() {
			continue
		}
		if err := syscall.Kill(pid, 0); err == nil || errors.Is(err, syscall.EPERM) {
			continue // alive (EPERM: alive, another user's)
		}
		dir := filepath.Join(base, e.Name())
		if servesASocket(dir) {
			continue
		}
		if err := os.RemoveAll(dir); err != nil {
			log.Warn("could not remove the plugin sockets of a host that is gone", "dir", e.Name(), "error", err)
		}
	}
}

// servesASocket reports whether a plugin's kernel socket in hostDir takes
// a connection (closed at once, before its token: the plugin drops it).
func servesASocket(hostDir string) bool {
	socks, _ := filepath.Glob(filepath.Join(hostDir, "plugin-dir*", "kernels-*.sock"))
	for _, sock := range socks {
		if c, err := net.DialTimeout("unix", sock, time.Second); err == nil {
			c.Close()
			return true
		}
	}
	return false
}
