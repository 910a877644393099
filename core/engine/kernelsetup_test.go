package engine

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
)

// A KernelSetup's Load is sent only to a kernel whose Check asked for it
// (one whose transport did not equip it already); once one did, the next
// kernel of the language gets Load without Check.
func TestKernelSetupLoadsOnlyWhereCheckAsks(t *testing.T) {
	const (
		checked = "__import__('os').environ.__setitem__('KH_CHECKED', 'yes')"
		load    = "__import__('os').environ.__setitem__('KH_LOADED', 'yes')"
	)
	for check, want := range map[string][2]string{
		"print load":   {"KH_CHECKED=yesKH_LOADED=yes", "KH_CHECKED unsetKH_LOADED=yes"},
		"print loaded": {"KH_CHECKED=yesKH_LOADED unset", "KH_CHECKED=yesKH_LOADED unset"},
	} {
		e, _ := newTestEngine(t, Config{KernelSetup: func(string) KernelSetup {
			return KernelSetup{Check: checked + "\n" + check, Load: load}
		}})
		ctx := context.Background()
		for i, want := range want {
			info, err := e.CreateContext(ctx, "python", "/tmp")
			if err != nil {
				t.Fatal(err)
			}
			if got := stdout(collect(t, execute(t, e, ctx, ExecRequest{Code: "getenv KH_CHECKED\ngetenv KH_LOADED", ContextID: info.ID}))); got != want {
				t.Fatalf("Check %q, kernel %d: the kernel has %q, want %q", check, i+1, got, want)
			}
		}
	}
}

// What a kernel setup writes on stderr (kernelhost's python package failed
// to load) is reported, not swallowed: on the stderr of each context's
// first execution, not its second, and in the log, at WARN the first time.
// The contexts work on.
func TestKernelSetupFailureIsReported(t *testing.T) {
	var logged syncBuffer
	e, _ := newTestEngine(t, Config{
		Logger: slog.New(slog.NewTextHandler(&logged, &slog.HandlerOptions{Level: slog.LevelDebug})),
		KernelSetup: func(string) KernelSetup {
			return KernelSetup{Check: "print load", Load: "eprint env.py is broken"}
		},
	})
	ctx := context.Background()
	stderr := func(outs []Output) string {
		var b strings.Builder
		for _, o := range outs {
			if o.Type == OutStderr {
				b.WriteString(o.Text)
			}
		}
		return b.String()
	}
	for range 2 {
		info, err := e.CreateContext(ctx, "python", "/tmp")
		if err != nil {
			t.Fatal(err)
		}
		first := collect(t, execute(t, e, ctx, ExecRequest{Code: "print 1", ContextID: info.ID}))
		if got := stderr(first); got != "env.py is broken\n" || stdout(first) != "1\n" {
			t.Fatalf("first execution: stderr %q, stdout %q; want the failure on stderr, and the output", got, stdout(first))
		}
		if got := stderr(collect(t, execute(t, e, ctx, ExecRequest{Code: "print 2", ContextID: info.ID}))); got != "" {
			t.Fatalf("second execution: stderr %q, want nothing", got)
		}
	}
	log := logged.String()
	if strings.Count(log, "level=WARN") != 1 || strings.Count(log, "env.py is broken") != 2 || !strings.Contains(strings.SplitN(log, "\n", 2)[0], "level=WARN") {
		t.Fatalf("log:\n%s\nwant the failure twice, the first at WARN", log)
	}
}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
