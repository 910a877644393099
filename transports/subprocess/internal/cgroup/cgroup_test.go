package cgroup

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kernelhost/kernelhost/internal/testkit"
)

// A cgroup left under the name this process is about to use, by an earlier
// process with the same pid that was killed before it removed it (pids wrap
// during a long test run), must not fail the next interpreter's start.
func TestCgroupNameLeftByAnEarlierProcess(t *testing.T) {
	if base() == "" {
		testkit.Missingf(t, "no writable cgroup v2 here; CI's machine offers one")
	}
	stale := filepath.Join(base(), fmt.Sprintf("kernelhost-%d-%d", os.Getpid(), seq.Load()+1))
	if err := os.Mkdir(stale, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(stale) })
	c, err := newV2Group()
	if err != nil {
		t.Fatalf("newV2Group with an empty cgroup left under its name: %v", err)
	}
	if c.dir != stale {
		t.Errorf("made %s, want the freed name %s", c.dir, stale)
	}
	if err := c.kill(time.Second); err != nil {
		t.Errorf("kill: %v", err)
	}
}
