package server_test

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/kernelhost/kernelhost/transports/testkit"
)

// Through the real plugin with its default pools: /metrics reports the
// pooled python and javascript interpreters and their memory; a new context
// takes the pooled one; shutting the host down ends every interpreter the
// plugin started, pooled ones included.
func TestPoolThroughPlugin(t *testing.T) {
	if _, err := exec.LookPath("node"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("node is not installed (Debian nodejs; make deps installs it)")
		}
		t.Skip("node is not installed")
	}
	h := startHost(t, viaPlugin)
	awaitPool := func(lang string) (rss float64) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for {
			s := h.scrapeMetrics(t, nil)
			if m := s.metric("kernelhost_pool_interpreters", "language", lang); m != nil && m.GetGauge().GetValue() == 1 {
				if size := s.value(t, "kernelhost_pool_size", "language", lang); size != 1 {
					t.Fatalf("%s pool size %v, want the default 1", lang, size)
				}
				return s.value(t, "kernelhost_pool_rss_bytes", "language", lang)
			}
			if time.Now().After(deadline) {
				t.Fatalf("no ready %s interpreter in the pool's gauges after 60 s", lang)
			}
			time.Sleep(20 * time.Millisecond) // nothing to wait on over HTTP but the next scrape
		}
	}
	for _, lang := range []string{"python", "javascript"} {
		if rss := awaitPool(lang); rss < 1<<20 {
			t.Errorf("%s pool rss %v bytes, want an interpreter's", lang, rss)
		}
	}
	before := descendants(h.PluginPID())
	c := h.createContext(`{"language": "python"}`)
	pid := h.pidOf(t, c.ID)
	if _, pooled := before[pid]; !pooled {
		t.Errorf("the new context runs pid %d, which was not running before it was created (pooled: %v)", pid, before)
	}
	all := descendants(h.PluginPID())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := h.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	pids := make([]int, 0, len(all))
	for p := range all {
		pids = append(pids, p)
	}
	testkit.AwaitGone(t, "the host's shutdown", 15*time.Second, pids...)
}
