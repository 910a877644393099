package faults_test

import (
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kernelhost/kernelhost/hostcmd/internal/hosttest"
	"github.com/kernelhost/kernelhost/hostcmd/settings"
)

// soakN is the isolation soak's number of executions (make soak SOAK=n):
// 10,000 by default.
var soakN = flag.Int("soak", 10000, "executions of TestIsolationSoak")

// Values with what env encoders get wrong: quotes of every kind, shell and
// Python syntax, newlines, backslashes, non-ASCII, line separators.
var soakValues = []string{
	`it's "quoted"`, "two\nlines\n", "tab\there", `back\slash\n`, "ünïcødé ✓ 𝄞 日本",
	"$HOME `id` $(id) ${X}", `'; import os; os._exit(1) #`, "\u2028sep\u2029", "", " spaced ", `{"json": [1]}`, "\r\ncrlf",
}

// The isolation soak: executions across 8 contexts, several clients per
// context at once, each with random per-request env vars that overlap other
// requests' keys and a global one. Every execution prints the SK_* env vars
// it sees as JSON, then numbered lines, and some raise on purpose. Checked:
// each saw exactly the global env plus its own vars (no leak from an earlier
// or concurrent request), each line arrived once and in order, and only the
// executions that raised have an error line (none aborted by another's).
func TestIsolationSoak(t *testing.T) {
	t.Parallel()
	global := map[string]string{"SK_G1": "global \"one\"\nü", "SK_G2": "global-two"}
	h := hosttest.Start(t, func(c *settings.Config) {
		c.GlobalEnv = global
		c.QueueDepth = 64
	})
	const contexts, clientsPerContext = 8, 4
	ids := []string{h.DefaultID("python")}
	for len(ids) < contexts {
		ids = append(ids, h.CreateContext(`{}`).ID)
	}
	keys := []string{"SK_A", "SK_B", "SK_C", "SK_D", "SK_E", "SK_G1"} // SK_G1 overrides the global
	var (
		next                                        atomic.Int64
		leaks, lost, aborted, raised, lines, failed atomic.Int64
		wg                                          sync.WaitGroup
	)
	began := time.Now()
	for c := range contexts * clientsPerContext {
		id := ids[c%contexts]
		rng := rand.New(rand.NewPCG(uint64(c), 6))
		wg.Go(func() {
			for next.Add(1) <= int64(*soakN) {
				env := map[string]string{}
				for _, k := range keys {
					if rng.IntN(3) == 0 {
						env[k] = soakValues[rng.IntN(len(soakValues))] + fmt.Sprint(rng.IntN(1000))
					}
				}
				n := 1 + rng.IntN(20)
				raise := rng.IntN(10) == 0
				code := fmt.Sprintf("import os, json\nprint(json.dumps({k: v for k, v in os.environ.items() if k.startswith('SK_')}, sort_keys=True))\nfor i in range(%d):\n    print(i)\n", n)
				if raise {
					code += "raise ValueError('on purpose')\n"
				}
				got := h.Run(map[string]any{"code": code, "context_id": id, "env_vars": env})
				want := maps.Clone(global)
				maps.Copy(want, env)
				out := hosttest.Stdout(got)
				first, rest, _ := strings.Cut(out, "\n")
				var seen map[string]string
				if err := json.Unmarshal([]byte(first), &seen); err != nil {
					failed.Add(1)
					t.Errorf("env JSON %q: %v", first, err)
					continue
				}
				if !maps.Equal(seen, want) {
					leaks.Add(1)
					t.Errorf("execution saw env %q, want %q", seen, want)
				}
				var b strings.Builder
				for i := range n {
					fmt.Fprintf(&b, "%d\n", i)
				}
				if rest != b.String() {
					lost.Add(1)
					t.Errorf("numbered lines %q, want 0..%d once each in order", rest, n-1)
				}
				lines.Add(int64(n))
				errs := hosttest.OfType(got, "error")
				switch {
				case raise && (len(errs) != 1 || errs[0].Str("name") != "ValueError"):
					failed.Add(1)
					t.Errorf("an execution that raised got errors %v", errs)
				case raise:
					raised.Add(1)
				case len(errs) > 0:
					aborted.Add(1)
					t.Errorf("an execution that did not raise got errors %v", errs)
				}
			}
		})
	}
	wg.Wait()
	took := time.Since(began)
	t.Logf("FIGURE %s: %d executions on %d contexts (%d clients each) in %s (%.0f/s); %d raised on purpose; %d numbered lines; leaks %d, lost or reordered %d, aborted by another %d, other failures %d",
		t.Name(), *soakN, contexts, clientsPerContext, took.Round(time.Millisecond), float64(*soakN)/took.Seconds(), raised.Load(), lines.Load(), leaks.Load(), lost.Load(), aborted.Load(), failed.Load())
}
