package core_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"

	"github.com/kernelhost/kernelhost/core"
	"github.com/kernelhost/kernelhost/core/engine"
)

// shoutTransport is a whole transport: its one language, "shout", prints the
// code it is given in capitals and returns its length. A real transport does
// the same with an interpreter behind it (plugins/examples/bashtransport).
type shoutTransport struct{}

func (shoutTransport) Info() core.TransportInfo {
	return core.TransportInfo{Name: "shout", Version: "1.0.0", Languages: []string{"shout"}}
}

func (shoutTransport) StartKernel(_ context.Context, spec core.KernelSpec) (core.Kernel, error) {
	if spec.Language != "shout" {
		return nil, fmt.Errorf("shout transport: unknown language %q (it has shout)", spec.Language)
	}
	return &shoutKernel{msgs: make(chan core.Message, 16)}, nil
}

// shoutKernel answers each request at once, from inside Execute: busy,
// execute_input, its output, execute_reply, idle, each with the request's
// MsgID as ParentID. Silent requests (the engine's own, e.g. to apply a cwd)
// are not counted and print nothing.
type shoutKernel struct {
	mu     sync.Mutex
	count  int
	msgs   chan core.Message
	closed bool
}

func (k *shoutKernel) Execute(_ context.Context, req core.ExecuteRequest) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed {
		return errors.New("shout kernel: shut down")
	}
	emit := func(m core.Message) {
		m.ParentID = req.MsgID
		m.Timestamp = "2026-01-01T00:00:00Z" // a real kernel sends its clock
		k.msgs <- m
	}
	emit(core.Message{Type: core.MsgStatus, State: core.StateBusy})
	if !req.Silent {
		k.count++
		emit(core.Message{Type: core.MsgExecuteInput, ExecutionCount: k.count})
		emit(core.Message{Type: core.MsgStream, Name: "stdout", Text: strings.ToUpper(req.Code) + "\n"})
		// MIME values are raw JSON: a text/plain value is a JSON string.
		length, _ := json.Marshal(strconv.Itoa(len(req.Code)))
		emit(core.Message{Type: core.MsgExecuteResult, ExecutionCount: k.count,
			Data: map[string]json.RawMessage{"text/plain": length}})
	}
	emit(core.Message{Type: core.MsgExecuteReply, ExecutionCount: k.count, Status: core.ReplyOK})
	emit(core.Message{Type: core.MsgStatus, State: core.StateIdle})
	return nil
}

func (k *shoutKernel) Messages() <-chan core.Message { return k.msgs }

func (k *shoutKernel) Interrupt(context.Context) error { return nil } // nothing runs long

func (k *shoutKernel) Restart(context.Context) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.count = 0
	k.msgs <- core.Message{Type: core.MsgStatus, State: core.StateRestarting} // kernel-wide: no ParentID
	return nil
}

func (k *shoutKernel) Shutdown(context.Context) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.closed {
		k.closed = true
		close(k.msgs)
	}
	return nil
}

// A transport author implements core.Transport and core.Kernel; the engine
// turns the kernel's messages into the /execute stream. Here a toy transport
// runs two executions in one context, printed as the NDJSON lines a client
// receives.
func Example_transport() {
	ctx := context.Background()
	eng, err := engine.NewEngine(engine.Config{Transport: shoutTransport{}, DefaultCwd: "/"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer eng.Close(ctx)

	for _, code := range []string{"hello", "state stays"} {
		x, err := eng.Execute(ctx, engine.ExecRequest{Language: "shout", Code: code})
		if err != nil {
			fmt.Println(err)
			return
		}
		var line []byte
		for {
			outs, err := x.Next(ctx, nil)
			for _, o := range outs {
				line = engine.AppendLine(line[:0], o)
				fmt.Print(string(line))
			}
			if err == io.EOF {
				break
			}
			if err != nil {
				fmt.Println(err)
				return
			}
		}
	}
	// Output:
	// {"type":"number_of_executions","execution_count":1}
	// {"type":"stdout","text":"HELLO\n","timestamp":"2026-01-01T00:00:00Z"}
	// {"type":"result","text":"5","extra":{},"is_main_result":true}
	// {"type":"end_of_execution"}
	// {"type":"number_of_executions","execution_count":2}
	// {"type":"stdout","text":"STATE STAYS\n","timestamp":"2026-01-01T00:00:00Z"}
	// {"type":"result","text":"11","extra":{},"is_main_result":true}
	// {"type":"end_of_execution"}
}
