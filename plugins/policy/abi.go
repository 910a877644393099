package policy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"unicode/utf8"

	"github.com/kernelhost/kernelhost/core/engine"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
)

// ABI v1 names (docs/policy-abi.md). A future incompatible ABI gets new names,
// so a module says which version it implements by what it exports.
const (
	importModule   = "kernelhost_policy_v1"
	evaluateExport = "kernelhost_policy_v1_evaluate"
	memoryExport   = "memory"
)

// callState is one evaluation's input and answer, reached by the host
// functions through the call's context.
type callState struct {
	input     []byte
	output    []byte
	wrote     bool
	maxOutput int
	err       *ModuleError // set by a host function that aborted the call
}

type callStateKey struct{}

// abortCall stops the guest from inside a host function. wazero turns the panic
// into the error Call returns; the recorded err is what the caller reports.
type abortCall struct{}

func stateOf(ctx context.Context) *callState {
	s, _ := ctx.Value(callStateKey{}).(*callState)
	return s
}

// instantiateHostModule provides the two imports every v1 module may use.
func instantiateHostModule(ctx context.Context, rt wazero.Runtime) error {
	i32 := api.ValueTypeI32
	_, err := rt.NewHostModuleBuilder(importModule).
		NewFunctionBuilder().
		WithGoModuleFunction(api.GoModuleFunc(readInput), []api.ValueType{i32, i32}, []api.ValueType{i32}).
		WithParameterNames("ptr", "len").
		Export("read_input").
		NewFunctionBuilder().
		WithGoModuleFunction(api.GoModuleFunc(writeOutput), []api.ValueType{i32, i32}, []api.ValueType{i32}).
		WithParameterNames("ptr", "len").
		Export("write_output").
		Instantiate(ctx)
	return err
}

// readInput copies min(len, input length) bytes of the input to the guest's
// buffer at ptr and returns how many it copied.
func readInput(ctx context.Context, m api.Module, stack []uint64) {
	s := stateOf(ctx)
	ptr, n := api.DecodeU32(stack[0]), api.DecodeU32(stack[1])
	if s == nil { // called outside an evaluation (e.g. from _initialize)
		stack[0] = 0
		return
	}
	if int(n) > len(s.input) {
		n = uint32(len(s.input))
	}
	if !m.Memory().Write(ptr, s.input[:n]) {
		s.err = &ModuleError{Kind: ErrTrap, Detail: fmt.Sprintf("read_input(%d, %d) is outside the module's memory", ptr, n)}
		panic(abortCall{})
	}
	stack[0] = uint64(n)
}

// writeOutput copies the guest's answer out of its memory. It may be called
// once per evaluation.
func writeOutput(ctx context.Context, m api.Module, stack []uint64) {
	s := stateOf(ctx)
	ptr, n := api.DecodeU32(stack[0]), api.DecodeU32(stack[1])
	if s == nil {
		stack[0] = 0
		return
	}
	switch {
	case s.wrote:
		s.err = &ModuleError{Kind: ErrBadOutput, Detail: "write_output called more than once"}
	case int(n) > s.maxOutput:
		s.err = &ModuleError{Kind: ErrBadOutput, Detail: fmt.Sprintf("output of %d bytes exceeds the %d-byte limit", n, s.maxOutput)}
	default:
		b, ok := m.Memory().Read(ptr, n)
		if !ok {
			s.err = &ModuleError{Kind: ErrTrap, Detail: fmt.Sprintf("write_output(%d, %d) is outside the module's memory", ptr, n)}
			break
		}
		// Copy: the view aliases guest memory, which the guest reuses.
		s.output = append(s.output[:0], b...)
		s.wrote = true
		stack[0] = 0
		return
	}
	panic(abortCall{})
}

// The input document is written by hand, not with encoding/json: it is on
// every evaluation's path and reflection-based encoding was the largest host
// cost. The bytes are exactly what encoding/json (with HTML escaping off)
// would write; TestInputMatchesEncodingJSON holds that. The member order is
// part of the ABI (the canonical layout in docs/policy-abi.md).

// inputEncoder builds input documents in buffers reused across evaluations
// (Chain.Evaluate takes one from a pool): the document, the part after
// env_vars (the same for every module of a chain) and the sorted keys of the
// map being written.
type inputEncoder struct {
	doc, tail []byte
	keys      []string
}

var inputEncoders = sync.Pool{New: func() any { return new(inputEncoder) }}

// maxPooledInput: an encoder that held a larger document is not pooled.
const maxPooledInput = 64 << 10

func (e *inputEncoder) release() {
	if cap(e.doc) > maxPooledInput || cap(e.tail) > maxPooledInput {
		return
	}
	clear(e.keys[:cap(e.keys)]) // do not keep the caller's strings alive
	inputEncoders.Put(e)
}

// encodeTail writes `"global_env":{...},...,"metadata":{...}}`: the input
// document after the config and env_vars members.
func (e *inputEncoder) encodeTail(in engine.PolicyInput) {
	b := append(e.tail[:0], `"global_env":`...)
	b = e.appendStrMap(b, in.GlobalEnv)
	b = append(b, `,"context_id":`...)
	b = appendStr(b, in.ContextID)
	b = append(b, `,"language":`...)
	b = appendStr(b, in.Language)
	b = append(b, `,"cwd":`...)
	b = appendStr(b, in.Cwd)
	b = append(b, `,"metadata":`...)
	b = e.appendStrMap(b, in.Metadata)
	e.tail = append(b, '}')
}

// build returns {"config":...,"env_vars":{...},<tail>; the result is valid
// until the next build.
func (e *inputEncoder) build(configJSON []byte, env map[string]string) []byte {
	b := append(e.doc[:0], `{"config":`...)
	b = append(b, configJSON...)
	b = append(b, `,"env_vars":`...)
	b = e.appendStrMap(b, env)
	b = append(b, ',')
	e.doc = append(b, e.tail...)
	return e.doc
}

// appendStrMap writes m as an object with sorted keys; nil is {}.
func (e *inputEncoder) appendStrMap(b []byte, m map[string]string) []byte {
	keys := e.keys[:0]
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	b = append(b, '{')
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendStr(b, k)
		b = append(b, ':')
		b = appendStr(b, m[k])
	}
	e.keys = keys
	return append(b, '}')
}

const hexDigits = "0123456789abcdef"

// appendStr writes s as a JSON string the way encoding/json does with HTML
// escaping off: short escapes for \b \f \n \r \t, \u00XX for other
// control bytes, \u2028 and \u2029 escaped, invalid UTF-8 as \ufffd.
func appendStr(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// output is the v1 answer. A null or absent env_vars means "unchanged".
type output struct {
	EnvVars    map[string]string  `json:"env_vars"`
	Rejections []engine.Rejection `json:"rejections"`
}

func decodeOutput(b []byte) (output, error) {
	var out output
	b = bytes.TrimSpace(b)
	// The common answer, allow unchanged, skips the JSON decoder.
	if s := string(b); s == `{}` || s == `{"env_vars":null}` {
		return out, nil
	}
	if len(b) == 0 || b[0] != '{' {
		return output{}, fmt.Errorf("not a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&out); err != nil {
		return output{}, err
	}
	if dec.InputOffset() != int64(len(b)) {
		return output{}, fmt.Errorf("data after the JSON object")
	}
	for k := range out.EnvVars {
		if k == "" {
			return output{}, fmt.Errorf("env_vars has an empty key")
		}
	}
	return out, nil
}
