// Package policysdk is the one package a Go policy author imports. A policy is
// a single function over plain Go types:
//
//	func init() { policysdk.Handle(evaluate) }
//	func main() {}
//	func evaluate(in policysdk.Input) policysdk.Decision { ... }
//
// built with
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o mypolicy.wasm .
//
// The package implements the kernelhost policy ABI v1 (docs/policy-abi.md) for
// the author: it exports kernelhost_policy_v1_evaluate, copies the input in and
// the answer out through the host's imports, and encodes the JSON. Register the
// function in init, not main: a -buildmode=c-shared module is a reactor whose
// _initialize runs package init functions but never main.
//
// Everything except the wasm export also builds natively, so a policy's logic
// can be unit-tested with plain `go test` (see Run).
package policysdk

import "errors"

// Input is what a policy sees of one execution. It is only valid until the
// policy function returns: in the module its strings share a buffer and its
// maps are reused by the next call (that keeps a call free of allocations,
// which cost tens of µs each call under wasm). Copy what you keep
// (strings.Clone, maps.Clone); returning Rewrite(in.EnvVars) after changing
// it is fine.
type Input struct {
	// Config is this module's config value as the operator set it
	// (KERNELHOST_POLICY_CONFIG_<NAME> or <name>.config next to the .wasm);
	// empty when none was given. Its format is the policy's own choice.
	Config string `json:"config"`
	// EnvVars are the request's per-execution env vars, as rewritten by the
	// policies that ran before this one in the chain.
	EnvVars map[string]string `json:"env_vars"`
	// GlobalEnv are the context's global env vars (read-only for policies).
	GlobalEnv map[string]string `json:"global_env"`
	ContextID string            `json:"context_id"`
	Language  string            `json:"language"`
	Cwd       string            `json:"cwd"`
	// Metadata is request metadata (e.g. request id, remote address).
	Metadata map[string]string `json:"metadata"`
}

// Decision is a policy's answer. Non-empty Rejections refuse the execution.
// Otherwise a nil EnvVars leaves the per-request env vars unchanged and a
// non-nil one (even empty) replaces them as a whole.
type Decision struct {
	EnvVars    map[string]string `json:"env_vars"`
	Rejections []Rejection       `json:"rejections,omitempty"`
}

// Rejection says why one key was refused. Key may be empty for a reason that
// concerns the whole request.
type Rejection struct {
	Key    string `json:"key"`
	Reason string `json:"reason"`
}

// Func is a policy.
type Func func(Input) Decision

// Allow leaves the env vars as they are.
func Allow() Decision { return Decision{} }

// Rewrite replaces the per-request env vars with env.
func Rewrite(env map[string]string) Decision {
	if env == nil {
		env = map[string]string{}
	}
	return Decision{EnvVars: env}
}

// Reject refuses the execution with the given reasons.
func Reject(r ...Rejection) Decision { return Decision{Rejections: r} }

var handler Func

// Handle registers the module's policy. Call it once, from an init function.
func Handle(f Func) { handler = f }

// Run evaluates f on one ABI input document and returns the ABI output
// document, exactly as the wasm export does. A panic in f, or an input that is
// not valid JSON, is returned as an error (the export turns it into a
// non-zero status with the message as output).
func Run(f Func, input []byte) (out []byte, err error) {
	return run(f, input, nil, nil)
}

// run is Run appending the output to dst. With reuse set (the wasm export),
// the Input is call-scoped: see decodeInput.
func run(f Func, input []byte, reuse *scratch, dst []byte) (out []byte, err error) {
	in, err := decodeInput(input, reuse)
	if err != nil {
		return nil, errors.New("decode input: " + err.Error())
	}
	defer func() {
		if r := recover(); r != nil {
			out, err = nil, errors.New("policy panicked: "+panicText(r))
		}
	}()
	return appendDecision(dst, f(in)), nil
}

func panicText(r any) string {
	switch v := r.(type) {
	case string:
		return v
	case error:
		return v.Error()
	}
	return "non-string panic value"
}
