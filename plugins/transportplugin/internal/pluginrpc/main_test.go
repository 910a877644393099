package pluginrpc

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/pprof"
	"runtime/trace"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kernelhost/kernelhost/core"
	"github.com/kernelhost/kernelhost/internal/testkit"
	"github.com/kernelhost/kernelhost/plugins/examples/bashtransport"
)

// helperEnv makes the test binary act as a plugin (or as a small host) in one
// of the modes below, instead of running tests: real processes, no extra build.
const helperEnv = "KERNELHOST_TRANSPORTPLUGIN_TEST_MODE"

// The plugin binaries, built once by TestMain as `make` would.
var exampleBin, subprocessBin string

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		runHelper(mode)
		os.Exit(0)
	}
	testkit.Main(m, func(string) error {
		dir, err := testkit.Plugins()
		if err != nil {
			return fmt.Errorf("build plugins: %w", err)
		}
		exampleBin = filepath.Join(dir, "kernelhost-transport-example-bash")
		subprocessBin = filepath.Join(dir, "kernelhost-transport-subprocess")
		return nil
	})
}

func runHelper(mode string) {
	switch mode {
	case "bash":
		Serve(bashtransport.New())
	case "stdout-noise":
		fmt.Println("hello from a careless plugin")
		Serve(bashtransport.New())
	case "protocol-next":
		serve(func(context.Context, Settings) (core.Transport, error) { return bashtransport.New(), nil }, ProtocolVersion+1)
	case "configured":
		ServeConfigured(configuredSettings, newConfiguredTransport)
	case "late-logger":
		ServeConfigured(configuredSettings, func(ctx context.Context, greeting string) (core.Transport, error) {
			Logger().Warn("a warning logged after Serve", "why", "late-logger")
			return newConfiguredTransport(ctx, greeting)
		})
	case "hang":
		Serve(hangTransport{})
	case "big":
		Serve(bigTransport{})
	case "ctxwait":
		Serve(ctxWaitTransport{})
	case "kinds":
		Serve(kindsTransport{})
	case "flood":
		Serve(floodTransport{})
	case "echo":
		// BENCH_PLUGIN_CPUPROFILE=file profiles the plugin side of a benchmark.
		if path := os.Getenv("BENCH_PLUGIN_CPUPROFILE"); path != "" {
			f, err := os.Create(path)
			if err == nil && pprof.StartCPUProfile(f) == nil {
				defer pprof.StopCPUProfile()
			}
		}
		// BENCH_PLUGIN_TRACE=file traces it (go tool trace).
		if path := os.Getenv("BENCH_PLUGIN_TRACE"); path != "" {
			f, err := os.Create(path)
			if err == nil && trace.Start(f) == nil {
				defer trace.Stop()
			}
		}
		Serve(echoTransport{})
	case "floor-unix":
		floorUnixPeer()
	case "floor-grpc":
		floorGRPCPeer()
	case "minihost":
		miniHost()
	default:
		fmt.Fprintln(os.Stderr, "unknown helper mode", mode)
		os.Exit(2)
	}
}

// miniHost launches the example plugin, starts a bash kernel, prints
// "PIDS <plugin> <bash>" and waits: the parent-death test SIGKILLs it and
// checks that nothing it started lives on; at the end of its stdin it
// closes the plugin and exits, as a host that stops cleanly.
func miniHost() {
	ctx := context.Background()
	s, err := Launch(ctx, Config{Path: os.Getenv("EXAMPLE_BIN")})
	if err != nil {
		fmt.Println("ERR", err)
		return
	}
	k, err := s.StartKernel(ctx, core.KernelSpec{Language: "bash", Cwd: os.TempDir()})
	if err != nil {
		fmt.Println("ERR", err)
		return
	}
	if err := k.Execute(ctx, core.ExecuteRequest{MsgID: "pid", Code: "echo $$"}); err != nil {
		fmt.Println("ERR", err)
		return
	}
	var out strings.Builder
	for m := range k.Messages() {
		if m.Type == core.MsgStream {
			out.WriteString(m.Text)
		}
		if m.Type == core.MsgStatus && m.State == core.StateIdle {
			break
		}
	}
	fmt.Printf("PIDS %d %s\n", s.PID(), strings.TrimSpace(out.String()))
	_, _ = io.Copy(io.Discard, os.Stdin)
	s.Close()
}

// hangTransport's kernels never answer Execute: a plugin stuck in a call.
type hangTransport struct{}

func (hangTransport) Info() core.TransportInfo {
	return core.TransportInfo{Name: "hang", Version: "0", Languages: []string{"bash"}}
}

func (hangTransport) StartKernel(context.Context, core.KernelSpec) (core.Kernel, error) {
	return &stubKernel{msgs: make(chan core.Message)}, nil
}

// ctxWaitTransport's kernels hold Execute until its context ends, then say
// so on Messages: they show whether the host's deadline reaches the plugin.
type ctxWaitTransport struct{}

func (ctxWaitTransport) Info() core.TransportInfo {
	return core.TransportInfo{Name: "ctxwait", Version: "0", Languages: []string{"bash"}}
}

func (ctxWaitTransport) StartKernel(context.Context, core.KernelSpec) (core.Kernel, error) {
	return &ctxWaitKernel{stubKernel{msgs: make(chan core.Message, 8)}}, nil
}

type ctxWaitKernel struct{ stubKernel }

func (k *ctxWaitKernel) Execute(ctx context.Context, req core.ExecuteRequest) error {
	<-ctx.Done()
	k.msgs <- core.Message{ParentID: req.MsgID, Type: core.MsgStream, Name: "stdout", Text: "plugin saw: " + ctx.Err().Error()}
	return ctx.Err()
}

