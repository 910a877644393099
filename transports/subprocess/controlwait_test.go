package subprocess

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kernelhost/kernelhost/core"
	"github.com/kernelhost/kernelhost/core/engine"
	"github.com/kernelhost/kernelhost/internal/testkit"
)

// controlBound is how long a restart, delete or shutdown may take while an
// execution with env vars runs: about what it takes without env vars (under
// a second here), far below the engine's HelperTimeout (30 s), which is what
// they used to wait, writing the env reset to the busy interpreter.
const controlBound = 10 * time.Second

// waitForStdout reads x until its stdout holds a line, and returns that line.
func waitForStdout(t *testing.T, x *engine.Execution) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var outs []engine.Output
	for {
		var err error
		if outs, err = x.Next(ctx, outs); err != nil {
			t.Fatalf("no line on stdout: %v (%+v)", err, outs)
		}
		var b strings.Builder
		for _, o := range outs {
			if o.Type == engine.OutStdout {
				b.WriteString(o.Text)
			}
		}
		if line, _, ok := strings.Cut(b.String(), "\n"); ok {
			return line
		}
	}
}

func TestControlDuringEnvExecutionIsNotHeldUp(t *testing.T) {
	t.Parallel()
	busy := map[string]string{
		"python": "import os, time\nprint(os.readlink('/proc/self/ns/pid'), os.getpid(), flush=True)\ntime.sleep(120)",
		"bash":   "echo $(readlink /proc/self/ns/pid) $$; sleep 120",
	}
	for _, lang := range []string{"python", "bash"} {
		for _, keys := range []int{1, 3000} {
			for _, op := range []string{"restart", "delete", "shutdown"} {
				t.Run(fmt.Sprintf("%s/%dkeys/%s", lang, keys, op), func(t *testing.T) {
					t.Parallel()
					e, err := engine.NewEngine(engine.Config{Transport: New(Options{}), DefaultCwd: t.TempDir(), HelperTimeout: 30 * time.Second, MaxEnvVars: 5000})
					if err != nil {
						t.Fatal(err)
					}
					closed := false
					t.Cleanup(func() {
						if !closed {
							ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
							defer cancel()
							_ = e.Close(ctx)
						}
					})
					ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
					defer cancel()
					c, err := e.CreateContext(ctx, lang, "")
					if err != nil {
						t.Fatal(err)
					}
					env := map[string]string{}
					for i := 0; i < keys; i++ {
						env[fmt.Sprintf("KH_VAR_%d", i)] = strings.Repeat("v", 40)
					}
					x, err := e.Execute(ctx, engine.ExecRequest{ContextID: c.ID, Code: busy[lang], EnvVars: env})
					if err != nil {
						t.Fatal(err)
					}
					ns, printed, _ := strings.Cut(strings.TrimSpace(waitForStdout(t, x)), " ")
					pid, err := strconv.Atoi(printed)
					if err != nil {
						t.Fatal(err)
					}
					pid = testkit.HostPidIn(t, ns, pid)
					start := time.Now()
					switch op {
					case "restart":
						err = e.Restart(ctx, c.ID)
					case "delete":
						err = e.Delete(ctx, c.ID)
					default:
						closed = true
						err = e.Close(ctx)
					}
					took := time.Since(start)
					if err != nil {
						t.Fatalf("%s: %v", op, err)
					}
					if took > controlBound {
						t.Errorf("%s took %s while an execution with %d env vars ran, want under %s", op, took, keys, controlBound)
					}
					if err := syscall.Kill(pid, 0); err != syscall.ESRCH {
						t.Errorf("the interpreter (pid %d) is still there after %s: %v", pid, op, err)
					}
				})
			}
		}
	}
}

// A write to an interpreter that does not read (it is busy) holds the
// kernel's lock until its deadline; Restart and Shutdown must not wait for
// it.
func TestRestartCutsABlockedWrite(t *testing.T) {
	t.Parallel()
	for _, op := range []string{"restart", "shutdown"} {
		t.Run(op, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			kk, err := New(Options{}).StartKernel(ctx, core.KernelSpec{Language: "python", Cwd: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			k := kk.(*Kernel)
			defer k.Shutdown(context.Background())
			go func() {
				for range k.Messages() {
				}
			}()
			if err := k.Execute(ctx, core.ExecuteRequest{MsgID: "busy", Code: "import time\ntime.sleep(120)"}); err != nil {
				t.Fatal(err)
			}
			blocked := make(chan error, 1)
			go func() {
				wctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				// Larger than any pipe buffer: the write blocks until the driver reads.
				blocked <- k.Execute(wctx, core.ExecuteRequest{MsgID: "big", Code: "#" + strings.Repeat("x", 4<<20)})
			}()
			time.Sleep(200 * time.Millisecond) // let the write start and block; either order is correct, only the timing differs
			start := time.Now()
			if op == "restart" {
				err = k.Restart(ctx)
			} else {
				err = k.Shutdown(ctx)
			}
			if err != nil {
				t.Fatal(err)
			}
			if took := time.Since(start); took > controlBound {
				t.Errorf("%s took %s behind a blocked write", op, took)
			}
			select {
			case <-blocked:
			case <-time.After(controlBound):
				t.Error("the blocked write did not end")
			}
		})
	}
}
