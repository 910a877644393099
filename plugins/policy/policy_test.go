package policy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kernelhost/kernelhost/core/engine"
	"github.com/kernelhost/kernelhost/internal/testkit"
)

func TestDenylist(t *testing.T) {
	tests := []struct {
		name       string
		config     string
		env        map[string]string
		wantReject []string
		wantEnv    map[string]string // nil: unchanged
	}{
		{name: "allow", env: map[string]string{"APP_MODE": "fast", "TZ": "UTC"}},
		{name: "empty env", env: nil},
		{name: "default list", env: map[string]string{"LD_PRELOAD": "/x.so", "PYTHONPATH": "/evil", "NODE_OPTIONS": "-r x", "PATH": "/tmp", "OK": "1"},
			wantReject: []string{"LD_PRELOAD", "NODE_OPTIONS", "PATH", "PYTHONPATH"}},
		{name: "default prefix", env: map[string]string{"LD_BIND_NOW": "1", "DYLD_INSERT_LIBRARIES": "x"},
			wantReject: []string{"DYLD_INSERT_LIBRARIES", "LD_BIND_NOW"}},
		{name: "config replaces list", config: `{"deny":["SECRET"],"deny_prefixes":[]}`,
			env: map[string]string{"SECRET": "x", "PYTHONPATH": "/ok-now", "LD_PRELOAD": "ok-now"}, wantReject: []string{"SECRET"}},
		{name: "allow prefixes", config: `{"allow_prefixes":["APP_","E2B_"]}`,
			env: map[string]string{"APP_A": "1", "E2B_B": "2", "FOO": "3"}, wantReject: []string{"FOO"}},
		{name: "defaults injected", config: `{"defaults":{"TZ":"UTC","LANG":"C.UTF-8"}}`,
			env:     map[string]string{"TZ": "Europe/Paris", "A": "1"},
			wantEnv: map[string]string{"TZ": "Europe/Paris", "A": "1", "LANG": "C.UTF-8"}},
		{name: "exact values", config: `{"defaults":{"Q":"quote\" back\\ nl\n uni ü €"}}`,
			env:     map[string]string{"V": "a'b\"c\\d\ne\tf <>&\u2028"},
			wantEnv: map[string]string{"V": "a'b\"c\\d\ne\tf <>&\u2028", "Q": "quote\" back\\ nl\n uni ü €"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := load(t, Options{}, "denylist="+tt.config)
			d := evaluate(t, c, tt.env)
			if got := rejectedKeys(d); !reflect.DeepEqual(got, tt.wantReject) {
				t.Fatalf("rejected %v, want %v (decision %+v)", got, tt.wantReject, d)
			}
			for _, r := range d.Rejections {
				if !strings.HasSuffix(r.Reason, "(policy denylist)") || len(r.Reason) < 25 {
					t.Errorf("reason %q does not explain and name the policy", r.Reason)
				}
			}
			if !reflect.DeepEqual(d.EnvVars, tt.wantEnv) {
				t.Errorf("env = %q, want %q", d.EnvVars, tt.wantEnv)
			}
		})
	}
}

func TestDenylistBadConfig(t *testing.T) {
	c := load(t, Options{}, "denylist={not json")
	_, err := c.Evaluate(context.Background(), input(map[string]string{"A": "1"}))
	wantModuleError(t, err, ErrFailed, "denylist", "status 1", "bad config")
}

