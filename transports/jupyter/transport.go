package jupyter

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/google/uuid"

	"github.com/kernelhost/kernelhost/core"
)

// Transport starts kernels on one Jupyter Server.
type Transport struct {
	c       *client
	version string

	mu      sync.Mutex
	specs   kernelSpecs     // refreshed when a language is not found
	claimed map[string]bool // kernels this transport started or deleted as late (reap.go)

	bgCtx    context.Context // ends the reapers at Close
	bgCancel context.CancelFunc
	bg       sync.WaitGroup
}

var _ core.Transport = (*Transport)(nil)

// New connects to the server in cfg: it checks that the server answers with
// the token and reads its kernel specs. ctx bounds these calls only.
func New(ctx context.Context, cfg Config) (*Transport, error) {
	c, err := newClient(cfg.withDefaults())
	if err != nil {
		return nil, err
	}
	v, err := c.version(ctx)
	if err != nil {
		c.httpTr.CloseIdleConnections()
		return nil, fmt.Errorf("jupyter server at %s: %w", cfg.URL, err)
	}
	specs, err := c.kernelSpecs(ctx)
	if err != nil {
		c.httpTr.CloseIdleConnections()
		return nil, fmt.Errorf("jupyter server at %s: %w", cfg.URL, err)
	}
	bgCtx, bgCancel := context.WithCancel(context.Background())
	return &Transport{c: c, version: v, specs: specs, claimed: map[string]bool{}, bgCtx: bgCtx, bgCancel: bgCancel}, nil
}

// Close stops looking for kernels of abandoned starts and releases the
// transport's idle HTTP connections. Kernels are shut down by their own
// Shutdown.
func (t *Transport) Close() {
	t.bgCancel()
	t.bg.Wait()
	t.c.httpTr.CloseIdleConnections()
}

// Info names the transport and the languages of the server's kernel specs.
func (t *Transport) Info() core.TransportInfo {
	t.mu.Lock()
	defer t.mu.Unlock()
	seen := map[string]bool{}
	for lang := range t.c.cfg.KernelNames {
		seen[core.NormalizeLanguage(lang)] = true
	}
	for _, ks := range t.specs.Kernelspecs {
		seen[core.NormalizeLanguage(ks.Spec.Language)] = true
	}
	if seen["javascript"] {
		seen["typescript"] = true // runs on the javascript kernel
	}
	langs := make([]string, 0, len(seen))
	for l := range seen {
		langs = append(langs, l)
	}
	sort.Strings(langs)
	return core.TransportInfo{Name: "jupyter", Version: "jupyter-server " + t.version, Languages: langs}
}

// kernelName picks the kernel spec for a language: the configured name, else
// the server's default spec if it is of that language, else the first (by
// name) spec of that language.
func (t *Transport) kernelName(lang string) (string, bool) {
	for l, name := range t.c.cfg.KernelNames {
		if core.NormalizeLanguage(l) == lang {
			return name, true
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if d, ok := t.specs.Kernelspecs[t.specs.Default]; ok && core.NormalizeLanguage(d.Spec.Language) == lang {
		return t.specs.Default, true
	}
	var names []string
	for name, ks := range t.specs.Kernelspecs {
		if core.NormalizeLanguage(ks.Spec.Language) == lang {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return "", false
	}
	sort.Strings(names)
	return names[0], true
}

// StartKernel creates a kernel for spec.Language and connects to it. The
// kernel runs in the server's root dir: the engine applies spec.Cwd with a
// snippet.
func (t *Transport) StartKernel(ctx context.Context, spec core.KernelSpec) (core.Kernel, error) {
	lang := core.KernelLanguage(core.NormalizeLanguage(spec.Language))
	name, ok := t.kernelName(lang)
	if !ok { // the server may have gained a kernel spec since New
		specs, err := t.c.kernelSpecs(ctx)
		if err != nil {
			return nil, fmt.Errorf("start %s kernel: %w", core.Quote(lang), err)
		}
		t.mu.Lock()
		t.specs = specs
		t.mu.Unlock()
		if name, ok = t.kernelName(lang); !ok {
			// The client asked for something this server cannot run: KindInvalid (400).
			return nil, &core.Error{Kind: core.KindInvalid, Msg: fmt.Sprintf("the Jupyter server has no kernel spec for language %s (it has %s)",
				core.Quote(lang), strings.Join(t.Info().Languages, ", "))}
		}
	}
	km, err := t.createKernel(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("start %s kernel: %w", lang, err)
	}
	k := newKernel(t.c, km.ID, uuid.NewString())
	k.onDeleted = func() { t.unclaim(km.ID) }
	ws, err := t.c.dialChannels(ctx, km.ID, k.session)
	if err != nil {
		// Do not leave a kernel nobody can reach running on the server.
		delCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		_ = t.c.deleteKernel(delCtx, km.ID)
		t.unclaim(km.ID)
		return nil, fmt.Errorf("start %s kernel: %w", lang, err)
	}
	k.start(ws)
	return k, nil
}
