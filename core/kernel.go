package core

import (
	"context"
	"encoding/json"
)

// Transport starts kernels. It is the one thing a transport author implements
// (together with Kernel); the engine never knows whether it talks to a local
// process, a Jupyter Server or a plugin over gRPC.
//
// A Transport must be safe for concurrent use.
type Transport interface {
	// Info describes the transport: its name, version and the languages it can
	// start. The engine uses Languages to pick default contexts at start-up.
	Info() TransportInfo

	// StartKernel starts a fresh kernel for spec.Language, running in spec.Cwd
	// where the transport can arrange that (the engine also applies the cwd
	// with a snippet, so a transport that cannot may ignore it). It returns when
	// the kernel is ready to accept Execute. An unknown language is an error
	// that names it; a cwd the transport knows to be unusable is an *Error of
	// KindInvalid, which the API reports as the client's mistake (400). ctx
	// bounds the start only, not the kernel's lifetime.
	StartKernel(ctx context.Context, spec KernelSpec) (Kernel, error)
}

// Forker is a Transport that can copy a live kernel (optional): the new
// kernel holds a copy of src's interpreter state (variables, imports,
// functions, cwd) with the process environment a new kernel starts with
// (not what src's code made of it: the engine applies its global env vars
// as to a new kernel), and src runs on untouched. The engine calls it only
// while src runs no request. A kernel it cannot copy (its language) is an
// *Error of KindUnsupported that names the language.
type Forker interface {
	ForkKernel(ctx context.Context, src Kernel) (Kernel, error)
}

// FamilyKernel is a Kernel that can say which family it belongs to
// (optional): the kernels whose interpreters share one sandbox, a source
// and its live copies (the subprocess transport's sandboxed forks). Family
// is a short id, the same for every member while the family lives, ""
// when the kernel shares its sandbox with none. It must not block.
type FamilyKernel interface {
	Family() string
}

// TransportInfo describes a transport.
type TransportInfo struct {
	Name      string   `json:"name"`
	Version   string   `json:"version"`
	Languages []string `json:"languages"` // normalised language names, e.g. "python", "bash"
	// RemoteKernels says the kernels may run on another machine (a
	// gateway on a cluster), whose directories the host cannot see: the
	// host checks no directory for them itself, and a context's cwd is
	// applied where its kernel runs.
	RemoteKernels bool `json:"remote_kernels,omitempty"`
}

// KernelSpec says what kernel to start.
type KernelSpec struct {
	Language string // normalised (see NormalizeLanguage)
	Cwd      string // working directory for the interpreter
}

// Kernel is one running, stateful interpreter session.
//
// Its lifecycle, in order:
//
//  1. StartKernel returns it idle and ready.
//  2. Execute sends one request. The engine never sends a second request before
//     the kernel has reported the first finished, i.e. sent both an
//     execute_reply and a status idle whose ParentID is the request's MsgID.
//     (The kernel is never asked to queue user code behind other user code.)
//  3. Messages delivers every message the kernel emits, in kernel order. Each
//     message produced for a request carries that request's MsgID as ParentID.
//     Kernel-wide events (the kernel died, restarted or its connection was lost)
//     are StatusMessages with ParentID "".
//  4. Interrupt asks the running request to stop (SIGINT, or the Jupyter
//     interrupt call). It returns once the interrupt was delivered, not when the
//     request has ended: the request still reports reply and idle.
//  5. Restart replaces the interpreter with a fresh one of the same language.
//     Before it returns it emits a status message with State StateRestarting and
//     ParentID ""; no further message of an earlier request is delivered.
//     Restart also recovers a kernel that reported StateDead.
//  6. Shutdown stops the interpreter and releases everything the kernel holds;
//     afterwards Messages is closed. Shutdown is safe to call more than once.
//
// When a kernel is lost for good (its connection or plugin is gone and cannot
// come back) the transport closes the Messages channel without Shutdown. The
// engine then ends in-flight work with an error and, on the next restart of the
// context, starts a new kernel through the Transport.
//
// All methods are safe for concurrent use. Each method's doc says what its
// error means to the engine; an error that is the client's doing is an *Error
// of its kind, any other error is reported to the client as its text.
type Kernel interface {
	// Execute sends req and returns once the kernel has it; everything the
	// request causes comes on Messages. ctx bounds the send only.
	//
	// An error means the request was not sent: the engine ends the execution
	// at once with an error line and expects no message for req.MsgID (any
	// that still come are dropped). An *Error of KindTooLarge (the request is
	// over a limit of the transport) reaches the client as CodeTooLarge; any
	// other error as a lost connection (WebSocketError). If the kernel was
	// lost meanwhile, close Messages too: the engine then says the kernel is
	// gone and starts a new one at the next execution.
	Execute(ctx context.Context, req ExecuteRequest) error

	// Messages returns the one channel of the kernel's messages, the same on
	// every call. It is closed after Shutdown, or when the kernel is lost
	// for good.
	Messages() <-chan Message

	// Interrupt interrupts the running request, if any (none: it does
	// nothing and returns nil). An error means the interrupt was not
	// delivered: the engine logs it and, when it interrupted for a timeout or
	// a client that left, restarts the kernel once Config.InterruptGrace has
	// passed without reply and idle; for a client's interrupt call the error
	// is the answer (HTTP 500).
	Interrupt(ctx context.Context) error

	// Restart replaces the interpreter (see the lifecycle above). An error
	// means the kernel is not usable: the engine calls Shutdown and starts a
	// new kernel through Transport.StartKernel instead. ctx bounds the restart.
	Restart(ctx context.Context) error

	// Shutdown stops the kernel. An error is logged and reported to whoever
	// deleted the context (HTTP 500); the engine forgets the kernel either
	// way, so Shutdown must release what it holds even when it fails.
	Shutdown(ctx context.Context) error
}

