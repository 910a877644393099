package jupyter

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kernelhost/kernelhost/core"
)

// Enterprise Gateway cannot run here (it launches kernels on Kubernetes,
// YARN or Docker), so its behaviours at the HTTP level are played by
// fakeEG, a real HTTP server on loopback: the REST answers of EG 3.x with
// its default authorization (403 without KERNEL_USERNAME in the start
// request's env) and, when kernelUp is not nil, a start POST that blocks as
// EG's does while a remote kernel comes up, until kernelUp is closed (or the
// test ends). Its kernels have no websocket (404), which is enough for the
// protocol-level cases it serves.
type fakeEG struct {
	*httptest.Server
	kernelUp <-chan struct{}
	stop     chan struct{} // closed at cleanup: a start held for kernelUp ends

	mu      sync.Mutex
	starts  []startRequest // bodies of POST api/kernels
	deleted []string       // kernel ids of DELETE api/kernels/{id}
	created []string
}

func startFakeEG(t *testing.T, kernelUp <-chan struct{}) *fakeEG {
	eg := &fakeEG{kernelUp: kernelUp, stop: make(chan struct{})}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api", func(w http.ResponseWriter, r *http.Request) {
		// EG 3.2's answer: the Jupyter API's version, then its own.
		writeJSON(w, http.StatusOK, map[string]string{"version": "2.14.2", "gateway_version": "3.2.3"})
	})
	mux.HandleFunc("GET /api/kernelspecs", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"default": "python_kubernetes", "kernelspecs": map[string]any{
			"python_kubernetes": map[string]any{"name": "python_kubernetes", "spec": map[string]string{"language": "python", "display_name": "Python on Kubernetes"}},
		}})
	})
	mux.HandleFunc("POST /api/kernels", func(w http.ResponseWriter, r *http.Request) {
		var req startRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"message": err.Error()})
			return
		}
		eg.mu.Lock()
		eg.starts = append(eg.starts, req)
		id := "kernel-" + string(rune('a'+len(eg.starts)-1))
		eg.mu.Unlock()
		if req.Env["KERNEL_USERNAME"] == "" {
			// EG's message, word for word (authorized_users unset, root not allowed).
			writeJSON(w, http.StatusForbidden, map[string]string{"message": "User 'root' is not authorized to start kernel '" + req.Name +
				"'. Ensure KERNEL_USERNAME is set to an appropriate value and retry the request."})
			return
		}
		if eg.kernelUp != nil { // EG answers once the remote kernel is up, whoever waits
			select {
			case <-eg.kernelUp:
			case <-eg.stop:
				return
			}
		}
		eg.mu.Lock()
		eg.created = append(eg.created, id)
		eg.mu.Unlock()
		writeJSON(w, http.StatusCreated, map[string]string{"id": id, "name": req.Name})
	})
	mux.HandleFunc("GET /api/kernels", func(w http.ResponseWriter, r *http.Request) {
		eg.mu.Lock()
		defer eg.mu.Unlock()
		list := []kernelModel{}
		for _, id := range eg.created {
			if !slices.Contains(eg.deleted, id) {
				list = append(list, kernelModel{ID: id, Name: "python_kubernetes"})
			}
		}
		writeJSON(w, http.StatusOK, list)
	})
	mux.HandleFunc("DELETE /api/kernels/{id}", func(w http.ResponseWriter, r *http.Request) {
		eg.mu.Lock()
		eg.deleted = append(eg.deleted, r.PathValue("id"))
		eg.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	})
	eg.Server = httptest.NewServer(mux)
	t.Cleanup(func() {
		close(eg.stop)
		eg.Close()
	})
	return eg
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func (eg *fakeEG) transport(t *testing.T, mod func(*Config)) *Transport {
	t.Helper()
	return connect(t, Config{URL: eg.URL + "/"}, mod)
}

// Enterprise Gateway's default authorization refuses a start request
// without KERNEL_USERNAME; the error says so, and the configured KernelEnv
// is what gets the request through.
func TestEnterpriseGatewayNeedsKernelUsername(t *testing.T) {
	t.Parallel()
	eg := startFakeEG(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	tr := eg.transport(t, nil)
	if v := tr.Info().Version; v != "enterprise-gateway 3.2.3 (api 2.14.2)" {
		t.Errorf("version label %q", v)
	}
	_, err := tr.StartKernel(ctx, core.KernelSpec{Language: "python"})
	if err == nil || !strings.Contains(err.Error(), "403") || !strings.Contains(err.Error(), "Ensure KERNEL_USERNAME is set") {
		t.Fatalf("start without KERNEL_USERNAME: %v, want EG's 403", err)
	}

	env := map[string]string{"KERNEL_USERNAME": "alice", "KERNEL_NAMESPACE": "team-a", "KERNEL_LAUNCH_TIMEOUT": "120"}
	_, err = eg.transport(t, func(c *Config) { c.KernelEnv = env }).StartKernel(ctx, core.KernelSpec{Language: "python"})
	// The fake's kernels have no websocket: the start gets past the POST
	// and fails at the connection, and the kernel is deleted.
	if err == nil || strings.Contains(err.Error(), "403") {
		t.Fatalf("start with KERNEL_USERNAME: %v, want a connection error", err)
	}
	eg.mu.Lock()
	defer eg.mu.Unlock()
	if len(eg.starts) != 2 || eg.starts[1].Name != "python_kubernetes" || len(eg.starts[1].Env) != 3 ||
		eg.starts[1].Env["KERNEL_USERNAME"] != "alice" || eg.starts[1].Env["KERNEL_LAUNCH_TIMEOUT"] != "120" {
		t.Errorf("start requests %+v", eg.starts)
	}
	if eg.starts[0].Env != nil {
		t.Errorf("without KernelEnv the request had env %v", eg.starts[0].Env)
	}
	if len(eg.deleted) != 1 || eg.deleted[0] != eg.created[0] {
		t.Errorf("created %v, deleted %v: the unreachable kernel must be deleted", eg.created, eg.deleted)
	}
}

// A start request that outlives the start timeout is abandoned with an error
// that says so, and the kernel the gateway creates afterwards is deleted
// (and only that one: a kernel that was there before stays).
func TestAbandonedStartIsDeleted(t *testing.T) {
	t.Parallel()
	// The gateway answers the start only once the transport gave up on it
	// (it waited 20 s before, which only this test's slot spent waiting):
	// the 1 s start timeout must end the wait, however loaded the machine.
	kernelUp := make(chan struct{})
	eg := startFakeEG(t, kernelUp)
	eg.created = []string{"kernel-of-someone-else"}
	tr := eg.transport(t, func(c *Config) {
		c.KernelEnv = map[string]string{"KERNEL_USERNAME": "alice"}
		c.StartTimeout = time.Second
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	began := time.Now()
	_, err := tr.StartKernel(ctx, core.KernelSpec{Language: "python"})
	if err == nil || !strings.Contains(err.Error(), "within the start timeout (1s)") {
		t.Fatalf("start: %v, want the start timeout", err)
	}
	if d := time.Since(began); d > 12*time.Second {
		t.Errorf("the start gave up after %v, want about 1 s", d)
	}
	close(kernelUp) // the late answer
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		eg.mu.Lock()
		created, deleted := slices.Clone(eg.created), slices.Clone(eg.deleted)
		eg.mu.Unlock()
		if len(created) == 2 && slices.Equal(deleted, created[1:]) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("created %v, deleted %v: want the late kernel deleted and only it", created, deleted)
		}
	}
}
