package subprocess

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/kernelhost/kernelhost/transports/subprocess/internal/sandbox"
	tt "github.com/kernelhost/kernelhost/transports/transporttest"
)

// startPythonRunsACell starts a python kernel of a transport made now (so
// with the cache directory the environment names now) and checks that it
// runs a cell.
func startPythonRunsACell(t *testing.T) {
	t.Helper()
	if got, _ := tt.Exec(t, startPython(t, ""), "6 * 7", false).Result(); got != "42" {
		t.Fatalf("6 * 7 = %q", got)
	}
}

// cachedDriver returns the one compiled driver in the cache directory.
func cachedDriver(t *testing.T, cache string) (path string, data []byte) {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(cache, "kernelhost", "python-driver-*"))
	if len(files) != 1 {
		t.Fatalf("cache holds %v, want one compiled python driver", files)
	}
	data, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	return files[0], data
}

// The first start compiles the driver into the user's cache, later starts
// load it from there, and a cache file that is not a compiled driver (cut
// short, from elsewhere) is compiled anew and replaced.
func TestPythonDriverIsCompiledOnce(t *testing.T) {
	cache := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", cache)
	startPythonRunsACell(t)
	path, first := cachedDriver(t, cache)
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	startPythonRunsACell(t)
	if again, err := os.Stat(path); err != nil || !again.ModTime().Equal(info.ModTime()) || !os.SameFile(info, again) {
		t.Fatalf("the second start wrote the cache again (%v)", err)
	}
	for _, bad := range [][]byte{first[:len(first)/2], []byte("not marshal data")} {
		if err := os.WriteFile(path, bad, 0o600); err != nil {
			t.Fatal(err)
		}
		startPythonRunsACell(t)
		if _, data := cachedDriver(t, cache); !bytes.Equal(data, first) {
			t.Fatalf("after a start with a bad cache file (%d bytes) it holds %d bytes, want the %d of the compiled driver", len(bad), len(data), len(first))
		}
	}
}

// A transport checks the compiled driver before each start, by its stat
// once that is settled and else by its hash: a write to the file, even one
// that keeps its size and sets its modification time back, made right
// after the check or long after, has the next start compile it anew.
func TestPythonDriverNoticesAWrittenCache(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	d := newPythonDriver(context.Background(), "python3", sandbox.ToolRunner{})
	for _, settle := range []bool{false, true} {
		if args, err := d.prepare(); err != nil || len(args) != 2 || args[1] != d.loader[1] {
			t.Fatalf("prepare: %v, args %.80q: want the loader", err, args)
		}
		path, first := cachedDriver(t, os.Getenv("XDG_CACHE_HOME"))
		info, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if settle {
			// A start long after: the stamp is trusted from then on.
			deadline := time.Now().Add(10 * time.Second)
			for s, _ := stampOf(path); !s.settled(); s, _ = stampOf(path) {
				if time.Now().After(deadline) {
					t.Fatal("the cache file's ctime is not settled after 10 s")
				}
				time.Sleep(20 * time.Millisecond) // the clock's passing is the wait
			}
			if _, err := d.prepare(); err != nil || d.stamp == (fileStamp{}) {
				t.Fatalf("prepare: %v; stamp %+v, want the settled stat", err, d.stamp)
			}
		}
		written := bytes.Clone(first)
		written[len(written)-1] ^= 1
		if err := os.WriteFile(path, written, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(path, info.ModTime(), info.ModTime()); err != nil {
			t.Fatal(err)
		}
		if _, err := d.prepare(); err != nil {
			t.Fatal(err)
		}
		if _, data := cachedDriver(t, os.Getenv("XDG_CACHE_HOME")); !bytes.Equal(data, first) {
			t.Fatalf("settled %v: after a write to the cache file the next start left it as written", settle)
		}
	}
}

// Without a cache directory of the user's own that only they can write to
// (none at all: a file where it would be; one anyone can write to) python
// runs the driver as before, compiling it.
func TestPythonDriverWithoutCache(t *testing.T) {
	notDir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notDir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	shared := t.TempDir()
	if err := os.Mkdir(filepath.Join(shared, "kernelhost"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(shared, "kernelhost"), 0o777); err != nil {
		t.Fatal(err)
	}
	for name, cache := range map[string]string{"no directory": notDir, "writable by anyone": shared} {
		t.Run(name, func(t *testing.T) {
			t.Setenv("XDG_CACHE_HOME", cache)
			if args, _ := newPythonDriver(context.Background(), "python3", sandbox.ToolRunner{}).prepare(); len(args) != 2 || args[1] != pythonDriverFallback()[1] {
				t.Fatalf("python args: %.80q, want -c and the driver", args)
			}
			startPythonRunsACell(t)
		})
	}
}

// A transport made now removes the compiled drivers of other driver
// sources (older kernelhost versions) and temporary files a writer left
// over a minute ago, and keeps its own, a fresh temporary file and
// everything else in the directory.
func TestPythonDriverCacheIsPruned(t *testing.T) {
	cache := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", cache)
	startPythonRunsACell(t)
	own, _ := cachedDriver(t, cache)
	dir := filepath.Dir(own)
	write := func(name string, age time.Duration) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		then := time.Now().Add(-age)
		if err := os.Chtimes(path, then, then); err != nil {
			t.Fatal(err)
		}
		return path
	}
	other := write("python-driver-0123456789abcdef.cpython-311-30b07f0", 0)
	otherTmp := write("python-driver-0123456789abcdef.cpython-311-30b07f0.99.tmp", 0)
	leftTmp := write(filepath.Base(own)+".99.tmp", time.Hour)
	freshTmp := write(filepath.Base(own)+".98.tmp", 0)
	unrelated := write("java-driver-notes", time.Hour)
	New(Options{})
	for path, want := range map[string]bool{own: true, other: false, otherTmp: false, leftTmp: false, freshTmp: true, unrelated: true} {
		if _, err := os.Stat(path); (err == nil) != want {
			t.Errorf("%s: kept %v, want %v", filepath.Base(path), err == nil, want)
		}
	}
}

// A stamp stands for the file only once its ctime is older than the
// coarsest file times a cache may be on: a whole second (ext4 with small
// inodes, ext3), where a write in the same second keeps the ctime.
func TestDriverStampSettlesAfterWholeSeconds(t *testing.T) {
	ago := func(d time.Duration) fileStamp {
		return fileStamp{ctime: syscall.NsecToTimespec(time.Now().Add(-d).UnixNano())}
	}
	for d, want := range map[time.Duration]bool{0: false, 500 * time.Millisecond: false, 1500 * time.Millisecond: false, 3 * time.Second: true} {
		if got := ago(d).settled(); got != want {
			t.Errorf("a stamp whose ctime is %v old: settled %v, want %v", d, got, want)
		}
	}
}
