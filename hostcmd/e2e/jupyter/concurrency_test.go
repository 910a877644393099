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
	"github.com/kernelhost/kernelhost/transports/jupyter/jupytertest"
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
// succeeds, and the tail stays under tailP99 and tailMax. A machine too
// loaded for those (a CI run's other suites on the same 2 cores) makes bare
// websockets on the same server as slow: then the same load runs on 8 of
// them (the floor, no host) and the host's tail, the better of a run before
// and one after (the machine's load drifts over seconds), must stay within a
// multiple of the floor's.
func testJupyterConcurrent8x50(t *testing.T, srv *jupytertest.Server, h *hosttest.Host) {
	const contexts, execs = 8, 50
	tr := &http.Transport{DisableCompression: true, MaxIdleConnsPerHost: contexts}
	t.Cleanup(tr.CloseIdleConnections)
	client := &http.Client{Transport: tr, Timeout: 60 * time.Second}
	ids := make([]string, contexts)
	if err := testkit.Concurrently(contexts, func(i int) error {
		var err error
		ids[i], err = createContext(client, h.URL())
		if err != nil {
			return err
		}
		return hostOneTwo(client, h.URL(), ids[i]) // warm: the first execution imports
	}); err != nil {
		t.Fatal(err)
	}
	viaHost := func() latencies {
		l, err := concurrently(contexts, execs, func(i int) error { return hostOneTwo(client, h.URL(), ids[i]) })
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	host := viaHost()
	if host.p99() <= tailP99 && host.max() <= tailMax {
		t.Logf("FIGURE jupyter 8x50 via the plugin: %v (bounds p99 %v, max %v)", host, tailP99, tailMax)
		return
	}
	direct := &directJupyter{srv: srv}
	wss := make([]*directKernel, contexts)
	if err := testkit.Concurrently(contexts, func(i int) error {
		var err error
		if wss[i], err = direct.start(t); err != nil {
			return err
		}
		return wss[i].oneTwo()
	}); err != nil {
		t.Fatal(err)
	}
	floor, err := concurrently(contexts, execs, func(i int) error { return wss[i].oneTwo() })
	if err != nil {
		t.Fatal(err)
	}
	again := viaHost()
	t.Logf("FIGURE jupyter 8x50 via the plugin: %v, then %v; bare websockets between: %v (bounds p99 %v, max %v; or the bare websockets' p99 × %.0f and max × %.0f, + %v)",
		host, again, floor, tailP99, tailMax, hostOverFloor, maxOverFloor, floorSlack)
	p99, maxT := min(host.p99(), again.p99()), min(host.max(), again.max())
	if limit := time.Duration(hostOverFloor*float64(floor.p99())) + floorSlack; p99 > limit {
		t.Errorf("p99 via the host %v, bare websockets %v: want at most %v", p99, floor.p99(), limit)
	}
	if limit := time.Duration(maxOverFloor*float64(floor.max())) + floorSlack; maxT > limit {
		t.Errorf("max via the host %v, bare websockets %v: want at most %v", maxT, floor.max(), limit)
	}
}

// The tail of 8×50 `1+1` via the host. 8 kernels on 2 cores make each round
// trip wait for the others' (tens of ms at 160-270 exec/s): the p99 and max
// bounds leave several times that, and the outliers of issue 27 exceed them.
// On a loaded machine the host's added hops (HTTP, the plugin) may at most
// double the floor's p99 (triple its max), plus floorSlack for the scheduling
// noise of 400 samples. Figures and reasoning: docs/jupyter.md.
const (
	tailP99       = 150 * time.Millisecond
	tailMax       = 400 * time.Millisecond
	hostOverFloor = 2.0
	maxOverFloor  = 3.0 // one sample each: the max moves more than the p99
	floorSlack    = 100 * time.Millisecond
)

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
