package policysdk_test

import (
	"fmt"
	"strings"

	"github.com/kernelhost/kernelhost/plugins/policy/policysdk"
)

// evaluate is a whole policy: it refuses SECRET_* keys and sets TZ=UTC when
// the request does not set TZ. In a module it is registered with
// policysdk.Handle(evaluate) from an init function.
func evaluate(in policysdk.Input) policysdk.Decision {
	var rej []policysdk.Rejection
	for k := range in.EnvVars {
		if strings.HasPrefix(k, "SECRET_") {
			rej = append(rej, policysdk.Rejection{Key: k, Reason: "secrets come from the sandbox, not per request"})
		}
	}
	if len(rej) > 0 {
		return policysdk.Reject(rej...)
	}
	if _, ok := in.EnvVars["TZ"]; ok {
		return policysdk.Allow()
	}
	env := map[string]string{"TZ": "UTC"}
	for k, v := range in.EnvVars {
		env[k] = v
	}
	return policysdk.Rewrite(env) // the new, complete set of per-request env vars
}

// Run evaluates a policy on an input document exactly as the module's
// export does, so a policy can be tried and unit-tested with plain go test
// before it is built for wasm. The output document is what the host reads:
// env_vars null leaves the request's env vars as they are.
func Example() {
	for _, input := range []string{
		`{"env_vars":{"SECRET_TOKEN":"s3cr3t"},"language":"python"}`,
		`{"env_vars":{"TZ":"Europe/Paris"},"language":"python"}`,
		`{"env_vars":{},"language":"bash"}`,
	} {
		out, err := policysdk.Run(evaluate, []byte(input))
		if err != nil {
			fmt.Println("error:", err)
			continue
		}
		fmt.Println(string(out))
	}
	// Output:
	// {"env_vars":null,"rejections":[{"key":"SECRET_TOKEN","reason":"secrets come from the sandbox, not per request"}]}
	// {"env_vars":null}
	// {"env_vars":{"TZ":"UTC"}}
}

// A policy that panics, or an input that is not the ABI's JSON, is an error
// that the host reports with the module's name; the policy never sees it.
func ExampleRun_errors() {
	panics := func(policysdk.Input) policysdk.Decision { panic("config is not valid") }
	_, err := policysdk.Run(panics, []byte(`{"env_vars":{}}`))
	fmt.Println(err)
	_, err = policysdk.Run(evaluate, []byte(`{"env_vars":`))
	fmt.Println(err)
	// Output:
	// policy panicked: config is not valid
	// decode input: policysdk: malformed input JSON
}

// DecodeJSON reads a policy's config (Input.Config) without encoding/json,
// which would add about a megabyte to the module.
func ExampleDecodeJSON() {
	cfg, err := policysdk.DecodeJSON(`{"deny": ["PATH", "LD_PRELOAD"], "max": 3}`)
	if err != nil {
		fmt.Println(err)
		return
	}
	m := cfg.(map[string]any)
	for _, k := range m["deny"].([]any) {
		fmt.Println("deny", k.(string))
	}
	fmt.Println("max", m["max"].(float64))
	// Output:
	// deny PATH
	// deny LD_PRELOAD
	// max 3
}
