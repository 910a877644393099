package subprocess

import (
	"context"
	"testing"

	"github.com/kernelhost/kernelhost/core"
	tt "github.com/kernelhost/kernelhost/transports/transporttest"
)

// A cell that replaces json.dumps and json.loads does not take the
// driver's messages with it: the next request answers, and an interrupt
// still stops a cell. Before the driver bound them at start, the next
// request never ended and the interrupt did nothing.
func TestPythonDriverKeepsItsJSON(t *testing.T) {
	t.Parallel()
	k := startKernel(t, "python", t.TempDir())
	result(t, k, "import json\njson.dumps = lambda *a, **k: 'x'\njson.loads = lambda *a, **k: {}")
	if got := result(t, k, "6 * 7"); got != "42" {
		t.Fatalf("6 * 7 = %q after json was replaced", got)
	}
	e := tt.Send(t, k, "import time\nprint('start', flush=True)\ntime.sleep(60)", false)
	tt.Collect(t, k, e, tt.ExecTimeout, func(tt.Received) bool { return e.Stream("stdout") != "" })
	if err := k.Interrupt(context.Background()); err != nil {
		t.Fatal(err)
	}
	tt.Collect(t, k, e, tt.InterruptTimeout, nil)
	if r := e.Reply(); r.Status != core.ReplyError || r.EName != "KeyboardInterrupt" {
		t.Errorf("reply %+v, want a KeyboardInterrupt", r)
	}
}
