package server_test

// Blast radius (issue 22): what one context's cell sends cannot take down
// the transport plugin that every context shares, nor cost another
// context its state. Through the real plugin, as kernelhost runs it.

import (
	"strings"
	"testing"

	"github.com/kernelhost/kernelhost/transports/testkit"
)

// bystander makes a python context holding a variable; check fails the
// test unless the context still holds it (same interpreter, state kept).
func bystander(t *testing.T, h *testHost) (check func()) {
	t.Helper()
	c := h.createContext(`{"language":"python"}`)
	noError(t, h.run(map[string]any{"code": "kept = 4242", "context_id": c.ID}))
	return func() {
		t.Helper()
		lines := h.run(map[string]any{"code": "kept", "context_id": c.ID})
		noError(t, lines)
		if got := mainResult(t, lines); got != "4242" {
			t.Fatalf("the bystander's variable: %q, want 4242", got)
		}
	}
}

// A cell of 10^6 nested brackets, typescript, or javascript with module
// syntax (and one with the word export only in a comment): a clear error
// for that cell, the plugin keeps running, a bystander keeps its state.
// Before the limit, esbuild's parser overflowed the plugin's stack.
func TestNestingBombKeepsPlugin(t *testing.T) {
	testkit.NeedCommand(t, "node", "nodejs")
	h := startHost(t, viaPlugin)
	check := bystander(t, h)
	plugin := h.PluginPID()
	bomb := strings.Repeat("[", 1000000) + strings.Repeat("]", 1000000)
	for _, c := range []struct{ language, code string }{
		{"typescript", "let a: number = 1;\n" + bomb},
		{"javascript", "export const a = 1;\n" + bomb},
	} {
		ctx := h.createContext(`{"language":"` + c.language + `"}`)
		e := onlyError(t, h.run(map[string]any{"code": c.code, "context_id": ctx.ID}))
		if e.str("name") != "SyntaxError" || !strings.Contains(e.str("value"), "1000 levels") {
			t.Errorf("%s bomb: error %v, want a SyntaxError naming the limit of 1000 levels", c.language, e)
		}
		lines := h.run(map[string]any{"code": "1 + 1", "context_id": ctx.ID})
		noError(t, lines)
		if got := mainResult(t, lines); got != "2" {
			t.Errorf("%s: the next cell's 1 + 1 = %q", c.language, got)
		}
	}
	// The word in a comment is not module syntax: node parses the cell
	// itself, in the context's own process; whatever node says of it, the
	// plugin is not involved.
	js := h.createContext(`{"language":"javascript"}`)
	h.run(map[string]any{"code": "// export later\n" + bomb, "context_id": js.ID})

	if now := h.PluginPID(); now != plugin {
		t.Fatalf("the plugin restarted (pid %d, was %d)", now, plugin)
	}
	check()
	rss, _ := testkit.StatusBytes(plugin, "VmHWM")
	figure(t, "plugin peak RSS after the bombs: %d MiB", rss>>20)
}
