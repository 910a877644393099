package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/kernelhost/kernelhost/core"
)

// ensureReady brings the kernel to a state where user code may run: restarted
// if it died, was lost or is not trusted, and with cwd and globals applied.
//
// replaced says why the interpreter the context had is gone, when it was not
// the client's doing ("" otherwise): it died, or the server no longer has
// it (a Jupyter server culled or deleted it).
func (c *Context) ensureReady() (replaced string, err error) {
	c.mu.Lock()
	restart := c.dead || c.needsRestart
	setup := c.needsSetup
	dead := c.dead || (setup && !c.needsRestart) // a restarting event: the server replaced a dead kernel
	r := c.rt
	c.mu.Unlock()
	select {
	case <-r.gone:
		restart = true
		replaced = "the kernel is gone: the server shut it down (e.g. culled it as idle) or lost it"
		c.log.Warn("the context's kernel is gone (the server shut it down, e.g. culled it as idle, or lost it); a new kernel is started")
		c.e.cfg.Observer.KernelReplaced(c.info.ID, "gone")
	default:
		if dead {
			replaced = "the kernel died"
		}
	}
	if restart {
		return replaced, c.restartKernel()
	}
	if setup {
		return replaced, c.setup(context.Background())
	}
	return "", nil
}

// lostMeanwhile reports whether r's kernel was found gone: its Messages
// close before its Execute fails, and the router notices a moment later.
func lostMeanwhile(r *router) bool {
	t := time.NewTimer(time.Second)
	defer t.Stop()
	select {
	case <-r.gone:
		return true
	case <-t.C:
		return false
	}
}

// replacedNotice is the stderr line of the first execution on a kernel that
// replaced one nobody asked to replace.
func replacedNotice(why string) string {
	return "kernelhost: this context's kernel was replaced since its last execution (" + why +
		"): its variables, imports and other state are gone; its working directory and env vars were applied again.\n"
}

// restartKernel restarts the kernel (or starts a new one when it is lost) and
// applies cwd and globals again.
func (c *Context) restartKernel() error {
	k, r := c.current()
	ctx, cancel := context.WithTimeout(context.Background(), c.e.cfg.StartTimeout)
	defer cancel()
	select {
	case <-r.gone:
	default:
		before := r.restartsPassed()
		err := k.Restart(ctx)
		if err == nil {
			// The router's restart fence: nothing is sent to the fresh
			// interpreter before the router has passed its restarting event.
			if err = r.awaitRestart(ctx, before); err == nil {
				c.mu.Lock()
				c.dead, c.needsRestart, c.needsSetup = false, false, true
				c.mu.Unlock()
				return c.setup(ctx)
			}
		}
		c.log.Warn("kernel restart failed; starting a new kernel", "err", err)
		_ = k.Shutdown(ctx)
	}
	nk, err := c.e.cfg.Transport.StartKernel(ctx, core.KernelSpec{Language: c.e.kernelLanguage(c.info.Language), Cwd: c.info.Cwd})
	if err != nil {
		return fmt.Errorf("start a new %s kernel: %w", c.info.Language, err)
	}
	c.attach(nk)
	c.mu.Lock()
	c.needsRestart = false
	c.mu.Unlock()
	return c.setup(ctx)
}

// interpreter identifies one interpreter of a context: its kernel's router
// and the restarting events that router had passed.
type interpreter struct {
	r        *router
	restarts int
}

func (c *Context) interpreter() interpreter {
	_, r := c.current()
	return interpreter{r: r, restarts: r.restartsPassed()}
}

// setup applies the kernel setup (Config.KernelSetup), the cwd and the global
// env vars. It always sends a request, even an empty one, which also serves
// as a barrier behind the kernel's earlier events.
func (c *Context) setup(ctx context.Context) error { return c.applySetup(ctx, true) }

