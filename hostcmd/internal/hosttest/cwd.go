package hosttest

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// CheckCwd: code of a context created with dir as its cwd runs there, code
// of the default context in the host's cwd; a missing cwd is a 400 that
// names it and leaves no context.
func CheckCwd(t *testing.T, h *Host, dir string) {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"language": "python", "cwd": dir})
	c := h.CreateContext(string(body))
	if c.Cwd != dir || c.Language != "python" {
		t.Fatalf("created %+v, want cwd %s", c, dir)
	}
	if got := Stdout(h.Run(map[string]any{"code": "import os; print(os.getcwd())", "context_id": c.ID})); got != dir+"\n" {
		t.Fatalf("cwd %q, want %q", got, dir)
	}
	if got := Stdout(h.Run(map[string]any{"code": "import os; print(os.getcwd())"})); got != h.Cwd()+"\n" {
		t.Fatalf("default context cwd %q, want %s", got, h.Cwd())
	}
	before := h.Contexts()
	status, text := h.Do("POST", "/contexts", `{"cwd":"/does/not/exist"}`)
	if status != http.StatusBadRequest || !strings.Contains(text, "/does/not/exist") {
		t.Fatalf("missing cwd: %d %q, want 400 naming it", status, text)
	}
	if after := h.Contexts(); len(after) != len(before) {
		t.Fatalf("a failed create left a context: %+v", after)
	}
}
