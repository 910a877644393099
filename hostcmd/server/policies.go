package server

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/kernelhost/kernelhost/core/engine"
	"github.com/kernelhost/kernelhost/hostcmd/settings"
	"github.com/kernelhost/kernelhost/plugins/policy"
)

// policies is the host's env-var policy: a policy.Chain that ReloadPolicies
// can replace. A reload of the same module list reloads the chain in place
// (modules and configs read again); a changed list (an @FILE setting whose
// file changed) loads a new chain and swaps it in. On any failure the
// serving chain stays.
type policies struct {
	setting string
	lookup  func(string) (string, bool)
	opts    policy.Options

	mu  sync.Mutex // serialises reload and close
	cur atomic.Pointer[loadedChain]
}

type loadedChain struct {
	chain   *policy.Chain
	configs []policy.ModuleConfig
}

var _ engine.EnvPolicy = (*policies)(nil)

// loadPolicies loads the modules of setting. An error names the file.
func loadPolicies(ctx context.Context, setting string, lookup func(string) (string, bool), opts policy.Options) (*policies, error) {
	if lookup == nil {
		lookup = func(string) (string, bool) { return "", false }
	}
	p := &policies{setting: setting, lookup: lookup, opts: opts}
	lc, err := p.load(ctx)
	if err != nil {
		return nil, err
	}
	p.cur.Store(lc)
	return p, nil
}

func (p *policies) configs() ([]policy.ModuleConfig, error) {
	list, err := settings.PolicyList(p.setting)
	if err != nil {
		return nil, err
	}
	return policy.ParseList(list, p.lookup)
}

func (p *policies) load(ctx context.Context) (*loadedChain, error) {
	configs, err := p.configs()
	if err != nil {
		return nil, err
	}
	c, err := policy.Load(ctx, configs, p.opts)
	if err != nil {
		return nil, err
	}
	return &loadedChain{chain: c, configs: configs}, nil
}

// Evaluate runs the current chain. A chain that a reload replaced and closed
// between picking it and calling it answers ErrClosed; the call is then
// retried on its successor.
func (p *policies) Evaluate(ctx context.Context, in engine.PolicyInput) (engine.PolicyDecision, error) {
	for {
		lc := p.cur.Load()
		if lc == nil {
			return engine.PolicyDecision{}, policy.ErrClosed
		}
		d, err := lc.chain.Evaluate(ctx, in)
		if errors.Is(err, policy.ErrClosed) && p.cur.Load() != lc {
			continue
		}
		return d, err
	}
}

// reload reads the module list and every module again and returns the names
// of the modules now serving.
func (p *policies) reload(ctx context.Context) ([]string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	old := p.cur.Load()
	if old == nil {
		return nil, policy.ErrClosed
	}
	configs, err := p.configs()
	if err != nil {
		return nil, err
	}
	if slices.Equal(configs, old.configs) {
		if err := old.chain.Reload(ctx); err != nil {
			return nil, err
		}
		return old.chain.Modules(), nil
	}
	c, err := policy.Load(ctx, configs, p.opts)
	if err != nil {
		return nil, err
	}
	p.cur.Store(&loadedChain{chain: c, configs: configs})
	// Close waits for the calls still running on the old chain.
	_ = old.chain.Close(ctx)
	return c.Modules(), nil
}

func (p *policies) modules() []string {
	if lc := p.cur.Load(); lc != nil {
		return lc.chain.Modules()
	}
	return nil
}

func (p *policies) close(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	lc := p.cur.Swap(nil)
	if lc == nil {
		return nil
	}
	return lc.chain.Close(ctx)
}
