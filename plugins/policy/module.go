package policy

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/sys"
)

const pageSize = 65536

// module is one compiled policy and its pool of instances. Instances are
// reused across calls (instantiating a Go module runs its runtime's
// _initialize, far more than one evaluation costs) but never shared: a call
// takes one out of the pool and returns it only if the call went well.
type module struct {
	name, path string
	configJSON []byte // the config value as a JSON string
	rt         wazero.Runtime
	compiled   wazero.CompiledModule
	opts       *Options

	idle  chan *instance // instances ready for a call
	slots chan struct{}  // one token per live instance: bounds memory

	started atomic.Int64 // instances started so far (tests, benchmarks)
}

type instance struct {
	mod  api.Module
	eval api.Function
	mem  api.Memory
	uses int

	// Per-call state, made once per instance and reused by every call (an
	// instance serves one call at a time): the host functions find state
	// through ctx, the call's parameter and result go through stack, and
	// timer is the per-call deadline, re-armed with Reset. Nothing is
	// allocated per call.
	state       callState
	ctx         context.Context
	stack       [1]uint64
	timer       *time.Timer
	deadlineHit atomic.Bool
	cancelled   func() // closes the instance when the caller gives up
}

// maxKeptOutput: an instance keeps its output buffer for the next call
// unless the last answer was larger than this.
const maxKeptOutput = 64 << 10

func newInstance(mod api.Module) *instance {
	inst := &instance{mod: mod, eval: mod.ExportedFunction(evaluateExport), mem: mod.ExportedMemory(memoryExport)}
	// The call context carries no cancellation and none of the caller's
	// values: the deadline and the caller's cancellation close the instance
	// from the timer and a context.AfterFunc instead (see evaluate).
	inst.ctx = context.WithValue(context.Background(), callStateKey{}, &inst.state)
	inst.cancelled = func() { _ = inst.mod.CloseWithExitCode(context.Background(), sys.ExitCodeContextCanceled) }
	return inst
}

// expire is the deadline timer's function: it marks the call as stopped by
// the deadline and closes the instance, which makes the running code exit at
// its next call or loop back-edge.
func (inst *instance) expire() {
	inst.deadlineHit.Store(true)
	_ = inst.mod.CloseWithExitCode(context.Background(), sys.ExitCodeDeadlineExceeded)
}

// armDeadline starts the per-call deadline; disarmDeadline stops it and
// reports whether it had already fired (the instance is then closed or
// closing).
func (inst *instance) armDeadline(d time.Duration) {
	if inst.timer == nil {
		inst.timer = time.AfterFunc(d, inst.expire)
		return
	}
	inst.timer.Reset(d)
}

func (inst *instance) disarmDeadline() (fired bool) { return !inst.timer.Stop() }

// loadModule reads, compiles and checks one module, and instantiates a first
// instance so that a module that cannot start fails at load, not on a request.
func loadModule(ctx context.Context, rt wazero.Runtime, mc ModuleConfig, opts *Options) (*module, error) {
	m := &module{name: mc.Name, path: mc.Path, rt: rt, opts: opts,
		idle: make(chan *instance, opts.MaxInstances), slots: make(chan struct{}, opts.MaxInstances)}
	loadErr := func(format string, args ...any) error {
		err := fmt.Errorf(format, args...)
		return &ModuleError{Module: m.name, Path: m.path, Kind: ErrLoad, Detail: err.Error(), Err: errors.Unwrap(err)}
	}
	cfg, err := mc.config()
	if err != nil {
		return nil, loadErr("%w", err)
	}
	m.configJSON = appendStr(nil, cfg)
	bin, err := os.ReadFile(mc.Path)
	if err != nil {
		return nil, loadErr("%w", err)
	}
	if m.compiled, err = rt.CompileModule(ctx, bin); err != nil {
		return nil, loadErr("compile: %w", err)
	}
	if _, ok := m.compiled.ExportedMemories()[memoryExport]; !ok {
		return nil, loadErr("does not export %q", memoryExport)
	}
	fn, ok := m.compiled.ExportedFunctions()[evaluateExport]
	if !ok {
		return nil, loadErr("does not export %s (is it a v1 policy module?)", evaluateExport)
	}
	if p, r := fn.ParamTypes(), fn.ResultTypes(); len(p) != 1 || p[0] != api.ValueTypeI32 || len(r) != 1 || r[0] != api.ValueTypeI32 {
		return nil, loadErr("%s must have type (i32) -> i32", evaluateExport)
	}
	m.slots <- struct{}{}
	inst, err := m.instantiate(ctx)
	if err != nil {
		return nil, loadErr("instantiate: %s", firstLine(err.Error()))
	}
	m.idle <- inst
	return m, nil
}