// applySetup is setup; without chdir it leaves the kernel's cwd as it is
// (a fork's copy keeps its source's).
func (c *Context) applySetup(ctx context.Context, chdir bool) error {
	var globals map[string]string
	if c.e.cfg.GlobalEnv != nil {
		g, err := c.e.cfg.GlobalEnv(ctx)
		if err != nil {
			return fmt.Errorf("fetch global env vars: %w", err)
		}
		globals = make(map[string]string, len(g))
		for k, v := range g {
			if err := errors.Join(validateEnvKey(k), ValidateEnvValue(k, v)); err != nil {
				c.log.Warn("skipping global env var", "key", k, "err", err)
				continue
			}
			globals[k] = v
		}
	}
	if c.e.cfg.KernelSetup != nil {
		if ks := c.e.cfg.KernelSetup(c.info.Language); ks.Check != "" {
			if err := c.kernelSetup(ks); err != nil {
				// Not a setupError: nothing the client sent (the cwd) is wrong.
				return fmt.Errorf("kernel setup: %w", err)
			}
		}
	}
	cwd, choose := "", false
	if chdir {
		cwd, choose = c.info.Cwd, c.cwdChoices != nil
	}
	code := setupCode(c.info.Language, cwd, globals)
	if choose {
		code = setupCodeChoosingCwd(c.info.Language, c.cwdChoices, globals)
	}
	var out strings.Builder
	if err := c.silentRequest(helperCode(c.info.Language, code), &out, nil); err != nil {
		return &setupError{cwd: c.info.Cwd, err: err}
	}
	if choose {
		c.noteChosenCwd(out.String())
	}
	c.mu.Lock()
	c.globals = globals
	c.needsSetup = false
	c.mu.Unlock()
	return nil
}

// kernelSetup runs ks (Config.KernelSetup) in a new kernel: its Check, then
// its Load where Check asked for it. Requests of their own, not helpers: the
// subprocess drivers run helpers apart from user code, with stand-ins for os
// and sys, and the setup must reach the interpreter's own. What they write
// on stderr is a failure of the setup, which the context survives: logged,
// and shown on the next execution's stderr.
//
// Where the last kernel of the language wanted Load, the next one most
// likely does too (a transport's kernels are alike): it gets Load at once,
// which spares a Jupyter kernel's start a round trip.
func (c *Context) kernelSetup(ks KernelSetup) error {
	var out, failure strings.Builder
	load := false
	if _, atOnce := c.e.loadsAtOnce.Load(c.info.Language); atOnce && ks.Load != "" {
		load = true
	} else {
		if err := c.silentRequest(ks.Check, &out, &failure); err != nil {
			return err
		}
		load = out.String() == KernelSetupLoadWanted && ks.Load != ""
		if load {
			c.e.loadsAtOnce.Store(c.info.Language, true)
		} else {
			c.e.loadsAtOnce.Delete(c.info.Language)
		}
	}
	if load {
		if err := c.silentRequest(ks.Load, nil, &failure); err != nil {
			return err
		}
	}
	if failure.Len() == 0 {
		return nil
	}
	// Once at WARN (every kernel of the host is likely to fail alike),
	// then at DEBUG; each context's next execution shows it.
	level := slog.LevelDebug
	if c.e.setupFailureWarned.CompareAndSwap(false, true) {
		level = slog.LevelWarn
	}
	c.log.Log(context.Background(), level, "the kernel setup reported a failure; the context works without what failed", "language", c.info.Language, "stderr", failure.String())
	c.mu.Lock()
	c.setupFailure = failure.String()
	c.mu.Unlock()
	return nil
}

// takeSetupFailure returns what the last kernel setup reported failing, if
// it was not shown yet, for the execution that runs next.
func (c *Context) takeSetupFailure() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	text := c.setupFailure
	c.setupFailure = ""
	return text
}

type setupError struct {
	cwd string
	err error
}

func (e *setupError) Error() string {
	return fmt.Sprintf("Failed to set up the context (working directory %s, global env vars): %v", core.Quote(e.cwd), e.err)
}
func (e *setupError) Unwrap() error { return e.err }

// noteChosenCwd records the directory a kernel-side cwd choice ended in
// (what the setup printed, less the line end: nothing else in it prints, and
// a directory's name may hold a newline; see Config.DefaultCwdOnKernel),
// which createContext makes the context's cwd, and says so when it is not
// the configured default.
func (c *Context) noteChosenCwd(stdout string) {
	chosen := strings.TrimSuffix(strings.TrimSuffix(stdout, "\n"), "\r")
	if chosen == "" {
		return // a kernel that printed nothing: the cwd stays as configured
	}
	c.mu.Lock()
	c.chosenCwd = chosen
	c.mu.Unlock()
	if chosen != c.cwdChoices[0] {
		// Once at WARN (every context that follows finds the same), then
		// at DEBUG.
		level := slog.LevelDebug
		if c.e.cwdWarned.CompareAndSwap(false, true) {
			level = slog.LevelWarn
		}
		c.log.Log(context.Background(), level, "the default cwd is not a directory where the kernel runs; the context works in another",
			"default_cwd", c.cwdChoices[0], "cwd", chosen, "tried", c.cwdChoices)
	}
}
