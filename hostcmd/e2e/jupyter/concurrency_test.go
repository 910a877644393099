//go:build linux

package jupyter_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kernelhost/kernelhost/hostcmd/internal/hosttest"
	"github.com/kernelhost/kernelhost/internal/testkit"
)

// latencies of a concurrent load: every execution's round trip, and the wall time.
type latencies struct {
	all     []time.Duration
	elapsed time.Duration
}

func (l latencies) String() string {
	q := func(q float64) time.Duration { return testkit.Quantile(l.all, q).Round(time.Microsecond) }
	return fmt.Sprintf("%.0f exec/s, p50 %v p99 %v max %v", float64(len(l.all))/l.elapsed.Seconds(), q(0.5), q(0.99), l.max().Round(time.Microsecond))
}

func (l latencies) p99() time.Duration { return testkit.Quantile(l.all, 0.99) }

func (l latencies) max() time.Duration { return slices.Max(l.all) }

// concurrently runs n workers × execs sequential calls of one at once and
// times every call.
func concurrently(n, execs int, one func(i int) error) (latencies, error) {
	took := make([][]time.Duration, n)
	began := time.Now()
	err := testkit.Concurrently(n, func(i int) error {
		for e := range execs {
			t0 := time.Now()
			if err := one(i); err != nil {
				return fmt.Errorf("worker %d, execution %d: %w", i, e, err)
			}
			took[i] = append(took[i], time.Since(t0))
		}
		return nil
	})
	return latencies{slices.Concat(took...), time.Since(began)}, err
}

// testJupyterConcurrent8x50 runs 8 contexts × 50 sequential `1+1` at once over
// HTTP, through the plugin as `make run-jupyter` runs: every execution
// answers 2 and ends its stream. Its latency tail is a figure of
// BenchmarkJupyter/Concurrent8x50 (p99 and max, host and bare websockets
// side by side), not a bound here: on CI's loaded cores it is the machine's.
func testJupyterConcurrent8x50(t *testing.T, h *hosttest.Host) {
	const contexts, execs = 8, 50
	tr := &http.Transport{DisableCompression: true, MaxIdleConnsPerHost: contexts}
	t.Cleanup(tr.CloseIdleConnections)
	client := &http.Client{Transport: tr, Timeout: 60 * time.Second}
	ids := make([]string, contexts)
	if err := testkit.Concurrently(contexts, func(i int) error {
		var err error
		ids[i], err = createContext(client, h.URL())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	l, err := concurrently(contexts, execs, func(i int) error { return hostOneTwo(client, h.URL(), ids[i]) })
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("FIGURE jupyter 8x50 via the plugin: %v", l)
}

// createContext makes a python context via POST /contexts and returns its id.
func createContext(client *http.Client, url string) (string, error) {
	resp, err := client.Post(url+"/contexts", "application/json", strings.NewReader(`{}`))
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("POST /contexts: %d %v %s", resp.StatusCode, err, b)
	}
	var c hosttest.ContextInfo
	if err := json.Unmarshal(b, &c); err != nil {
		return "", err
	}
	return c.ID, nil
}
