package subprocess

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Python compiles driver.py (1,000 lines) on every start when it gets it
// with -c: 8-14 ms of a cold context's start, a third of a bare python3
// start, and nothing caches code given with -c. So the python driver runs
// from a small loader that keeps the compiled driver in the user's cache,
// beside the java driver's classes (javaDriver): one file per driver source
// and interpreter version (sys.implementation.cache_tag and sys.hexversion
// in its name, as marshal's format may change between versions). A missing
// or unreadable file is compiled from the source the loader carries and
// written under a temporary name, then renamed into place, so concurrent
// starts never read half a file. PYTHONDONTWRITEBYTECODE, set in many
// container images to keep __pycache__ out of source trees, does not apply:
// this is no module's cache, and it lives in the user's cache directory. The
// driver is compiled as "<string>", the name -c gives it, and runs in the
// loader's globals, as it did when it was the -c code itself.
//
// The cache is the user's, as every interpreter of theirs already trusts
// their site-packages and usercustomize: user code that writes it reaches
// the next interpreter's start, as it could through those.
const pythonLoader = `import marshal, os, sys
_kh_path = %PATH% + "." + sys.implementation.cache_tag + "-%x" % sys.hexversion
try:
    with open(_kh_path, "rb") as _kh_file:
        _kh_code = marshal.load(_kh_file)
except Exception:
    _kh_code = compile(%SOURCE%, "<string>", "exec")
    try:
        _kh_tmp = "%s.%d.tmp" % (_kh_path, os.getpid())
        with open(_kh_tmp, "wb") as _kh_file:
            marshal.dump(_kh_code, _kh_file)
        os.replace(_kh_tmp, _kh_path)
    except Exception:
        pass
exec(_kh_code)
`

// pythonDriverArgs returns the python arguments that run the driver: the
// loader, or the driver itself where there is no cache directory to keep
// the compiled driver in.
func pythonDriverArgs() []string {
	dir, err := driverCacheDir()
	if err != nil {
		return []string{"-c", driverPython}
	}
	sum := sha256.Sum256([]byte(driverPython))
	path := filepath.Join(dir, "python-driver-"+hex.EncodeToString(sum[:8]))
	pruneCompiledPython(dir, filepath.Base(path))
	loader := strings.NewReplacer("%PATH%", pythonLiteral(path), "%SOURCE%", pythonLiteral(driverPython)).Replace(pythonLoader)
	return []string{"-c", loader}
}

// pruneCompiledPython removes what other driver sources left in dir (each
// kernelhost version compiles its own driver), and temporary files a
// writer did not rename (it died) that are older than a minute. Removing a
// file another host still uses costs that host a compile at its next
// interpreter start, nothing more: the loader reads the file only as it
// starts. Java's class directories stay: a running JVM may still load a
// class from its own.
func pruneCompiledPython(dir, current string) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		name := e.Name()
		if !strings.HasPrefix(name, "python-driver-") || e.IsDir() {
			continue
		}
		stale := !strings.HasPrefix(name, current+".")
		if !stale && strings.HasSuffix(name, ".tmp") {
			info, err := e.Info()
			stale = err == nil && time.Since(info.ModTime()) > time.Minute
		}
		if stale {
			_ = os.Remove(filepath.Join(dir, name))
		}
	}
}

// driverCacheDir returns the directory the compiled drivers are kept in,
// kernelhost in the user's cache directory, made if missing. The drivers
// there run in every interpreter, so it must be the user's own and
// writable by nobody else (a HOME on a shared directory, a directory made
// by someone else before us).
func driverCacheDir() (string, error) {
	root, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(root, "kernelhost")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	info, err := os.Stat(dir)
	if err != nil {
		return "", err
	}
	if st, ok := info.Sys().(*syscall.Stat_t); !ok || int(st.Uid) != os.Getuid() || info.Mode().Perm()&0o022 != 0 {
		return "", fmt.Errorf("%s is not a directory of this user's that only they can write to", dir)
	}
	return dir, nil
}

// pythonLiteral is s as a Python string literal: every escape a JSON string
// has means the same in Python.
func pythonLiteral(s string) string {
	out, _ := json.Marshal(s) // cannot fail for a string
	return string(out)
}