// ExecuteRequest is one request to run code on a kernel.
type ExecuteRequest struct {
	MsgID string // unique id; every message the request causes carries it as ParentID
	Code  string
	// Silent marks the engine's own helper requests (cwd, env set/reset): the
	// kernel must not count them as executions nor store them in history. Their
	// output is dropped by the engine.
	Silent bool
}

// MessageType is the kind of a kernel message. The names and meanings are those
// of the Jupyter messaging protocol 5.x, so a Jupyter transport maps them 1:1.
type MessageType string

const (
	MsgExecuteInput      MessageType = "execute_input"       // the kernel accepted the request: ExecutionCount
	MsgStream            MessageType = "stream"              // Name ("stdout"/"stderr"), Text
	MsgExecuteResult     MessageType = "execute_result"      // Data, ExecutionCount: the main result
	MsgDisplayData       MessageType = "display_data"        // Data: a rich display
	MsgUpdateDisplayData MessageType = "update_display_data" // Data: an update of an earlier display
	MsgError             MessageType = "error"               // EName, EValue, Traceback
	MsgExecuteReply      MessageType = "execute_reply"       // Status ("ok", "error", "aborted"), ExecutionCount, and EName/EValue/Traceback on error
	MsgStatus            MessageType = "status"              // State
)

// Kernel states carried by status messages.
const (
	StateBusy       = "busy"
	StateIdle       = "idle"
	StateRestarting = "restarting" // the interpreter was replaced: its state, cwd and env are gone
	StateDead       = "dead"       // the interpreter died; Restart brings it back
	// StateDisconnected says the connection to the kernel dropped; requests in
	// flight will get no more messages. The transport reconnects by itself.
	StateDisconnected = "disconnected"
)

// Reply statuses carried by execute_reply.
const (
	ReplyOK      = "ok"
	ReplyError   = "error"
	ReplyAborted = "aborted"
)

// Message is one message from a kernel. Only the fields of its Type are set.
// The JSON form is what the subprocess drivers write; the plugin protocol
// carries a Message field by field in protobuf (transport.proto's Message),
// only the Data values as their raw JSON.
type Message struct {
	ParentID  string      `json:"parent_id,omitempty"`
	Type      MessageType `json:"type"`
	Timestamp string      `json:"timestamp,omitempty"` // ISO-8601, the kernel's clock; the engine fills it in when empty

	ExecutionCount int `json:"execution_count,omitempty"`

	Name string `json:"name,omitempty"` // stream name: "stdout" or "stderr"
	Text string `json:"text,omitempty"` // stream text
	// Lost, on a stream message that announces it, is how many messages of
	// the request the transport knows were lost before they reached it (for
	// kernelhost_kernel_messages_lost_total).
	Lost int `json:"lost,omitempty"`

	// Data is a MIME bundle, each value kept as the raw JSON the kernel sent so
	// numbers and nulls pass through unchanged.
	Data map[string]json.RawMessage `json:"data,omitempty"`

	EName     string   `json:"ename,omitempty"`
	EValue    string   `json:"evalue,omitempty"`
	Traceback []string `json:"traceback,omitempty"`

	Status string `json:"status,omitempty"` // execute_reply status
	State  string `json:"state,omitempty"`  // status execution_state
}
