// Command tzdefault is the example policy of docs/writing-a-policy.md: it
// refuses SECRET_* keys and sets TZ=UTC when it is unset.
package main

import (
	"strings"

	"github.com/kernelhost/kernelhost/plugins/policy/policysdk"
)

func evaluate(in policysdk.Input) policysdk.Decision {
	var rej []policysdk.Rejection
	for k := range in.EnvVars {
		if strings.HasPrefix(k, "SECRET_") {
			rej = append(rej, policysdk.Rejection{Key: k, Reason: "secrets are passed by the sandbox, not per request"})
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

// Register in init: a -buildmode=c-shared module runs init functions
// (through _initialize) but never main.
func init() { policysdk.Handle(evaluate) }

func main() {}
