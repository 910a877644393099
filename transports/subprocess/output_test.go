package subprocess

import (
	"context"
	"strconv"
	"strings"
	"testing"

	tt "github.com/kernelhost/kernelhost/transports/transporttest"
)

// print and sys.stdout.write run in C: no Python function of the driver
// is called per print, only one per flush of sys.stdout's buffer. The cell
// counts the Python calls its own thread makes while it prints 10,000
// lines (sys.setprofile sees every Python call, not C ones).
func TestPythonPrintRunsInC(t *testing.T) {
	k := startKernel(t, "python", t.TempDir())
	code := `import sys
calls = 0
def count(frame, event, arg):
    global calls
    if event == 'call':
        calls += 1
sys.setprofile(count)
for i in range(10000):
    print(i)
sys.stdout.write('no newline')
sys.setprofile(None)
calls`
	e := tt.Exec(t, k, code, false)
	if got := strings.Count(e.Stream("stdout"), "\n"); got != 10000 {
		t.Fatalf("got %d lines:%s", got, e)
	}
	result, _ := e.Result()
	if calls, err := strconv.Atoi(result); err != nil || calls > 20 {
		t.Fatalf("10,000 prints made %s Python calls, want a few (one per buffer flush)", result)
	}
}

// sys.stdout and sys.stderr are text files as in a plain interpreter: a
// binary buffer (a UTF-8 sequence split over two writes arrives whole,
// bytes that are not UTF-8 arrive as U+FFFD), fileno, encoding; and a cell
// that closes sys.stdout leaves a working one to the cells after it.
func TestPythonStdoutIsATextFile(t *testing.T) {
	k := startKernel(t, "python", t.TempDir())
	code := `import sys
sys.stdout.buffer.write(b'caf\xc3')
sys.stdout.buffer.write(b'\xa9 \xff\n')
sys.stderr.buffer.write(b'e\xe2\x82')
sys.stderr.buffer.write(b'\xac\n')
print(sys.stdout.fileno(), sys.stderr.fileno(), sys.stdout.encoding, sys.stdout.isatty())`
	e := tt.Exec(t, k, code, false)
	if got, want := e.Stream("stdout"), "café \ufffd\n1 2 utf-8 False\n"; got != want {
		t.Fatalf("stdout = %q, want %q:%s", got, want, e)
	}
	if got, want := e.Stream("stderr"), "e€\n"; got != want {
		t.Fatalf("stderr = %q, want %q:%s", got, want, e)
	}
	tt.Exec(t, k, "import sys\nsys.stdout.close()\nsys.stderr.close()", false)
	if e := tt.Exec(t, k, "import sys\nprint('out')\nprint('err', file=sys.stderr)", false); e.Stream("stdout") != "out\n" || e.Stream("stderr") != "err\n" {
		t.Fatalf("after closing sys.stdout and sys.stderr:%s", e)
	}
}

// A forked child's prints arrive (it has no flusher thread: it sends each
// line), before the parent's that come after it waited for the child.
func TestPythonForkedChildPrints(t *testing.T) {
	k := startKernel(t, "python", t.TempDir())
	code := `import os, sys
print('before')
pid = os.fork()
if pid == 0:
    print('child')
    print('child err', file=sys.stderr)
    sys.stdout.write('partial')
    os._exit(0)
os.waitpid(pid, 0)
print('parent')`
	for range 5 {
		e := tt.Exec(t, k, code, false)
		if e.Stream("stdout") != "before\nchild\npartialparent\n" || e.Stream("stderr") != "child err\n" {
			t.Fatalf("outputs:%s", e)
		}
	}
}

// A loop of long prints, to stdout or stderr, spends most of its time
// writing to fd 4, where an interrupt is held back: it still ends the loop,
// and the kernel goes on.
func TestPythonInterruptPrintLoop(t *testing.T) {
	k := startKernel(t, "python", t.TempDir())
	for _, stream := range []string{"stdout", "stderr"} {
		e := tt.Send(t, k, "import sys\nwhile True:\n    print('x' * 100000, file=sys."+stream+")", false)
		tt.Collect(t, k, e, tt.ExecTimeout, func(tt.Received) bool { return strings.Contains(e.Stream(stream), "xxx") })
		if err := k.Interrupt(context.Background()); err != nil {
			t.Fatal(err)
		}
		tt.Collect(t, k, e, tt.InterruptTimeout, nil)
		if r := e.Reply(); r.EName != "KeyboardInterrupt" {
			t.Fatalf("%s: reply %+v, want KeyboardInterrupt", stream, r)
		}
		if s := e.Stream(stream); strings.Trim(s, "x\n") != "" {
			t.Fatalf("%s holds more than the prints: %.300q", stream, s)
		}
	}
}
