package sandbox_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/kernelhost/kernelhost/hostcmd/internal/hosttest"
)

// Issue 39, finding 3b, through the API and the plugin: a context created
// with cwd "/etc" (or "/../../etc") starts there and reads, but a write
// there fails with EROFS; one in the default cwd still writes
// (transports/subprocess's TestSandboxCwdOutsideTheWritableSetIsReadOnly
// covers pooled and forked starts, restarts and symlinks).
func TestContextCwdOutsideTheWritablePathsIsReadOnly(t *testing.T) {
	t.Parallel()
	hosttest.NeedSandbox(t)
	h := hosttest.Start(t, hosttest.ViaPlugin)
	probe := "kh-api-cwd-probe-" + strconv.Itoa(os.Getpid())
	t.Cleanup(func() { os.Remove(filepath.Join("/etc", probe)) })
	code := `import errno, os
try:
    open(` + strconv.Quote(probe) + `, 'w').close()
    r = 'wrote'
except OSError as e:
    r = errno.errorcode[e.errno]
print(r, os.getcwd(), os.path.exists('passwd'))`
	for _, tc := range []struct{ cwd, want string }{
		{"/etc", "EROFS /etc True\n"},
		{"/../../etc", "EROFS /etc True\n"},
		{h.Cwd(), "wrote " + h.Cwd() + " False\n"},
	} {
		body, _ := json.Marshal(map[string]string{"language": "python", "cwd": tc.cwd})
		c := h.CreateContext(string(body))
		if c.Cwd != tc.cwd {
			t.Errorf("created in %q, want %q", c.Cwd, tc.cwd)
		}
		if got := hosttest.Stdout(h.Run(map[string]any{"code": code, "context_id": c.ID})); got != tc.want {
			t.Errorf("cwd %s: %q, want %q", tc.cwd, got, tc.want)
		}
		if _, err := os.Stat(filepath.Join("/etc", probe)); err == nil {
			t.Fatalf("cwd %s: the cell wrote into the host's /etc", tc.cwd)
		}
	}
}
