package engine

import "context"

// EnvPolicy decides, per execution and before anything reaches the kernel,
// which per-request env vars are allowed, rewritten or refused. The WebAssembly
// policy host in plugins/policy implements it; core only calls it.
type EnvPolicy interface {
	// Evaluate returns the decision for one execution. An error (the policy
	// itself failed: trapped, timed out, answered garbage) rejects the
	// execution; its message names the policy and what happened.
	Evaluate(ctx context.Context, in PolicyInput) (PolicyDecision, error)
}

// PolicyInput is what a policy sees of an execution.
type PolicyInput struct {
	ContextID string            `json:"context_id"`
	Language  string            `json:"language"`
	Cwd       string            `json:"cwd"`
	EnvVars   map[string]string `json:"env_vars"`   // the request's per-execution env vars
	GlobalEnv map[string]string `json:"global_env"` // the context's global env vars
	Metadata  map[string]string `json:"metadata"`   // request metadata (e.g. request id, remote address)
}

// PolicyDecision is a policy's answer. When Rejections is non-empty the
// execution is refused with those reasons; otherwise EnvVars (nil means
// unchanged) are the per-request env vars that will be applied.
type PolicyDecision struct {
	EnvVars    map[string]string `json:"env_vars,omitempty"`
	Rejections []Rejection       `json:"rejections,omitempty"`
}

// Rejection says why one key was refused.
type Rejection struct {
	Key    string `json:"key"`
	Reason string `json:"reason"`
}