// instantiate starts a fresh instance: anonymous (so there can be many), no
// files, no env, no args, stdio discarded, wazero's fake clocks and
// deterministic randomness (the defaults). _initialize is run if present:
// reactors such as Go's -buildmode=c-shared need it.
func (m *module) instantiate(ctx context.Context) (*instance, error) {
	ctx, cancel := context.WithTimeout(ctx, m.opts.StartTimeout)
	defer cancel()
	cfg := wazero.NewModuleConfig().WithName("").WithStartFunctions("_initialize")
	mod, err := m.rt.InstantiateModule(ctx, m.compiled, cfg)
	if err != nil {
		return nil, err
	}
	m.started.Add(1)
	return newInstance(mod), nil
}

// get takes an idle instance, or starts one if fewer than MaxInstances are
// live, or waits for one to come back.
func (m *module) get(ctx context.Context) (*instance, error) {
	select {
	case inst := <-m.idle:
		return inst, nil // the common case: no timer needed
	default:
	}
	ctx, cancel := context.WithTimeout(ctx, m.opts.StartTimeout)
	defer cancel()
	select {
	case inst := <-m.idle:
		return inst, nil
	case m.slots <- struct{}{}:
		inst, err := m.instantiate(ctx)
		if err != nil {
			<-m.slots
			return nil, err
		}
		return inst, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// put returns an instance to the pool, or drops it: after any failure (its
// state is unknown), when its memory has grown past RecycleMemoryBytes (Go
// guests never give memory back), or after MaxUses calls.
func (m *module) put(inst *instance, ok bool) {
	inst.uses++
	if ok && uint64(inst.mem.Size()) <= m.opts.RecycleMemoryBytes && inst.uses < m.opts.MaxUses {
		m.idle <- inst // never blocks: at most cap(slots) instances exist
		return
	}
	_ = inst.mod.Close(context.Background())
	<-m.slots
}

// evaluate runs one call on a pooled instance. Getting the instance (waiting
// for one, or starting one) is bounded by StartTimeout; the call itself by
// Timeout, so a cold start does not eat into the evaluation's deadline.
func (m *module) evaluate(ctx context.Context, input []byte) (output, error) {
	inst, err := m.get(ctx)
	if err != nil {
		return output{}, m.startError(ctx, err)
	}

	// The deadline and the caller's cancellation close the instance from a
	// timer and a context.AfterFunc rather than through a cancellable call
	// context, and the call context is the instance's own (it carries only
	// the call state): nothing is allocated per call. The runtime is built
	// WithCloseOnContextDone, so compiled code checks the closed flag at calls
	// and loop back-edges and a looping module stops either way. (wazero
	// still starts one short-lived watcher goroutine per call in that mode,
	// even for a context that cannot be cancelled: part of the floor.)
	s := &inst.state
	*s = callState{input: input, maxOutput: m.opts.MaxOutputBytes, output: s.output[:0]}
	inst.deadlineHit.Store(false)
	inst.armDeadline(m.opts.Timeout)
	var stopWatchingCaller func() bool
	if ctx.Done() != nil {
		stopWatchingCaller = context.AfterFunc(ctx, inst.cancelled)
	}
	inst.stack[0] = uint64(len(input))
	err = inst.eval.CallWithStack(inst.ctx, inst.stack[:])
	s.input = nil // the caller's buffer: not kept past the call
	// If either fired, the instance is closed or closing: it must not go back
	// to the pool, whatever the call returned.
	closed := inst.disarmDeadline()
	if stopWatchingCaller != nil {
		closed = !stopWatchingCaller() || closed
	}
	if err == nil && closed {
		err = errors.New("instance closed during the call")
	}
	if err != nil {
		e := m.callError(ctx, inst.deadlineHit.Load(), s, inst, err)
		m.put(inst, false)
		return output{}, e
	}
	if status := int32(inst.stack[0]); status != 0 {
		m.put(inst, false)
		msg := "no message"
		if s.wrote {
			msg = clip(string(s.output), 300)
		}
		return output{}, m.fail(ErrFailed, nil, "returned status %d: %s", status, msg)
	}
	if !s.wrote {
		m.put(inst, false)
		return output{}, m.fail(ErrBadOutput, nil, "returned without calling write_output")
	}
	out, err := decodeOutput(s.output)
	if err != nil {
		m.put(inst, false)
		return output{}, m.fail(ErrBadOutput, err, "malformed output: %s (output starts %q)", clip(err.Error(), 200), clip(string(s.output), 60))
	}
	if cap(s.output) > maxKeptOutput { // out does not alias it
		s.output = nil
	}
	m.put(inst, true)
	return out, nil
}

// startError classifies a failure to get an instance.
func (m *module) startError(parent context.Context, err error) error {
	switch {
	case parent.Err() != nil:
		return m.fail(ErrCanceled, parent.Err(), "caller gave up: %v", parent.Err())
	case errors.Is(err, context.DeadlineExceeded):
		return m.fail(ErrDeadline, err, "no instance could be started or freed within %v", m.opts.StartTimeout)
	}
	var exit *sys.ExitError
	if errors.As(err, &exit) && exit.ExitCode() == sys.ExitCodeDeadlineExceeded {
		return m.fail(ErrDeadline, err, "starting an instance took longer than %v", m.opts.StartTimeout)
	}
	return m.fail(ErrTrap, err, "start instance: %s", clip(err.Error(), 200))
}

func (m *module) fail(kind, err error, format string, args ...any) *ModuleError {
	return &ModuleError{Module: m.name, Path: m.path, Kind: kind, Detail: fmt.Sprintf(format, args...), Err: err}
}

// callError classifies a failed call: our deadline, the caller giving up, a
// host function aborting the call, or a trap (at the memory cap or not).
func (m *module) callError(parent context.Context, deadlineHit bool, s *callState, inst *instance, err error) error {
	if s.err != nil {
		s.err.Module, s.err.Path = m.name, m.path
		return s.err
	}
	var exit *sys.ExitError
	isExit := errors.As(err, &exit)
	switch {
	case parent.Err() != nil:
		return m.fail(ErrCanceled, parent.Err(), "caller gave up: %v", parent.Err())
	case deadlineHit || (isExit && exit.ExitCode() == sys.ExitCodeDeadlineExceeded):
		return m.fail(ErrDeadline, context.DeadlineExceeded, "stopped after the %v per-call deadline", m.opts.Timeout)
	}
	mem := ""
	if inst != nil {
		used, limit := uint64(inst.mem.Size()), uint64(m.opts.MemoryLimitPages)*pageSize
		if used+pageSize > limit {
			return m.fail(ErrMemoryLimit, err, "failed at the %d MiB memory cap: %s", limit>>20, clip(err.Error(), 200))
		}
		mem = fmt.Sprintf(" (memory %d KiB of %d MiB)", used>>10, limit>>20)
	}
	if isExit {
		return m.fail(ErrTrap, err, "exited with code %d%s", exit.ExitCode(), mem)
	}
	return m.fail(ErrTrap, err, "%s%s", clip(err.Error(), 200), mem)
}

func (m *module) close(ctx context.Context) {
	for {
		select {
		case inst := <-m.idle:
			_ = inst.mod.Close(ctx)
			<-m.slots
		default:
			return
		}
	}
}