func TestReservedWAT(t *testing.T) {
	tests := []struct {
		config     string
		env        map[string]string
		wantReject []string
	}{
		{"", map[string]string{"KERNELHOST_TOKEN": "x", "KERNELHOST": "y", "A": "1", "KERNELHOST_": "z"}, []string{"KERNELHOST_", "KERNELHOST_TOKEN"}},
		{"", map[string]string{"A": "1"}, nil},
		{"", nil, nil},
		{"MY_", map[string]string{"MY_A": "1", "KERNELHOST_A": "2", "MY": "3"}, []string{"MY_A"}},
		// keys and values needing JSON escapes: the key comes back exactly
		{"MY_", map[string]string{"MY_\"q\\\n": "v\"\\", "Z\"": "MY_\""}, []string{"MY_\"q\\\n"}},
	}
	for _, tt := range tests {
		c := load(t, Options{}, "reserved="+tt.config)
		d := evaluate(t, c, tt.env)
		if got := rejectedKeys(d); !reflect.DeepEqual(got, tt.wantReject) {
			t.Errorf("config %q env %q: rejected %q, want %q", tt.config, tt.env, got, tt.wantReject)
		}
		if d.EnvVars != nil {
			t.Errorf("config %q: reserved rewrote env to %v", tt.config, d.EnvVars)
		}
		for _, r := range d.Rejections {
			if r.Reason != "key uses a reserved prefix (policy reserved)" {
				t.Errorf("reason %q", r.Reason)
			}
		}
	}
}

func TestChain(t *testing.T) {
	injectToken := `denylist={"defaults":{"KERNELHOST_TOKEN":"t"}}`
	t.Run("next module sees the rewrite", func(t *testing.T) {
		c := load(t, Options{}, injectToken, "reserved")
		d := evaluate(t, c, map[string]string{"A": "1"})
		if got := rejectedKeys(d); !reflect.DeepEqual(got, []string{"KERNELHOST_TOKEN"}) {
			t.Fatalf("rejected %v, want the injected KERNELHOST_TOKEN (decision %+v)", got, d)
		}
	})
	t.Run("rewrite is the result", func(t *testing.T) {
		c := load(t, Options{}, "reserved", injectToken)
		d := evaluate(t, c, map[string]string{"A": "1"})
		want := map[string]string{"A": "1", "KERNELHOST_TOKEN": "t"}
		if len(d.Rejections) > 0 || !reflect.DeepEqual(d.EnvVars, want) {
			t.Fatalf("decision %+v, want env %v", d, want)
		}
		if got := c.Modules(); !reflect.DeepEqual(got, []string{"reserved", "denylist"}) {
			t.Errorf("Modules() = %v", got)
		}
	})
	t.Run("rejection ends the chain", func(t *testing.T) {
		c := load(t, Options{}, "denylist", "trap")
		d := evaluate(t, c, map[string]string{"LD_PRELOAD": "x"})
		if got := rejectedKeys(d); !reflect.DeepEqual(got, []string{"LD_PRELOAD"}) {
			t.Fatalf("rejected %v; the trap module after the rejection must not run", got)
		}
	})
	t.Run("a failing module fails the chain", func(t *testing.T) {
		c := load(t, Options{}, "denylist", "trap")
		_, err := c.Evaluate(context.Background(), input(map[string]string{"A": "1"}))
		wantModuleError(t, err, ErrTrap, "trap", "unreachable")
	})
	t.Run("no modules allows everything", func(t *testing.T) {
		c := load(t, Options{})
		if d := evaluate(t, c, map[string]string{"LD_PRELOAD": "x"}); d.EnvVars != nil || d.Rejections != nil {
			t.Fatalf("decision %+v", d)
		}
	})
}

