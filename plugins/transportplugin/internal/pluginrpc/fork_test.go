package pluginrpc

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/kernelhost/kernelhost/core"
	"github.com/kernelhost/kernelhost/internal/testkit"
)

// A fork through the real subprocess plugin, on both carriers: the copy is
// a kernel of its own stream that holds the source's state, goes its own
// way afterwards, can itself be forked, restarted and shut down; the
// source runs on. A bash kernel is refused as KindUnsupported naming bash,
// a kernel that was shut down with an error that says so.
func TestForkThroughPlugin(t *testing.T) {
	t.Parallel()
	testkit.NeedPythonModules(t, testkit.DebianPython, "IPython")
	for _, carrier := range []struct {
		name string
		grpc bool
	}{{"kernel-socket", false}, {"grpc-streams", true}} {
		t.Run(carrier.name, func(t *testing.T) {
			// The fork server is off (no preload): contexts are forked from
			// their own interpreters only, which is what this is about.
			cfg := withSettings(Config{Path: subprocessBin, Logger: testLogger(t), GRPCKernelStreams: carrier.grpc},
				map[string]any{"python": testkit.DebianPython, "sandbox": "off", "python-preload": "off"})
			s := launch(t, cfg)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			src := startKernel(t, s, "python")
			run(t, src, "setup", "x = 41")

			fork, err := s.ForkKernel(ctx, src)
			if err != nil {
				t.Fatalf("ForkKernel: %v", err)
			}
			defer fork.Shutdown(ctx)
			if got := stdout(run(t, fork, "f1", "print(x)\nx = 1")); got != "41\n" {
				t.Fatalf("the fork sees x = %q, want the source's 41", got)
			}
			if got := stdout(run(t, src, "s1", "print(x)")); got != "41\n" {
				t.Fatalf("the source sees x = %q after the fork's write, want 41", got)
			}
			// The fork is a kernel the plugin knows by its own name.
			forkOfFork, err := s.ForkKernel(ctx, fork)
			if err != nil {
				t.Fatalf("ForkKernel of a fork: %v", err)
			}
			defer forkOfFork.Shutdown(ctx)
			if got := stdout(run(t, forkOfFork, "ff1", "print(x)")); got != "1\n" {
				t.Fatalf("the fork's fork sees x = %q, want the fork's 1", got)
			}
			if err := fork.Restart(ctx); err != nil {
				t.Fatalf("Restart of the fork: %v", err)
			}
			if got := stdout(run(t, fork, "f2", "print('x' in globals())")); got != "False\n" {
				t.Fatalf("after its restart the fork still has x: %q", got)
			}
			if err := forkOfFork.Shutdown(ctx); err != nil {
				t.Fatalf("Shutdown of the fork's fork: %v", err)
			}
			if _, err := s.ForkKernel(ctx, forkOfFork); err == nil || !strings.Contains(err.Error(), "no running kernel") {
				t.Fatalf("ForkKernel of a kernel shut down: %v, want an error saying it is not running", err)
			}

			bash := startKernel(t, s, "bash")
			_, err = s.ForkKernel(ctx, bash)
			if core.KindOf(err) != core.KindUnsupported || !strings.Contains(err.Error(), "bash") {
				t.Fatalf("ForkKernel of a bash kernel: %v (kind %v), want KindUnsupported naming bash", err, core.KindOf(err))
			}
			if got := stdout(run(t, src, "s2", "print(x + 1)")); got != "42\n" {
				t.Fatalf("the source after it all: %q", got)
			}
		})
	}
}

// A plugin whose transport cannot fork (not a core.Forker, as the jupyter
// plugin's) refuses as KindUnsupported naming the transport, and the
// kernel it was asked to copy runs on.
func TestForkRefusedByPluginThatCannot(t *testing.T) {
	t.Parallel()
	s := launch(t, Config{Path: exampleBin, Logger: testLogger(t)})
	k := startBash(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	fork, err := s.ForkKernel(ctx, k)
	var ce *core.Error
	if fork != nil || !errors.As(err, &ce) || ce.Kind != core.KindUnsupported || !strings.Contains(ce.Msg, "example-bash transport cannot fork") {
		t.Fatalf("ForkKernel: %v, %v (%#v), want a KindUnsupported error naming the example-bash transport", fork, err, err)
	}
	if got := stdout(run(t, k, "after", "echo still")); got != "still\n" {
		t.Fatalf("the source after the refused fork: %q", got)
	}
}

// startKernel starts a lang kernel on tr, shut down when the test ends.
func startKernel(t *testing.T, tr core.Transport, lang string) core.Kernel {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	k, err := tr.StartKernel(ctx, core.KernelSpec{Language: lang, Cwd: t.TempDir()})
	if err != nil {
		t.Fatalf("StartKernel %s: %v", lang, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		k.Shutdown(ctx)
	})
	return k
}
