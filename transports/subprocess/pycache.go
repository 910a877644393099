package subprocess

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/kernelhost/kernelhost/transports/kernelpy"
	"github.com/kernelhost/kernelhost/transports/subprocess/internal/sandbox"
)

// Python compiles driver.py (1,000 lines) on every start when it gets it
// with -c: 8-14 ms of a cold context's start, a third of a bare python3
// start, and nothing caches code given with -c. So the python driver runs
// from a small loader that keeps the compiled driver in the user's cache,
// beside the java driver's classes (javaDriver), together with kernelhost's
// python package (transports/kernelpy), which the driver loads at start:
// one file per source and interpreter version (sys.implementation.cache_tag
// and sys.hexversion in its name, as marshal's format may change between
// versions), written under a temporary name, then renamed into place, so
// concurrent starts never read half a file. PYTHONDONTWRITEBYTECODE, set in
// many container images to keep __pycache__ out of source trees, does not
// apply: this is no module's cache, and it lives in the user's cache
// directory. The driver is compiled as "<string>", the name -c gives it, and
// runs in the loader's globals, as it did when it was the -c code itself;
// the package's bootstrap and modules are there as _kh_bootstrap and
// _kh_modules (code objects, or source where the cache is not read).
//
// The compiled code runs in every python interpreter, so only the host
// writes it: it compiles it with the interpreter of its python contexts
// (a run of its own, before any user code, isolated from the user site
// and in a sandbox where there is one: sandbox.ToolRunner), keeps the file's SHA-256, and
// checks the file against it before each start; a file that differs (a
// context of an unsandboxed host wrote it, or another host version did) is
// compiled anew. The check reads the file again only when its stat changed
// (fileStamp): a read and hash of the 160 KiB were ~0.9 ms of each start
// on a machine where page faults are slow. The loader only reads it, and compiles in memory when it
// cannot. Sandboxed interpreters see the cache read-only (sandbox.go, withDriverCache).
//
// The loader also takes the working directory ("" that -c put first) off
// sys.path before anything is imported, as -P does (which Python before
// 3.11 lacks): a json.py or ast.py there must not run in the driver. The
// driver puts it back for user code once its own imports are done.
const pythonLoader = `import marshal, sys
if sys.path[:1] == [""]:
    del sys.path[0]
try:
    with open(%PATH% + "." + sys.implementation.cache_tag + "-%x" % sys.hexversion, "rb") as _kh_file:
        _kh_code, _kh_bootstrap, _kh_modules = marshal.load(_kh_file)
except Exception:
    _kh_code, _kh_bootstrap, _kh_modules = compile(%SOURCE%, "<string>", "exec"), %BOOTSTRAP%, %MODULES%
exec(_kh_code)
`

// pythonCompiler is what the host runs to compile the driver and the
// package into the cache, given their sources as JSON on stdin: it prints
// the file's path. A file that holds the same already is left as it is. A
// module of the package that does not compile is kept as source: the
// driver then fails to load it, and reports why, as it would any failure.
const pythonCompiler = `import json, marshal, os, sys
src = json.load(sys.stdin)
path = src["path"] + "." + sys.implementation.cache_tag + "-%x" % sys.hexversion


def compiled(source, filename):
    try:
        return compile(source, filename, "exec")
    except Exception:
        return source


modules = {name: compiled(source, "<kernelhost %s>" % name) for name, source in src["modules"].items()}
data = marshal.dumps((compile(src["driver"], "<string>", "exec"), compiled(src["bootstrap"], "<kernelhost bootstrap>"), modules))
try:
    with open(path, "rb") as f:
        same = f.read() == data
except OSError:
    same = False
if not same:
    tmp = "%s.%d.tmp" % (path, os.getpid())
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)
sys.stdout.write(path)
`

// pythonSources are the sources the python driver runs: itself, and
// kernelhost's python package.
var pythonSources = func() (s struct {
	Path      string            `json:"path"`
	Driver    string            `json:"driver"`
	Bootstrap string            `json:"bootstrap"`
	Modules   map[string]string `json:"modules"`
}) {
	s.Driver, s.Bootstrap, s.Modules = driverPython, kernelpy.Bootstrap(), map[string]string{}
	for _, m := range kernelpy.Modules() {
		s.Modules[m.Name] = m.Source
	}
	return s
}()

// pythonLoaderFor is the loader of the cache file base ("": none, the
// loader compiles in memory).
func pythonLoaderFor(base string) string {
	path := "None" // None + "." fails: the loader compiles
	if base != "" {
		path = pythonLiteral(base)
	}
	return strings.NewReplacer("%PATH%", path, "%SOURCE%", pythonLiteral(pythonSources.Driver),
		"%BOOTSTRAP%", pythonLiteral(pythonSources.Bootstrap), "%MODULES%", jsonText(pythonSources.Modules)).Replace(pythonLoader)
}

// pythonCompileTimeout bounds the host's compile of the driver (a python
// start and a 1,000-line compile: well under a second on an idle machine).
const pythonCompileTimeout = 20 * time.Second