// TestHostile: each misbehaving module is stopped with an error naming it and
// what happened, and the same chain serves a good call right afterwards.
func TestHostile(t *testing.T) {
	tests := []struct {
		module string
		kind   error
		texts  []string
	}{
		{"loop", ErrDeadline, []string{"100ms per-call deadline"}},
		{"trap", ErrTrap, []string{"unreachable"}},
		{"membomb", ErrMemoryLimit, []string{"2 MiB memory cap", "out of bounds"}},
		{"huge", ErrBadOutput, []string{"output of 4194304 bytes exceeds the 1048576-byte limit"}},
		{"garbage", ErrBadOutput, []string{"malformed output", `"this is not json{"`}},
		{"outside", ErrTrap, []string{"write_output(65000, 4096) is outside the module's memory"}},
		{"status", ErrFailed, []string{"status 7: config missing"}},
		{"nowrite", ErrBadOutput, []string{"without calling write_output"}},
		{"twice", ErrBadOutput, []string{"more than once"}},
	}
	for _, tt := range tests {
		t.Run(tt.module, func(t *testing.T) {
			// Only loop needs a short deadline; the others get a long one so
			// that a slow (-race, loaded) machine cannot turn them into it.
			timeout := time.Minute
			if tt.module == "loop" {
				timeout = 100 * time.Millisecond
			}
			c := load(t, Options{Timeout: timeout, MemoryLimitPages: 32}, tt.module)
			for i := 0; i < 2; i++ { // the second round runs on a fresh instance
				if d := evaluate(t, c, nil); d.EnvVars != nil || d.Rejections != nil {
					t.Fatalf("good call: decision %+v", d)
				}
				start := time.Now()
				_, err := c.Evaluate(context.Background(), input(map[string]string{"X": "1"}))
				wantModuleError(t, err, tt.kind, tt.module, append(tt.texts, wasmPath(tt.module))...)
				// Well under the others' deadline: the call fails for
				// its module's fault, not at the deadline.
				if d := time.Since(start); d > 30*time.Second {
					t.Errorf("bad call took %v", d)
				}
			}
			if d := evaluate(t, c, nil); d.EnvVars != nil || d.Rejections != nil {
				t.Fatalf("good call after bad ones: decision %+v", d)
			}
			// each failed call dropped its instance: load's, then the second
			if n := c.cur.mods[0].started.Load(); n != 3 {
				t.Errorf("%d instances started, want 3 (failed instances are not reused)", n)
			}
		})
	}
	t.Run("openfile", func(t *testing.T) {
		c := load(t, Options{}, "openfile")
		d := evaluate(t, c, map[string]string{"X": "1"})
		if len(d.Rejections) != 1 || !strings.HasPrefix(d.Rejections[0].Reason, "open failed: errno 08") {
			t.Fatalf("decision %+v, want the open to fail with EBADF (8): no directory is mounted", d)
		}
	})
}

