package subprocess

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/kernelhost/kernelhost/core"
	tt "github.com/kernelhost/kernelhost/transports/transporttest"
)

// print and sys.stdout.write run in C: no Python function of the driver
// is called per print, only one per flush of sys.stdout's buffer. The cell
// counts the Python calls its own thread makes while it prints 10,000
// lines (sys.setprofile sees every Python call, not C ones).
func TestPythonPrintRunsInC(t *testing.T) {
	t.Parallel()
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
	t.Parallel()
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
	t.Parallel()
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
// writing (stdout in C, stderr in the driver's output code, where an
// interrupt is held back): either way the interrupt ends the loop, the
// output holds nothing but the prints, and the kernel goes on.
func TestPythonInterruptPrintLoop(t *testing.T) {
	t.Parallel()
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

// The driver's messages share fd 1 with print and child processes, as
// frames (frames.go). Output that looks like a frame is text: a mark with
// other digits, and the start of a mark at the end of what was written
// (held back while the host may read the rest, then sent: the print ends
// with it and the cell sleeps). A display larger than a frame arrives
// whole while a child process floods fd 1 at the same time.
func TestPythonFramesAmongOutput(t *testing.T) {
	t.Parallel()
	k := startKernel(t, "python", t.TempDir())
	fake := `sys.stdout.buffer.write(b'\x1ekh' + b'0' * 16 + b'.0005hello\n')`
	e := tt.Exec(t, k, "import sys\n"+fake+"\nprint('after')", false)
	if got, want := e.Stream("stdout"), "\x1ekh0000000000000000.0005hello\nafter\n"; got != want {
		t.Fatalf("stdout = %q, want %q", got, want)
	}

	e = tt.Send(t, k, "import sys, time\nsys.stdout.buffer.write(b'tail\\x1ek')\nsys.stdout.flush()\ntime.sleep(120)", false)
	tt.Collect(t, k, e, tt.ExecTimeout, func(tt.Received) bool { return e.Stream("stdout") == "tail\x1ek" })
	if r := e.Reply(); r.Type != "" {
		t.Fatalf("the cell ended before its output arrived:%s", e)
	}
	if err := k.Interrupt(context.Background()); err != nil {
		t.Fatal(err)
	}
	tt.Collect(t, k, e, tt.InterruptTimeout, nil)

	code := `import subprocess, sys
flood = subprocess.Popen(['sh', '-c', 'yes flood | head -c 4000000'])
for i in range(20):
    display({'text/plain': str(i) + ':' + 'x' * 100000}, raw=True)
flood.wait()
'done'`
	e = tt.Exec(t, k, code, false)
	var displays int
	for _, m := range e.Msgs {
		if m.Type == core.MsgDisplayData {
			if text := tt.TextPlain(m.Message); text != strconv.Itoa(displays)+":"+strings.Repeat("x", 100000) {
				t.Fatalf("display %d arrived as %.80q... (%d bytes)", displays, text, len(text))
			}
			displays++
		}
	}
	if displays != 20 || strings.Trim(e.Stream("stdout"), "flood\n") != "" || e.Reply().Status != core.ReplyOK {
		t.Fatalf("%d displays, stdout other than the flood: %.200q, reply %+v", displays, strings.Trim(e.Stream("stdout"), "flood\n"), e.Reply())
	}
}
