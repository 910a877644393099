// Package policy runs env-var policy modules: WebAssembly modules that see an
// execution's env vars and context and allow, rewrite or reject them
// (docs/policy-abi.md). It is the host side of that ABI, on wazero: modules
// are compiled once (with a compilation cache), their instances pooled, each
// call has a deadline and a memory cap, and modules get no files, network,
// env or real clock. A Chain runs several modules in order and implements
// engine.EnvPolicy.
package policy

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/kernelhost/kernelhost/core/engine"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
)

// ModuleConfig names one policy module and its config value.
type ModuleConfig struct {
	// Path is the .wasm file.
	Path string
	// Name identifies the module in errors and rejection reasons. Default: the
	// file name without its extension.
	Name string
	// Config is passed to the module as the input's "config" member.
	Config string
	// ConfigFile, if set and the file exists, is read at every (re)load and
	// replaces Config (trailing newlines trimmed). A missing file means Config.
	ConfigFile string
}

func (mc ModuleConfig) config() (string, error) {
	if mc.ConfigFile == "" {
		return mc.Config, nil
	}
	b, err := os.ReadFile(mc.ConfigFile)
	if errors.Is(err, os.ErrNotExist) {
		return mc.Config, nil
	}
	if err != nil {
		return "", fmt.Errorf("read config: %w", err)
	}
	return strings.TrimRight(string(b), "\r\n"), nil
}

// Options tune the host. The zero value gives the defaults documented on
// each field.
type Options struct {
	// Timeout is the deadline of one module call. Default 1s: it is a
	// safety net against modules that loop, not a latency target, and it is
	// wall time, which on a saturated host includes waiting for a CPU (with
	// 8 busy callers on 2 loaded cores, calls of a few µs were seen to wait
	// over 100ms).
	Timeout time.Duration
	// StartTimeout bounds instantiating a module (its _initialize), and
	// waiting for a free instance. Default 10s: a Go module's start takes
	// milliseconds, but on a saturated machine (-race, two busy cores) it can
	// take seconds.
	StartTimeout time.Duration
	// MemoryLimitPages caps each instance's memory, in 64 KiB pages.
	// Default 512 (32 MiB).
	MemoryLimitPages uint32
	// RecycleMemoryBytes: an instance whose memory has grown past this is
	// closed after its call instead of being reused. Default 16 MiB.
	RecycleMemoryBytes uint64
	// MaxUses: an instance is closed after this many calls. Default 10000.
	MaxUses int
	// MaxInstances bounds the live instances of one module; callers beyond it
	// wait (within their deadline). Default max(8, GOMAXPROCS).
	MaxInstances int
	// MaxOutputBytes bounds a module's answer. Default 1 MiB.
	MaxOutputBytes int
	// CacheDir, if set, persists compiled code there so a restart does not
	// compile again. Default: an in-memory cache only.
	CacheDir string
}

func (o Options) withDefaults() Options {
	if o.Timeout <= 0 {
		o.Timeout = time.Second
	}
	if o.StartTimeout <= 0 {
		o.StartTimeout = 10 * time.Second
	}
	if o.MemoryLimitPages == 0 {
		o.MemoryLimitPages = 512
	}
	if o.RecycleMemoryBytes == 0 {
		o.RecycleMemoryBytes = 16 << 20
	}
	if o.MaxUses <= 0 {
		o.MaxUses = 10000
	}
	if o.MaxInstances <= 0 {
		o.MaxInstances = max(8, runtime.GOMAXPROCS(0))
	}
	if o.MaxOutputBytes <= 0 {
		o.MaxOutputBytes = 1 << 20
	}
	return o
}

// Chain runs policy modules in their configured order: each sees the env vars
// as the previous one rewrote them, and the first rejection ends the chain.
// It is safe for concurrent use.
type Chain struct {
	opts    Options
	configs []ModuleConfig
	cache   wazero.CompilationCache

	reload sync.Mutex   // serialises Reload and Close
	mu     sync.RWMutex // guards cur; Evaluate holds it only to pin a set
	cur    *moduleSet   // nil after Close
}

var _ engine.EnvPolicy = (*Chain)(nil)

// moduleSet is one load of every module, in one wazero runtime.
type moduleSet struct {
	rt       wazero.Runtime
	mods     []*module
	inflight sync.WaitGroup
}

// Load compiles and starts every module. An error names the file that failed;
// nothing is left running then. An empty list gives a Chain that allows
// everything.
func Load(ctx context.Context, configs []ModuleConfig, opts Options) (*Chain, error) {
	c := &Chain{opts: opts.withDefaults(), configs: append([]ModuleConfig(nil), configs...)}
	for i := range c.configs {
		if c.configs[i].Name == "" {
			c.configs[i].Name = moduleName(c.configs[i].Path)
		}
	}
	if c.opts.CacheDir != "" {
		cache, err := wazero.NewCompilationCacheWithDir(c.opts.CacheDir)
		if err != nil {
			return nil, fmt.Errorf("policy compilation cache %s: %w", c.opts.CacheDir, err)
		}
		c.cache = cache
	} else {
		c.cache = wazero.NewCompilationCache()
	}
	set, err := c.loadSet(ctx)
	if err != nil {
		_ = c.cache.Close(ctx)
		return nil, err
	}
	c.cur = set
	return c, nil
}