// TestHostileConcurrent: good calls on one chain stay correct while another
// chain's modules loop and trap at the same time.
func TestHostileConcurrent(t *testing.T) {
	good := load(t, Options{}, "denylist")
	bad := load(t, Options{Timeout: 20 * time.Millisecond}, "loop")
	trap := load(t, Options{}, "trap")
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 10; i++ {
				switch g % 3 {
				case 0:
					if _, err := bad.Evaluate(context.Background(), input(map[string]string{"X": "1"})); !errors.Is(err, ErrDeadline) {
						errs <- err
					}
				case 1:
					if _, err := trap.Evaluate(context.Background(), input(map[string]string{"X": "1"})); !errors.Is(err, ErrTrap) {
						errs <- err
					}
				default:
					d, err := good.Evaluate(context.Background(), input(map[string]string{"LD_PRELOAD": "x", "A": "1"}))
					if err != nil || !reflect.DeepEqual(rejectedKeys(d), []string{"LD_PRELOAD"}) {
						errs <- errors.Join(err, errors.New("good call went wrong"))
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestPoolReuses: sequential calls run on the one instance started at load.
func TestPoolReuses(t *testing.T) {
	c := load(t, Options{}, "denylist")
	for i := 0; i < 50; i++ {
		evaluate(t, c, map[string]string{"A": "1"})
	}
	if n := c.cur.mods[0].started.Load(); n != 1 {
		t.Fatalf("%d instances started for 50 sequential calls, want 1", n)
	}
}

func TestPool(t *testing.T) {
	for _, opts := range []Options{
		{MaxInstances: 3},
		{MaxUses: 2},                  // recycled by use count
		{RecycleMemoryBytes: 1},       // recycled after every call by size
		{MaxInstances: 1, MaxUses: 1}, // every call starts a fresh instance
	} {
		// Instances are started over and over here; under -race on a busy
		// 2-core machine that can take seconds. This test is about pooling,
		// not start-up time, so the start bound is generous.
		opts.StartTimeout = time.Minute
		c := load(t, opts, "denylist")
		m := c.cur.mods[0]
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for g := 0; g < 8; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 20; i++ {
					d, err := c.Evaluate(context.Background(), input(map[string]string{"PYTHONPATH": "x"}))
					if err == nil && !reflect.DeepEqual(rejectedKeys(d), []string{"PYTHONPATH"}) {
						err = errors.New("wrong decision")
					}
					if err != nil {
						errs <- err
						return
					}
					if n := len(m.slots); n > cap(m.slots) || cap(m.slots) != c.opts.MaxInstances {
						errs <- errors.New("more live instances than MaxInstances")
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Errorf("options %+v: %v", opts, err)
		}
	}
}

func TestCanceled(t *testing.T) {
	c := load(t, Options{}, "denylist")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := c.Evaluate(ctx, input(map[string]string{"A": "1"}))
	wantModuleError(t, err, ErrCanceled, "denylist", "caller gave up")
	evaluate(t, c, map[string]string{"A": "1"})
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	notWasm := filepath.Join(dir, "notwasm.wasm")
	if err := os.WriteFile(notWasm, []byte("\x00asm garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	type loadCase struct {
		good, bad string // the good module comes first: the load fails naming the bad one
		texts     []string
	}
	tests := []loadCase{
		{wasmPath("denylist"), filepath.Join(dir, "missing.wasm"), []string{"no such file"}},
		{wasmPath("denylist"), notWasm, []string{"compile:"}},
	}
	if watErr == nil {
		tests = append(tests,
			loadCase{wasmPath("reserved"), wasmPath("noexport"), []string{"does not export kernelhost_policy_v1_evaluate"}},
			loadCase{wasmPath("reserved"), wasmPath("badimport"), []string{"instantiate:", "env"}},
			loadCase{wasmPath("reserved"), wasmPath("initloop"), []string{"instantiate:", "deadline"}},
		)
	}
	for _, tt := range tests {
		opts := Options{}
		if strings.HasSuffix(tt.bad, "initloop.wasm") {
			opts.StartTimeout = 200 * time.Millisecond
		}
		_, err := Load(context.Background(), []ModuleConfig{{Path: tt.good}, {Path: tt.bad}}, withCache(opts))
		wantModuleError(t, err, ErrLoad, moduleName(tt.bad), append(tt.texts, tt.bad)...)
	}
}

func TestParseList(t *testing.T) {
	env := map[string]string{"KERNELHOST_POLICY_CONFIG_MY_POLICY_2": `{"deny":[]}`}
	got, err := ParseList(" /p/denylist.wasm, ,/q/my-policy.2.wasm ", func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		t.Fatal(err)
	}
	want := []ModuleConfig{
		{Path: "/p/denylist.wasm", Name: "denylist", ConfigFile: "/p/denylist.config"},
		{Path: "/q/my-policy.2.wasm", Name: "my-policy.2", Config: `{"deny":[]}`},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
	if _, err := ParseList("/a/x.wasm,/b/x.wasm", func(string) (string, bool) { return "", false }); err == nil {
		t.Error("two modules named x: no error")
	}
}

// TestReload: a changed config file and module are picked up by Reload; a
// broken module leaves the old set serving; calls keep working throughout.
func TestReload(t *testing.T) {
	needWAT(t)
	dir := t.TempDir()
	wasm, cfg := filepath.Join(dir, "p.wasm"), filepath.Join(dir, "p.config")
	copyFile(t, wasmPath("reserved"), wasm)
	testkit.WriteFile(t, cfg, "A_\n")
	mcs, err := ParseList(wasm, func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	c, err := Load(context.Background(), mcs, withCache(Options{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	env := map[string]string{"A_X": "1", "B_X": "2"}
	wantRejected := func(keys ...string) {
		t.Helper()
		if got := rejectedKeys(evaluate(t, c, env)); !reflect.DeepEqual(got, keys) {
			t.Fatalf("rejected %v, want %v", got, keys)
		}
	}
	wantRejected("A_X")

	// Calls run concurrently with every reload below.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := c.Evaluate(context.Background(), input(env)); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	t.Cleanup(func() {
		close(stop)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Errorf("call during reload: %v", err)
		}
	})

	testkit.WriteFile(t, cfg, "B_")
	if err := c.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	wantRejected("B_X")

	testkit.WriteFile(t, wasm, "not a module")
	err = c.Reload(context.Background())
	wantModuleError(t, err, ErrLoad, "p", wasm)
	wantRejected("B_X") // the old set still serves

	copyFile(t, wasmPath("denylist"), wasm)
	testkit.WriteFile(t, cfg, `{"deny":["A_X"]}`)
	if err := c.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	wantRejected("A_X")
}

func TestClosed(t *testing.T) {
	c, err := Load(context.Background(), []ModuleConfig{{Path: wasmPath("denylist")}}, withCache(Options{}))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Evaluate(context.Background(), input(nil)); !errors.Is(err, ErrClosed) {
		t.Errorf("Evaluate after Close: %v", err)
	}
	if err := c.Reload(context.Background()); !errors.Is(err, ErrClosed) {
		t.Errorf("Reload after Close: %v", err)
	}
	if err := c.Close(context.Background()); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// TestInputLayout pins the canonical input document (docs/policy-abi.md):
// non-Go modules such as reserved.wat depend on its member order.
func TestInputLayout(t *testing.T) {
	// The encoder's buffers are reused: a larger document first, so that a
	// leftover of it in the second would show.
	var enc inputEncoder
	enc.encodeTail(engine.PolicyInput{ContextID: "a-longer-context-id", Language: "python", Cwd: "/home/user",
		GlobalEnv: map[string]string{"X": "1", "Y": "2", "Z": "3"}, Metadata: map[string]string{"request_id": "r-1"}})
	enc.build(appendStr(nil, "a longer config value"), map[string]string{"A": "1", "B": "2", "C": "3", "D": "4"})
	enc.encodeTail(engine.PolicyInput{ContextID: "c", Language: "js", Cwd: "/w", GlobalEnv: map[string]string{"B": "2", "A": "<1>"}})
	got := enc.build(appendStr(nil, "x\"y"), map[string]string{"Z": "z", "Y": "é\n"})
	want := `{"config":"x\"y","env_vars":{"Y":"é\n","Z":"z"},"global_env":{"A":"<1>","B":"2"},"context_id":"c","language":"js","cwd":"/w","metadata":{}}`
	if string(got) != want {
		t.Fatalf("input\n got %s\nwant %s", got, want)
	}
}

// TestInputMatchesEncodingJSON: the hand-written encoder writes what
// encoding/json writes, for every kind of byte a value can hold.
func TestInputMatchesEncodingJSON(t *testing.T) {
	var all []byte
	for c := 0; c < 256; c++ {
		all = append(all, byte(c))
	}
	values := []string{"", "plain", string(all), "quote\" back\\ <>&", "\u2028\u2029 ü € 😀", "bad \xff\xfe utf8 \xe2\x82", "\x00\x1f\x7f"}
	env := map[string]string{}
	for i, v := range values {
		env[fmt.Sprintf("K%d%s", i, v)] = v
	}
	in := engine.PolicyInput{ContextID: values[2], Language: values[4], Cwd: values[5], EnvVars: env, GlobalEnv: env, Metadata: map[string]string{"m": values[3]}}
	var e inputEncoder
	e.encodeTail(in)
	got := e.build(appendStr(nil, values[2]), in.EnvVars)

	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(struct {
		Config    string            `json:"config"`
		EnvVars   map[string]string `json:"env_vars"`
		GlobalEnv map[string]string `json:"global_env"`
		ContextID string            `json:"context_id"`
		Language  string            `json:"language"`
		Cwd       string            `json:"cwd"`
		Metadata  map[string]string `json:"metadata"`
	}{values[2], in.EnvVars, in.GlobalEnv, in.ContextID, in.Language, in.Cwd, in.Metadata}); err != nil {
		t.Fatal(err)
	}
	if want := bytes.TrimSuffix(b.Bytes(), []byte("\n")); !bytes.Equal(got, want) {
		t.Fatalf("input differs from encoding/json\n got %q\nwant %q", got, want)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	testkit.WriteFile(t, to, string(b))
}

// FuzzReservedWAT checks the WAT example against its specification, written
// here in Go: it rejects every per-request key whose JSON-escaped form starts
// with the JSON-escaped prefix (its config, or "KERNELHOST_" when the config
// is empty), in the input's order, and rewrites nothing. The module scans 8
// bytes at a time, so the seeds put quotes, backslashes and prefix ends on
// both sides of 8-byte boundaries. kv is key, value, key, value... separated
// by NUL.
func FuzzReservedWAT(f *testing.F) {
	needWAT(f)
	configs := []string{"", "MY_", `K"\`, "ABCDEFGH", "ABCDEFGHIJKLMNOPQ", "é_", "\n"}
	chains := make([]*Chain, len(configs))
	for i, cfg := range configs {
		chains[i] = load(f, Options{}, "reserved="+cfg)
	}
	for _, s := range []struct {
		config uint8
		kv     string
	}{
		{0, "KERNELHOST_TOKEN\x00x\x00A\x001\x00KERNELHOST\x00y"},
		{0, "KERNELHOST_\x00\x00KERNELHOS\x00\"\x00KERNELHOST_\"\\\x00v"},
		{1, "MY_A\x001\x00MY\x002\x00\"MY_\x003\x00MY_\"q\\\n\x00v\"\\"},
		{2, "K\"\\X\x00a\x00K\"\x00b\x00K\\\"\x00c"},
		{3, "ABCDEFG\x00x\x00ABCDEFGH\x00x\x00ABCDEFGHI\x00x\x00ABCDEFGX\x00\"\"\"\"\"\"\"\"\"\"\\\\\\\\"},
		{4, "ABCDEFGHIJKLMNOP\x00x\x00ABCDEFGHIJKLMNOPQ\x00x\x00ABCDEFGHIJKLMNOPQR\x00\\\"1234567\\\"abcdefgh\\"},
		{5, "é_x\x00é\x00é\x00_\x00e_\x00x"},
		{6, "\n\x00nl\x00\nA\x00b\x00\t\x00c\x00\u2028\x00d"},
		{0, "1234567\"\x00\x0012345678\\\x00\\\\\\\\\\\\\\\\\\\x00\x00abcdefghijklmnopqrstuvwxyz\"\x00KERNELHOST_Z"},
	} {
		f.Add(s.config, s.kv)
	}
	f.Fuzz(func(t *testing.T, config uint8, kv string) {
		i := int(config) % len(configs)
		parts := strings.Split(kv, "\x00")
		if len(parts) > 32 {
			parts = parts[:32]
		}
		env := map[string]string{}
		for j := 0; j+1 < len(parts); j += 2 {
			env[parts[j]] = parts[j+1]
		}
		d, err := chains[i].Evaluate(context.Background(), input(env))
		if err != nil {
			t.Fatalf("config %q env %q: %v", configs[i], env, err)
		}
		prefix := configs[i]
		if prefix == "" {
			prefix = "KERNELHOST_"
		}
		escaped := func(s string) string { b := appendStr(nil, s); return string(b[1 : len(b)-1]) }
		var want []string
		for _, k := range slices.Sorted(maps.Keys(env)) {
			if strings.HasPrefix(escaped(k), escaped(prefix)) {
				var decoded string // the key as it comes back: invalid UTF-8 is U+FFFD
				if err := json.Unmarshal(appendStr(nil, k), &decoded); err != nil {
					t.Fatal(err)
				}
				want = append(want, decoded)
			}
		}
		if got := rejectedKeys(d); !slices.Equal(got, want) {
			t.Fatalf("config %q env %q: rejected %q, want %q", configs[i], env, got, want)
		}
		if d.EnvVars != nil {
			t.Fatalf("config %q: rewrote env to %v", configs[i], d.EnvVars)
		}
	})
}
