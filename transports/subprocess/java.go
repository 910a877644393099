package subprocess

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	"github.com/kernelhost/kernelhost/core"
	"github.com/kernelhost/kernelhost/transports/subprocess/internal/sandbox"
)

// java runs drivers/Driver.java, jshell's API in the driver's JVM, so a JDK
// (java with javac beside it) is needed. Its driver is compiled once per
// host into the user's cache (javaDriver). The JDK has no JSON parser: a
// request is a header line and the code (encodeHeader); messages are JSON
// lines on fd 4. Its pool serves only kernels in the pool's cwd: a JVM
// cannot change its process's cwd (user.dir is a property; children and
// the JDK's file access use the process's).
func init() {
	register(langDef{
		name: "java",
		interpreter: Interpreter{Name: "java", Default: "java", DebianPackage: "default-jdk-headless",
			Help: "a JDK's java, with javac beside it (java contexts, through jshell; Debian default-jdk-headless)"},
		newDriver: func(t *Transport, path string) (driver, error) {
			d, err := newJavaDriver(path, t.tools())
			if err != nil {
				return nil, err
			}
			return javaLang{d}, nil
		},
	})
}

// driverJava is compiled once per host into a cache directory (see
// javaDriver): a source launch would compile it on every start.
//
//go:embed drivers/Driver.java
var driverJava string

type javaLang struct{ compiled *javaDriver }

func (d javaLang) command() (args, env []string, err error) {
	args, err = d.compiled.prepare()
	return args, nil, err
}

func (javaLang) encode(req core.ExecuteRequest) ([]byte, error) { return encodeHeader(req) }

// interrupt: the driver handles SIGINT (sun.misc.Signal) with JShell.stop()
// while a cell runs and ignores it otherwise. The JVM runs that handler on
// a thread of its own, late under load: an idle interrupt's SIGINT could
// reach the driver once the next cell had started, and stop it, so none is
// sent while no request runs. After each SIGINT the host writes the
// record "sigint 0 <msg_id>" (a header line of encodeHeader's, without a
// line break in the msg_id), and the driver starts a cell only once the
// handler has run for each. It gets the resends (sigintResends) for a
// signal that came just before the cell started.
func (javaLang) interrupt(_ context.Context, s signaller, id string) error {
	if id == "" {
		return nil
	}
	return sigintResent(s, id, javaLang{}.sigintRecord, sigintResends)
}

func (javaLang) sigintRecord(id string) []byte { return []byte("sigint 0 " + id + "\n") }

func (javaLang) cwdRecord(string) []byte { return nil }

func (javaLang) channel() channel { return fd4Lines }

// javaDriver compiles drivers/Driver.java with the JDK's javac once and
// gives the java arguments that run it.
//
// The class files go to a directory of the user's cache named after the
// driver's source and the JDK, so a host compiles it once per JDK and
// driver version (javac takes 1-3 s, the same as a start); a source launch
// (`java Driver.java`) would pay that on every context start. The
// directory is written under a temporary name and renamed into place, so
// concurrent hosts never see a half-written one.
type javaDriver struct {
	java, javac string
	tools       sandbox.ToolRunner // how javac runs (internal/sandbox's walls.go)
	once        sync.Once
	args        []string
	err         error
}

// javaCompileTimeout bounds the one javac run.
const javaCompileTimeout = 2 * time.Minute

// javaVMArgs start the driver's JVM. java.util is opened to unnamed modules
// so the engine's env snippets can write through System.getenv() (see
// javaEnvBlock in core/engine/envvars.go). C1 only and the serial collector
// shorten the start and shrink the idle memory; long
// computations run slower than with C2, which JAVA_TOOL_OPTIONS cannot undo
// (these come later on the command line).
var javaVMArgs = []string{"--add-opens", "java.base/java.util=ALL-UNNAMED", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xss4m"}

func newJavaDriver(java string, tools sandbox.ToolRunner) (*javaDriver, error) {
	javac := filepath.Join(filepath.Dir(java), "javac")
	if real, err := filepath.EvalSymlinks(java); err == nil {
		javac = filepath.Join(filepath.Dir(real), "javac")
	}
	if _, err := exec.LookPath(javac); err != nil {
		return nil, fmt.Errorf("javac is not next to %s (a JDK is needed, not a JRE)", java)
	}
	return &javaDriver{java: java, javac: javac, tools: tools}, nil
}

// prepare compiles the driver (once) and returns the arguments of java.
func (d *javaDriver) prepare() ([]string, error) {
	d.once.Do(func() {
		dir, err := d.compile()
		if err != nil {
			d.err = fmt.Errorf("compile the java driver: %w", err)
			return
		}
		d.args = append(append([]string(nil), javaVMArgs...), "-cp", dir, "Driver")
	})
	return d.args, d.err
}

func (d *javaDriver) compile() (string, error) {
	root, err := driverCacheDir()
	if err != nil {
		// No cache of the user's own: a private directory for this host
		// (never a shared name under /tmp, which another user could
		// have filled with classes of theirs).
		if root, err = os.MkdirTemp("", "kernelhost-java-"); err != nil {
			return "", err
		}
	}
	sum := sha256.Sum256([]byte(driverJava + "\x00" + d.javac))
	dir := filepath.Join(root, "java-driver-"+hex.EncodeToString(sum[:8]))
	if _, err := os.Stat(filepath.Join(dir, "Driver.class")); err == nil {
		return dir, nil
	}
	tmp, err := os.MkdirTemp(root, "java-driver-tmp-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp) // left only when the rename did not happen
	src := filepath.Join(tmp, "Driver.java")
	if err := os.WriteFile(src, []byte(driverJava), 0o600); err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), javaCompileTimeout)
	defer cancel()
	// -nowarn: the driver uses sun.misc.Signal, internal API, on purpose.
	// -proc:none, -implicit:none and a class path of its own: no
	// annotation processor or class is taken from anywhere else (the
	// class path is "." by default, the host's cwd, which may be one a
	// context writes); sandbox.ToolRunner runs it in "/" and in a sandbox.
	cmd := exec.CommandContext(ctx, d.javac, "-nowarn", "-proc:none", "-implicit:none", "-encoding", "UTF-8", "--class-path", tmp, "-d", tmp, src)
	d.tools.Prepare(cmd, tmp)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%s: %w: %s", d.javac, err, out)
	}
	if err := os.Rename(tmp, dir); err != nil {
		if _, statErr := os.Stat(filepath.Join(dir, "Driver.class")); statErr == nil {
			return dir, nil // another host won the race
		}
		return "", err
	}
	return dir, nil
}