// floodTransport's kernels emit a request's whole output from inside
// Execute, into an unbuffered channel: Execute returns only once the plugin
// has forwarded all of it.
type floodTransport struct{}

func (floodTransport) Info() core.TransportInfo {
	return core.TransportInfo{Name: "flood", Version: "0", Languages: []string{"bash"}}
}

func (floodTransport) StartKernel(context.Context, core.KernelSpec) (core.Kernel, error) {
	return &floodKernel{stubKernel{msgs: make(chan core.Message)}}, nil
}

type floodKernel struct{ stubKernel }

// floodLines is how many stream messages a flood request emits.
const floodLines = 5000

func (k *floodKernel) Execute(ctx context.Context, req core.ExecuteRequest) error {
	id := req.MsgID
	k.msgs <- core.Message{ParentID: id, Type: core.MsgStatus, State: core.StateBusy}
	for i := range floodLines {
		k.msgs <- core.Message{ParentID: id, Type: core.MsgStream, Name: "stdout", Text: strconv.Itoa(i) + "\n"}
	}
	k.msgs <- core.Message{ParentID: id, Type: core.MsgExecuteReply, Status: core.ReplyOK}
	k.msgs <- core.Message{ParentID: id, Type: core.MsgStatus, State: core.StateIdle}
	return nil
}

// bigTransport's kernels answer every request with one 20 MB display_data.
type bigTransport struct{}

func (bigTransport) Info() core.TransportInfo {
	return core.TransportInfo{Name: "big", Version: "0", Languages: []string{"bash"}}
}

func (bigTransport) StartKernel(context.Context, core.KernelSpec) (core.Kernel, error) {
	return &stubKernel{msgs: make(chan core.Message, 8), big: true}, nil
}

// stubKernel backs the two fault transports above.
type stubKernel struct {
	msgs chan core.Message
	big  bool
}

func (k *stubKernel) Execute(ctx context.Context, req core.ExecuteRequest) error {
	if !k.big {
		select {} // hang, ignoring ctx, like a wedged plugin
	}
	k.msgs <- core.Message{ParentID: req.MsgID, Type: core.MsgDisplayData, Data: bigBundle()}
	k.msgs <- core.Message{ParentID: req.MsgID, Type: core.MsgExecuteReply, Status: core.ReplyOK}
	k.msgs <- core.Message{ParentID: req.MsgID, Type: core.MsgStatus, State: core.StateIdle}
	return nil
}
func (k *stubKernel) Messages() <-chan core.Message   { return k.msgs }
func (k *stubKernel) Interrupt(context.Context) error { return nil }
func (k *stubKernel) Restart(context.Context) error   { return nil }
func (k *stubKernel) Shutdown(context.Context) error  { return nil }

// echoTransport's kernels answer each request at once, without an
// interpreter, with the messages of a `1+1` (busy, execute_input,
// execute_result, execute_reply, idle): through the plugin, what a round
// trip costs is then the boundary alone.
type echoTransport struct{}

func (echoTransport) Info() core.TransportInfo {
	return core.TransportInfo{Name: "echo", Version: "0", Languages: []string{"python"}}
}

func (echoTransport) StartKernel(context.Context, core.KernelSpec) (core.Kernel, error) {
	return &echoKernel{msgs: make(chan core.Message, 64)}, nil
}

type echoKernel struct {
	msgs chan core.Message
	n    int
}

func (k *echoKernel) Execute(ctx context.Context, req core.ExecuteRequest) error {
	k.n++
	id := req.MsgID
	k.msgs <- core.Message{ParentID: id, Type: core.MsgStatus, State: core.StateBusy}
	k.msgs <- core.Message{ParentID: id, Type: core.MsgExecuteInput, ExecutionCount: k.n}
	k.msgs <- core.Message{ParentID: id, Type: core.MsgExecuteResult, ExecutionCount: k.n, Data: map[string]json.RawMessage{"text/plain": json.RawMessage(`"2"`)}}
	k.msgs <- core.Message{ParentID: id, Type: core.MsgExecuteReply, ExecutionCount: k.n, Status: core.ReplyOK}
	k.msgs <- core.Message{ParentID: id, Type: core.MsgStatus, State: core.StateIdle}
	return nil
}
func (k *echoKernel) Messages() <-chan core.Message   { return k.msgs }
func (k *echoKernel) Interrupt(context.Context) error { return nil }
func (k *echoKernel) Restart(context.Context) error   { return nil }
func (k *echoKernel) Shutdown(context.Context) error  { return nil }

// waitForLine reads lines from r until one starts with prefix.
func waitForLine(t *testing.T, sc *bufio.Scanner, prefix string, timeout time.Duration) string {
	t.Helper()
	got := make(chan string, 1)
	go func() {
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), prefix) || strings.HasPrefix(sc.Text(), "ERR") {
				got <- sc.Text()
				return
			}
		}
		got <- ""
	}()
	select {
	case l := <-got:
		return l
	case <-time.After(timeout):
		t.Fatalf("no %q line within %v", prefix, timeout)
		return ""
	}
}

// configuredTransport is the example transport built from the host's
// settings: it takes one, "greeting", and shows it as its version.
type configuredTransport struct {
	*bashtransport.Transport
	greeting string
}

// configuredSettings are its settings: one, "greeting".
var configuredSettings = []Setting[string]{
	StringSetting("greeting", "", "the version the transport reports", func(g *string) *string { return g }),
}

func newConfiguredTransport(_ context.Context, greeting string) (core.Transport, error) {
	return configuredTransport{bashtransport.New(), greeting}, nil
}

func (t configuredTransport) Info() core.TransportInfo {
	info := t.Transport.Info()
	info.Version = t.greeting
	return info
}