// pythonDriver gives the arguments that run the python driver, and keeps
// its compiled copy in the cache checked (prepare).
type pythonDriver struct {
	closed context.Context    // the transport's: its end stops a compile
	tools  sandbox.ToolRunner // how the compile runs (internal/sandbox's walls.go)
	python string
	base   string // the cache path without the interpreter's suffix; "": no cache
	loader []string

	mu    sync.Mutex
	file  string    // the compiled driver, once compiled
	sum   [32]byte  // its SHA-256 as the host wrote it
	stamp fileStamp // its stat when it last had that hash
}

// fileStamp is what a write to a file, or its replacement, changes:
// whoever writes it cannot keep its inode and set its ctime back, which
// only a change of the system clock could.
type fileStamp struct {
	dev, ino     uint64
	size         int64
	mtime, ctime syscall.Timespec
}

// racyWindow: a stamp is trusted once its ctime is older than this. File
// times are coarse (a clock tick, a few ms; a whole second on some
// filesystems): a write in the same tick as the stat that made a stamp
// could leave its ctime as it was (git's "racily clean" entries).
const racyWindow = 2 * time.Second

// settled says whether s can stand for the file's content (racyWindow).
func (s fileStamp) settled() bool {
	return time.Since(time.Unix(s.ctime.Unix())) > racyWindow
}

// stampOf is path's fileStamp; ok is false if it cannot be read.
func stampOf(path string) (s fileStamp, ok bool) {
	var st syscall.Stat_t
	if syscall.Stat(path, &st) != nil {
		return fileStamp{}, false
	}
	return fileStamp{dev: uint64(st.Dev), ino: st.Ino, size: st.Size, mtime: st.Mtim, ctime: st.Ctim}, true
}

func newPythonDriver(closed context.Context, python string, tools sandbox.ToolRunner) *pythonDriver {
	d := &pythonDriver{closed: closed, python: python, tools: tools}
	dir, err := driverCacheDir()
	if err != nil {
		return d
	}
	sum := sha256.Sum256([]byte(jsonText(pythonSources)))
	d.base = filepath.Join(dir, "python-driver-"+hex.EncodeToString(sum[:8]))
	pruneCompiledPython(dir, filepath.Base(d.base))
	d.loader = []string{"-c", pythonLoaderFor(d.base)}
	return d
}

// prepare returns the python arguments that run the driver: the loader,
// once the compiled driver in the cache is the one the host wrote (compiled
// anew if not); the driver itself, compiled at each start, where there is
// no cache directory or the compile fails.
func (d *pythonDriver) prepare() ([]string, error) {
	if d.base == "" {
		return pythonDriverFallback(), nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.file != "" && d.verified() {
		return d.loader, nil
	}
	if err := d.compile(); err != nil {
		d.file = ""
		return pythonDriverFallback(), nil // the loader compiles in memory too; this says nothing false
	}
	return d.loader, nil
}

// compile writes the compiled driver with the contexts' interpreter and
// notes its hash.
func (d *pythonDriver) compile() error {
	ctx, cancel := context.WithTimeout(d.closed, pythonCompileTimeout)
	defer cancel()
	src := pythonSources
	src.Path = d.base
	// -I: no user site, no PYTHON* variables, no cwd on sys.path; -S: no
	// site at all, so no .pth file of any site directory runs. And in a
	// sandbox, where there is one, with only the cache writable.
	cmd := exec.CommandContext(ctx, d.python, "-I", "-S", "-c", pythonCompiler)
	cmd.Stdin = strings.NewReader(jsonText(src))
	d.tools.Prepare(cmd, filepath.Dir(d.base))
	// A timeout or the transport's close ends the interpreter and whatever
	// it started (a wrapper script's child holding stdout included).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = time.Second
	out, err := cmd.Output()
	if err != nil {
		return err
	}
	file := string(out)
	if !strings.HasPrefix(file, d.base+".") {
		return fmt.Errorf("the python compile wrote %q", file)
	}
	sum, stamp, err := hashOf(file)
	if err != nil {
		return err
	}
	d.file, d.sum, d.stamp = file, sum, stamp
	return nil
}

// hashOf is file's SHA-256 and its stamp, zero unless settled (a start
// then reads it again). The stat comes before the read, so a write during
// the read shows next time.
func hashOf(file string) (sum [32]byte, stamp fileStamp, err error) {
	stamp, ok := stampOf(file)
	data, err := os.ReadFile(file)
	if err != nil {
		return sum, fileStamp{}, err
	}
	if !ok || !stamp.settled() {
		stamp = fileStamp{}
	}
	return sha256.Sum256(data), stamp, nil
}

// verified says whether the compiled driver is still the one the host
// wrote: its stat as when its hash was checked, or else its hash.
func (d *pythonDriver) verified() bool {
	if stamp, ok := stampOf(d.file); ok && stamp == d.stamp {
		return true
	}
	sum, stamp, err := hashOf(d.file)
	if err != nil || sum != d.sum {
		return false
	}
	d.stamp = stamp
	return true
}

// pythonDriverFallback is the loader without a cache file: it compiles
// everything at each start.
func pythonDriverFallback() []string {
	return []string{"-c", pythonLoaderFor("")}
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
func pythonLiteral(s string) string { return jsonText(s) }

// jsonText is v as JSON: a string or a map of strings is a Python literal
// too.
func jsonText(v any) string {
	out, _ := json.Marshal(v) // cannot fail for strings and maps and structs of them
	return string(out)
}