func (c *Chain) loadSet(ctx context.Context) (*moduleSet, error) {
	rc := wazero.NewRuntimeConfig().
		WithCompilationCache(c.cache).
		WithCloseOnContextDone(true).
		WithMemoryLimitPages(c.opts.MemoryLimitPages)
	set := &moduleSet{rt: wazero.NewRuntimeWithConfig(ctx, rc)}
	fail := func(err error) (*moduleSet, error) {
		_ = set.rt.Close(ctx)
		return nil, err
	}
	// WASI is there because Go (and most toolchains) import it; with the
	// default module config it offers no files, env, args or real clock.
	if _, err := wasi_snapshot_preview1.Instantiate(ctx, set.rt); err != nil {
		return fail(fmt.Errorf("policy host: instantiate WASI: %w", err))
	}
	if err := instantiateHostModule(ctx, set.rt); err != nil {
		return fail(fmt.Errorf("policy host: instantiate %s: %w", importModule, err))
	}
	for _, mc := range c.configs {
		m, err := loadModule(ctx, set.rt, mc, &c.opts)
		if err != nil {
			return fail(err)
		}
		set.mods = append(set.mods, m)
	}
	return set, nil
}

// Reload loads every module and its config again (files may have changed)
// and swaps the new set in atomically. Calls already running finish on the
// old set, which is then closed. If loading fails the old set stays in use
// and the error names the file.
func (c *Chain) Reload(ctx context.Context) error {
	c.reload.Lock()
	defer c.reload.Unlock()
	c.mu.RLock()
	closed := c.cur == nil
	c.mu.RUnlock()
	if closed {
		return ErrClosed
	}
	set, err := c.loadSet(ctx)
	if err != nil {
		return err
	}
	c.mu.Lock()
	old := c.cur
	c.cur = set
	c.mu.Unlock()
	old.close(ctx)
	return nil
}

// Close waits for running calls (each is bounded by its deadline) and
// releases every module. Evaluate fails with ErrClosed afterwards.
func (c *Chain) Close(ctx context.Context) error {
	c.reload.Lock()
	defer c.reload.Unlock()
	c.mu.Lock()
	old := c.cur
	c.cur = nil
	c.mu.Unlock()
	if old == nil {
		return nil
	}
	old.close(ctx)
	return c.cache.Close(ctx)
}

func (s *moduleSet) close(ctx context.Context) {
	s.inflight.Wait()
	for _, m := range s.mods {
		m.close(ctx)
	}
	_ = s.rt.Close(ctx)
}

// Modules returns the names of the loaded modules, in chain order.
func (c *Chain) Modules() []string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.cur == nil {
		return nil
	}
	names := make([]string, len(c.cur.mods))
	for i, m := range c.cur.mods {
		names[i] = m.name
	}
	return names
}

// Evaluate runs the chain. A module's failure is an error (a *ModuleError
// naming it); a rejection is a decision with Rejections, each reason suffixed
// with the module's name.
func (c *Chain) Evaluate(ctx context.Context, in engine.PolicyInput) (engine.PolicyDecision, error) {
	c.mu.RLock()
	set := c.cur
	if set != nil {
		set.inflight.Add(1)
	}
	c.mu.RUnlock()
	if set == nil {
		return engine.PolicyDecision{}, ErrClosed
	}
	defer set.inflight.Done()
	if len(set.mods) == 0 {
		return engine.PolicyDecision{}, nil
	}
	enc := inputEncoders.Get().(*inputEncoder)
	defer enc.release()
	enc.encodeTail(in)
	env, changed := in.EnvVars, false
	for _, m := range set.mods {
		out, err := m.evaluate(ctx, enc.build(m.configJSON, env))
		if err != nil {
			return engine.PolicyDecision{}, err
		}
		if len(out.Rejections) > 0 {
			for i := range out.Rejections {
				r := &out.Rejections[i]
				if r.Reason == "" {
					r.Reason = "rejected"
				}
				r.Reason = fmt.Sprintf("%s (policy %s)", clip(r.Reason, 300), m.name)
			}
			return engine.PolicyDecision{Rejections: out.Rejections}, nil
		}
		if out.EnvVars != nil {
			env, changed = out.EnvVars, true
		}
	}
	if !changed {
		return engine.PolicyDecision{}, nil
	}
	return engine.PolicyDecision{EnvVars: env}, nil
}
