package subprocess

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kernelhost/kernelhost/core"
	"github.com/kernelhost/kernelhost/internal/testkit"
	tt "github.com/kernelhost/kernelhost/transports/transporttest"
)

// A kernel in a directory other than the pool's takes the pooled
// interpreter, and it behaves as one started there: everything testkit.CwdProbe
// prints is what a cold-started kernel in that directory prints. A restart
// takes the next pooled interpreter, moved there too.
func TestPooledKernelInAnotherCwdIsAsIfStartedThere(t *testing.T) {
	t.Parallel()
	for _, lang := range []string{"python", "javascript", "typescript"} {
		t.Run(lang, func(t *testing.T) {
			if lang != "python" {
				testkit.NeedCommand(t, "node", "nodejs")
			}
			tr, _ := pooledTransport(t, lang)
			other := t.TempDir()
			testkit.CwdFixture(t, other)
			pooled := readyPid(t, tr, lang)
			k := startIn(t, tr, lang, other)
			if k.Pid() != pooled {
				t.Fatalf("the kernel in another cwd runs pid %d, not the pooled %d", k.Pid(), pooled)
			}
			cold := New(Options{})
			defer cold.Close()
			c := startIn(t, cold, lang, other)
			// Written after both started: neither interpreter looked at it.
			if err := os.WriteFile(filepath.Join(other, "khlate.py"), []byte("V = 'late'\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			probe := func(k *Kernel) string {
				t.Helper()
				e := tt.Exec(t, k, testkit.CwdProbe(lang), false)
				if e.Reply().Status != "ok" {
					t.Fatalf("probe:%s", e)
				}
				return e.Stream("stdout")
			}
			want := probe(c)
			if got := probe(k); got != want {
				t.Errorf("the pooled kernel prints\n%s\na cold one\n%s", got, want)
			}
			first := "py-module late khmod.py"
			if lang != "python" {
				first = "cjs-module package " + filepath.Join(other, "khmod.js")
			}
			for _, s := range []string{other + "\n" + "data of " + other + "\n" + other + "\n", first} {
				if !strings.Contains(want, s) {
					t.Errorf("the probe prints\n%s\nwithout %q", want, s)
				}
			}
			next := readyPid(t, tr, lang, pooled)
			ctx, cancel := context.WithTimeout(context.Background(), tt.StartTimeout)
			defer cancel()
			if err := k.Restart(ctx); err != nil {
				t.Fatal(err)
			}
			if k.Pid() != next {
				t.Fatalf("the restarted kernel runs pid %d, not the pooled %d", k.Pid(), next)
			}
			if got := probe(k); got != want {
				t.Errorf("after restart the pooled kernel prints\n%s\na cold one\n%s", got, want)
			}
		})
	}
}

// A cwd that is not a directory fails as without a pool (the client's
// mistake, the same message), and the pooled interpreter stays for the next.
func TestPooledStartInMissingCwdFailsAsCold(t *testing.T) {
	t.Parallel()
	tr, _ := pooledTransport(t, "python")
	pooled := readyPid(t, tr, "python")
	missing := filepath.Join(t.TempDir(), "gone")
	ctx, cancel := context.WithTimeout(context.Background(), tt.StartTimeout)
	defer cancel()
	_, err := tr.StartKernel(ctx, core.KernelSpec{Language: "python", Cwd: missing})
	cold := New(Options{})
	defer cold.Close()
	_, coldErr := cold.StartKernel(ctx, core.KernelSpec{Language: "python", Cwd: missing})
	var ce *core.Error
	if !errors.As(err, &ce) || ce.Kind != core.KindInvalid || coldErr == nil || err.Error() != coldErr.Error() {
		t.Fatalf("pooled: %v; cold: %v", err, coldErr)
	}
	if readyPid(t, tr, "python") != pooled {
		t.Error("the pooled interpreter changed")
	}
}

// A directory removed after the kernel started: its restart cannot move a
// pooled interpreter there, which is killed, and fails as a cold restart
// does, with the same error.
func TestPooledRestartInRemovedCwdFailsAsCold(t *testing.T) {
	t.Parallel()
	errs := map[bool]string{}
	for _, pooled := range []bool{true, false} {
		dir := t.TempDir()
		var tr *Transport
		if pooled {
			tr, _ = pooledTransport(t, "python")
		} else {
			tr = New(Options{})
			defer tr.Close()
		}
		k := startIn(t, tr, "python", dir)
		pid := 0
		if pooled {
			pid = readyPid(t, tr, "python", k.Pid())
		}
		if err := os.Remove(dir); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), tt.StartTimeout)
		err := k.Restart(ctx)
		cancel()
		if err == nil {
			t.Fatalf("pooled %v: a restart in a removed directory succeeded", pooled)
		}
		errs[pooled] = strings.ReplaceAll(err.Error(), dir, "<dir>")
		if pooled {
			testkit.AwaitGone(t, "the pooled interpreter that could not enter the directory", 30*time.Second, pid)
		}
	}
	if errs[true] != errs[false] {
		t.Errorf("pooled restart: %s\ncold restart: %s", errs[true], errs[false])
	}
}
