package jupyter

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kernelhost/kernelhost/core"
	"github.com/kernelhost/kernelhost/core/engine"
	"github.com/kernelhost/kernelhost/transports/jupyter/jupytertest"
	"github.com/kernelhost/kernelhost/transports/transporttest"
)

// goneSignal wraps a transport so a test can wait for a kernel's Messages to
// close (the transport found the kernel gone), which the engine consumes.
type goneSignal struct {
	core.Transport
	gone chan struct{} // closed when the last kernel started ended
}

type signalledKernel struct {
	core.Kernel
	msgs chan core.Message
}

func (k *signalledKernel) Messages() <-chan core.Message { return k.msgs }

func (g *goneSignal) StartKernel(ctx context.Context, spec core.KernelSpec) (core.Kernel, error) {
	k, err := g.Transport.StartKernel(ctx, spec)
	if err != nil {
		return nil, err
	}
	gone := make(chan struct{})
	g.gone = gone
	sk := &signalledKernel{Kernel: k, msgs: make(chan core.Message)}
	go func() {
		defer close(gone)
		defer close(sk.msgs)
		for m := range k.Messages() {
			sk.msgs <- m
		}
	}()
	return sk, nil
}

// cullIdle is how long an idle kernel lives on the culling gateway. Kernel
// Gateway culls kernels that are still starting too: the bound is well
// above a kernel's start on a loaded machine (at 4 s, starts beside the
// parallel tests' were culled, and the contexts never came up).
const cullIdle = 8 * time.Second

// TestKernelGatewayCulling runs against a Kernel Gateway that culls kernels
// idle for cullIdle, connected or not (cull_connected, as clusters set it).
// Its subtests run one after the other: a cull on Kernel Gateway 2.5.2 while
// another kernel lives there stops the gateway from seeing that kernel's
// activity (an asyncio "Cannot enter into task" in its log), and it culls
// that one too, keep-alive or not.
func TestKernelGatewayCulling(t *testing.T) {
	t.Parallel()
	kg := jupytertest.StartKernelGateway(t,
		fmt.Sprintf("--MappingKernelManager.cull_idle_timeout=%d", int(cullIdle.Seconds())),
		"--MappingKernelManager.cull_interval=1",
		"--MappingKernelManager.cull_connected=True")
	// Without keep-alive: the kernel is culled; the next execution says
	// that the context's state is gone, and runs in its cwd again.
	t.Run("Culled", func(t *testing.T) {
		g := &goneSignal{Transport: newTransport(t, kg, func(c *Config) { c.PingInterval = time.Second })}
		e, id, cwd := cullingEngine(t, g)
		select {
		case <-g.gone:
		case <-time.After(cullIdle + time.Minute):
			t.Fatal("the kernel was not culled, or its loss not noticed")
		}
		var outs []engine.Output
		stderr, errLine := "", ""
		// An execution sent just as the loss is noticed ends with
		// KernelDied saying the kernel is gone; the next one has the notice.
		for attempt := 0; attempt < 2 && stderr == ""; attempt++ {
			outs = transporttest.EngineCollect(t, startExec(t, e, id, "import os\nprint(os.getcwd())\nx"))
			errLine = ""
			for _, o := range outs {
				switch o.Type {
				case engine.OutStderr:
					stderr += o.Text
				case engine.OutError:
					errLine = o.ErrName
					if o.ErrName == "KernelDied" && (attempt > 0 || !strings.Contains(o.ErrValue, "The kernel is gone")) {
						t.Errorf("execution %d after the cull: %s %q", attempt+1, o.ErrName, o.ErrValue)
					}
				}
			}
		}
		if !strings.Contains(stderr, "kernelhost: this context's kernel was replaced") || !strings.Contains(stderr, "culled") {
			t.Errorf("stderr %q, want the notice that the kernel was replaced", stderr)
		}
		stdout := ""
		for _, o := range outs {
			if o.Type == engine.OutStdout {
				stdout += o.Text
			}
		}
		if got := stdout; got != cwd+"\n" {
			t.Errorf("cwd on the new kernel %q, want %q", got, cwd)
		}
		if errLine != "NameError" {
			t.Errorf("error %q, want NameError (the state is gone)", errLine)
		}
		// Only the first execution on the new kernel carries the notice.
		outs = transporttest.EngineRun(t, e, t.Context(), engine.ExecRequest{ContextID: id, Code: "print('again')"})
		for _, o := range outs {
			if o.Type == engine.OutStderr {
				t.Errorf("second execution's stderr %q", o.Text)
			}
		}
	})
	// With keep-alive more often than the cull timeout, the kernel stays.
	t.Run("KeptAlive", func(t *testing.T) {
		g := &goneSignal{Transport: newTransport(t, kg, func(c *Config) { c.PingInterval = time.Second; c.KeepAlive = time.Second })}
		e, id, _ := cullingEngine(t, g)
		select {
		case <-g.gone:
			t.Fatal("the kept-alive kernel was culled")
		case <-time.After(3 * cullIdle): // a span to not happen in: nothing to await
		}
		outs := transporttest.EngineRun(t, e, t.Context(), engine.ExecRequest{ContextID: id, Code: "print(x)"})
		if got := transporttest.EngineStdout(t, outs); got != "41\n" {
			t.Errorf("x after %v idle with keep-alive: %q, %+v", 3*cullIdle, got, outs)
		}
	})
}

// cullingEngine makes an engine on tr and a context whose kernel has x = 41.
func cullingEngine(t *testing.T, tr core.Transport) (*engine.Engine, string, string) {
	cwd := t.TempDir()
	e := transporttest.NewEngine(t, engine.Config{Transport: tr, DefaultCwd: cwd})
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	info, err := e.CreateContext(ctx, "python", "")
	if err != nil {
		t.Fatal(err)
	}
	transporttest.EngineRun(t, e, ctx, engine.ExecRequest{ContextID: info.ID, Code: "x = 41"})
	return e, info.ID, cwd
}

func startExec(t *testing.T, e *engine.Engine, id, code string) *engine.Execution {
	t.Helper()
	x, err := e.Execute(t.Context(), engine.ExecRequest{ContextID: id, Code: code})
	if err != nil {
		t.Fatal(err)
	}
	return x
}
