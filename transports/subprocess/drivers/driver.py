# kernelhost subprocess driver for Python.
#
# Protocol (see docs/drivers.md and ../frames.go): requests arrive on fd 3 as one
# JSON object per line {"msg_id": str, "code": str, "silent": bool}. print
# and sys.stdout write to fd 1 as in a plain interpreter, and the driver's
# messages (status, stderr text, display, result, error, reply: JSON lines)
# go into fd 1 too, as frames between the prints, so one pipe keeps them all
# in the order they were written, child processes' output included. fd 4 is
# held open and never written: the host sees this process end when it closes.
#
# Start-up is on the path of every cold context: inspect is not imported
# (types.CoroutineType is what its iscoroutine checks), and modules only
# some cells need (base64, termios and fcntl, traceback) are imported where
# they are used, through _import, builtins.__import__ as the driver started
# (user code replacing it does not reach the driver). Together ~10 ms, next
# to a bare python3 start of 25-30 ms.
import _thread
import ast
import builtins
import codecs
import functools
import io
import json
import linecache
import os
import re
import signal
import sys
import threading
import time
import types

_builtin_import = builtins.__import__


class _driver_path:
    # The driver's own imports never search the working directory: the
    # loader took it off sys.path (as -P does) before the imports above,
    # and the later ones (_import, the IPython shell's) run without it, so
    # a module another context saved in a shared directory never runs in
    # this driver. User code gets it back, first, as -c gives it.
    def __enter__(self):
        self.saved = sys.path
        sys.path = [p for p in self.saved if p not in ("", ".")]

    def __exit__(self, *exc):
        sys.path = self.saved


def _import(name):
    with _driver_path():
        return _builtin_import(name)


if "" not in sys.path:
    sys.path.insert(0, "")

REQ_FD, MSG_FD, OUT_FD = 3, 4, 1
# Children (os.system, subprocess) must not inherit the protocol channel: a
# grandchild holding fd 4 would keep the host from seeing the driver die.
os.set_inheritable(REQ_FD, False)
os.set_inheritable(MSG_FD, False)

_parent = ""  # msg_id of the request being run, "" between requests
_running = False  # True only while user code runs: SIGINT is ignored otherwise
_early_int = False  # SIGINT came after the request arrived, before its code ran
_arming = False  # the cell's start arms the flusher: a SIGINT then waits for the cell's code (_early_int)
_held_int = False  # a SIGINT that came while the main thread was in the output code, not raised yet
_main_thread = _thread.get_ident()
_driver_file = sys._getframe().f_code.co_filename
_quote = json.encoder.encode_basestring_ascii  # the C quoting json.dumps uses
# Bound at start: a cell that replaces json.dumps or json.loads (the module
# is the user's too) must not take the driver's messages and requests with
# it (docs/reliability.md says what user code can still redirect).
_dumps = json.dumps
_loads = json.loads

# Output.
#
# print and sys.stdout.write run in C, as in a plain interpreter writing to a
# pipe: sys.stdout is an io.TextIOWrapper over a 64 KiB io.BufferedWriter
# over an io.FileIO on fd 1. No Python code runs per print or per flush, so
# a loop of prints costs what printing into a file costs; the host makes
# each read of fd 1 a stream message. (Before, a raw writer of the driver's
# own made a JSON message of each flush, on fd 4: 200,000 prints took 1.7x
# the floor, now 1.1-1.3x; docs/benchmarks.md.)
#
# Every message of the driver is written into fd 1 as well, as frames
# (_write_msgs; ../frames.go has the layout), after a flush of stdout: the
# pipe keeps the order of prints, messages and child processes' output,
# and the host reads it in that order. sys.stderr is a TextIOWrapper whose
# every write reaches _StderrRaw.write, which sends it as a stream message
# at once: a message queued for later would let a print written after it
# reach the pipe first. One exception, so that print(x, file=sys.stderr),
# which writes x and then "\n", leaves as one message: text that does not
# end a line is held (_err_held) until the next stderr write, the next
# message or flush of the driver (_flush_output), or the flusher thread's
# second flush after it (held a whole _FLUSH_DELAY: the first may come
# between the text and its "\n"). A print that user code itself flushes
# (flush=True, sys.stdout.flush()) within that time, or 64 KiB of prints,
# can overtake held text. (stderr is
# rarely a hot path; the host merges the messages of a burst it reads at
# once.)
#
# Output is sent before any other message of the driver (_send: display,
# result, error, reply), before a child process starts (_on_audit), on
# flush() and print(flush=True), when the 64 KiB buffer is full, at the end
# of each cell, and by the flusher thread, which flushes every _FLUSH_DELAY
# while a cell runs: a print followed by time.sleep, or by a long
# computation, reaches the client within milliseconds. Most cells end
# sooner than that (1+1), and for them the thread must not wake at all (a
# wake, with the GIL handed over and back, costs more than the rest of the
# cell's driver code): the cell's start arms a timer (_arm_flusher, a
# timerfd) to fire once after _FLUSH_DELAY, its end disarms it, and the
# thread sleeps on the timer; when it fires, the thread flushes and, while
# the cell still runs, arms it again.
_write_lock = threading.Lock()
_FLUSH_BYTES = 1 << 16
_FLUSH_DELAY = 0.002  # seconds
_flusher_lock = threading.Lock()  # held where the thread starts
_flusher_thread = None
_timer = None  # the flusher's _Timer, once its thread runs
_cells = 0  # cells that armed the timer (a SIGINT's resend is for one cell only)
_no_timer = False  # True where no timer could be made
_fork_guard = threading.Lock()  # held by the flusher while it flushes, and by a fork


def _take_env(name):
    value = os.environ.pop(name, None)  # user code and its children do not see it
    return value


# A frame: mark, kind ('.' the last piece of a batch, '+' more to come), the
# payload's length in 4 hex digits, the payload. Each is one write of at
# most PIPE_BUF (4096) bytes, which no other writer of the pipe can cut.
_FRAME_MARK = b"\x1ekh" + (_take_env("KH_FRAME_MARK") or "0" * 16).encode()
_FRAME_PAYLOAD = 4096 - len(_FRAME_MARK) - 5
_STDERR_HEAD = '{"type":"stream","name":"stderr","parent_id":'
_err_held = None  # (parent_id, text, tick): stderr text that does not end a line, not sent yet
_ticks = 0  # the flusher thread's flushes so far: the tick a hold began is its age
_hold_err = True  # False in a forked child, which has no flusher thread to send held text


def _write_msgs(data):
    """Write data, whole JSON lines, into fd 1 as frames."""
    write, mark, size = os.write, _FRAME_MARK, _FRAME_PAYLOAD
    with _write_lock:
        for at in range(0, max(len(data), 1), size):
            piece = data[at : at + size]
            kind = b"." if at + size >= len(data) else b"+"
            frame = b"%s%s%04x%s" % (mark, kind, len(piece), piece)
            while frame:  # a pipe takes it whole; a file might not
                frame = frame[write(OUT_FD, frame) :]


def _flush_output():
    """Send the output not sent yet, in the order it was written: held stderr
    text first (stdout was flushed when it was written)."""
    if _err_held is not None:
        _send_held_err()
    try:
        _stdout.flush()
    except ValueError:  # user code closed sys.stdout: give the cells after a new one
        _open_stdout()


def _stderr_msg(parent, text):
    # parent_id "" (a thread writing between requests): the host gives it
    # the running request's id, or drops it.
    return (_STDERR_HEAD + _quote(parent) + ',"text":' + _quote(text) + "}\n").encode()


def _send_held_err():
    global _err_held
    held, _err_held = _err_held, None
    if held is not None:
        _write_msgs(_stderr_msg(held[0], held[1]))


def _send(data):
    """Write data, whole JSON lines, to the host, after all the output written before it."""
    _raise_held()
    _flush_output()
    _write_msgs(data)


def _emit(*msgs):
    # Several messages go out in one batch: one wake-up of the host.
    _send("".join(_dumps(m) + "\n" for m in msgs).encode())


class _StderrRaw(io.RawIOBase):
    """The bottom of sys.stderr: bytes in, stream messages out."""

    # A class attribute, not IOBase's property: TextIOWrapper asks on every
    # write, and a lookup is cheaper than a call. Closing is refused instead
    # (close).
    closed = False
    name = "<stderr>"

    def __init__(self):
        # Whole characters only: a sequence split over two writes (a write
        # to .buffer) is held until it is complete; invalid bytes become U+FFFD.
        self._decode = codecs.getincrementaldecoder("utf-8")("replace").decode

    def writable(self):
        return True

    def fileno(self):
        return 2

    def isatty(self):
        return False

    def write(self, b):
        global _err_held
        _raise_held()
        text = self._decode(b)
        if not text:
            return len(b)
        held, parent = _err_held, _parent
        try:
            tick = _ticks
            if held is not None and held[0] == parent:
                _err_held, text, tick = None, held[1] + text, held[2]
            if text[-1] != "\n" and _hold_err:
                _flush_output()  # what stdout holds was written before
                _err_held = (parent, text, tick)
            else:
                _send(_stderr_msg(parent, text))
        except OSError:  # the host closed fd 1: nobody reads the output any more
            pass
        return len(b)


def _open_stdout():
    """Make sys.stdout (again: user code may close it)."""
    global _stdout
    old = _stdout
    raw = io.FileIO(1, "w", closefd=False)  # exactly FileIO: TextIOWrapper then checks closed in C
    raw.name = "<stdout>"
    _stdout = io.TextIOWrapper(io.BufferedWriter(raw, _FLUSH_BYTES), encoding="utf-8", errors="replace")
    if sys.stdout is old:
        sys.stdout = _stdout


_stdout = sys.stdout
_open_stdout()
# Each write reaches _StderrRaw (write_through, no buffer between).
sys.stderr = io.TextIOWrapper(_StderrRaw(), encoding="utf-8", errors="replace", write_through=True)


class _Timer:
    """A timerfd (Python 3.11 has no os.timerfd_create, hence ctypes).
    arm() makes it fire once, _FLUSH_DELAY from now; disarm() stops it.
    Each is one system call, with the GIL kept (PyDLL: it never blocks)."""

    def __init__(self):
        ctypes = _import("ctypes")
        libc = ctypes.PyDLL(None, use_errno=True)
        clock_monotonic = 1
        self.fd = libc.timerfd_create(clock_monotonic, os.O_NONBLOCK | os.O_CLOEXEC)
        if self.fd < 0:
            err = ctypes.get_errno()
            raise OSError(err, "timerfd_create: " + os.strerror(err))
        # struct itimerspec: it_interval (0: once), it_value, each {tv_sec, tv_nsec} of C longs.
        field = lambda n: n.to_bytes(ctypes.sizeof(ctypes.c_long), sys.byteorder)
        once = field(0) * 3 + field(int(_FLUSH_DELAY * 1e9))
        settime = libc.timerfd_settime
        self.arm = functools.partial(settime, self.fd, 0, once, None)
        self.disarm = functools.partial(settime, self.fd, 0, field(0) * 4, None)

    def close(self):
        os.close(self.fd)


def _arm_flusher():
    """At a cell's start (_running set): have its output flushed every
    _FLUSH_DELAY from _FLUSH_DELAY on, while it runs."""
    global _cells
    _cells += 1
    if _timer is None:
        with _flusher_lock:
            if _flusher_thread is None:
                _start_flusher()
    if _timer is not None:
        _timer.arm()


def _disarm_flusher():
    """At a cell's end (_running cleared)."""
    timer = _timer
    if timer is not None:
        timer.disarm()


def _start_flusher():
    """Make the timer and start the thread, in the main thread (_flusher_lock
    held): the first time, importing ctypes, which the thread must not do
    (_import changes sys.path, which a cell may be using). Where there can
    be no timer (no ctypes, no timerfd), no thread starts, and output waits
    for the cell's end or a full buffer."""
    global _flusher_thread, _timer, _no_timer
    if _no_timer:
        return
    try:
        timer = _Timer()
        poll = _import("select").poll()
        poll.register(timer.fd, 1)  # POLLIN
    except Exception:
        _no_timer = True
        return
    thread = threading.Thread(target=_flush_loop, args=(timer, poll), name="kernelhost-output", daemon=True)
    try:
        thread.start()
    except RuntimeError:  # no thread to be had (a limit on threads): the next cell tries again
        timer.close()
        return
    _flusher_thread, _timer = thread, timer


def _output_thread_takes_no_sigint():
    # A SIGINT the kernel delivers to this thread sets Python's flag but
    # does not wake the main thread out of a blocking call (time.sleep(120)
    # slept on, the interrupt lost): with SIGINT blocked here it always goes
    # to a thread that runs user code.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})


def _flush_loop(timer, poll):
    # The thread lives as long as the interpreter, asleep on the timer
    # between cells: it costs nothing there, and a thread started again
    # for the next cell would add its start to that cell (an agent's cells
    # come seconds apart; docs/benchmarks.md).
    _output_thread_takes_no_sigint()
    while True:
        poll.poll()
        try:
            os.read(timer.fd, 8)
        except BlockingIOError:
            pass  # disarmed or armed again since it fired
        _flush_from_thread()
        if _running:
            timer.arm()


def _flush_from_thread():
    """Flush stdout from the output thread, under the fork guard (no flush is
    half done in a forked child), with an error swallowed (ValueError: user
    code closed sys.stdout, the next cell's output makes a new one; OSError:
    the host closed fd 1, nobody reads the output any more)."""
    global _ticks
    _ticks += 1
    with _fork_guard:
        try:
            held = _err_held
            # Held text goes only once held since before the previous tick:
            # the "\n" of a print to stderr may be a microsecond behind its
            # text. Until then stdout waits too (it was written after).
            if held is None:
                _stdout.flush()
            elif held[2] < _ticks - 1:
                _send_held_err()
                _stdout.flush()
        except Exception:
            pass
    _check_lost_sigint()


def _before_fork():
    # No flush may be half done in the child (its BufferedWriter lock would
    # stay taken there), and the child must not inherit unsent output.
    _fork_guard.acquire()
    try:
        _flush_output()
    except OSError:
        pass


def _after_fork_in_child():
    # A forked child (multiprocessing, os.fork) has no flusher thread: its
    # stdout is flushed at each newline instead (stderr is sent at each write).
    global _flusher_thread, _timer, _write_lock, _flusher_lock, _fork_guard, _hold_err
    _flusher_thread = None
    if _timer is not None:
        _timer.close()  # the parent's timer: armed here, it would wake the parent's thread
    _timer = None
    _hold_err = False
    try:
        signal.set_wakeup_fd(-1)  # the pipe is the parent's, and the child has no output thread to read one
    except (ValueError, OSError):
        pass
    _write_lock = threading.Lock()
    _flusher_lock = threading.Lock()
    _fork_guard = threading.Lock()
    try:
        _stdout.reconfigure(line_buffering=True)
    except ValueError:
        pass


# _fork_guard is looked up at each fork: a forked child (a context forked
# from the template included) has a lock of its own.
os.register_at_fork(before=_before_fork, after_in_parent=lambda: _fork_guard.release(), after_in_child=_after_fork_in_child)
_os_exit = os._exit


def _exit_after_output(status):
    """os._exit, once the output printed before it is out."""
    try:
        _flush_output()
    except OSError:
        pass
    _os_exit(status)


_exit_after_output.__name__ = _exit_after_output.__qualname__ = "_exit"
_exit_after_output.__doc__ = _os_exit.__doc__
os._exit = _exit_after_output


# A child process writes to fd 1 and 2. Its stdout shares fd 1 with the
# prints and the frames, so the pipe keeps their order. fd 2 the host reads
# apart; it drains fd 2 before it hands on a message read from fd 1, so a
# child's stderr never comes after a later message. For the other
# direction (a message, then a child writes to fd 2), just before a child
# starts this waits until the host has handed on all that was written to
# fd 1: the host reads fd 1 and hands on what it read in turn, so once it
# has read fd 1 empty, then read an empty frame written after that, the
# earlier messages are out, and the child's output, read later, comes after
# them. Usually this costs two ioctls and a write; it is bounded, so a host
# that does not read (or a background child that keeps fd 1 full) cannot
# hang the cell.
_SPAWN_EVENTS = frozenset(("os.system", "subprocess.Popen", "os.posix_spawn", "os.fork", "os.forkpty", "os.exec"))
_SYNC_WAIT = 1.0  # seconds, for each of the two waits


def _on_audit(event, args):
    if event in _SPAWN_EVENTS:
        _flush_output()
        if _wait_host_read():
            _write_msgs(b"")  # an empty frame: the host hands on nothing
            _wait_host_read()


def _wait_host_read():
    """Wait until the host has read all of fd 1; False if it did not in time."""
    unread = bytearray(4)
    deadline = None
    try:
        ioctl, fionread = _import("fcntl").ioctl, _import("termios").FIONREAD
        while True:
            ioctl(OUT_FD, fionread, unread)
            if not any(unread):
                return True
            now = time.monotonic()
            if deadline is None:
                deadline = now + _SYNC_WAIT
            elif now > deadline:
                return False
            time.sleep(0.00005)
    except OSError:
        return False


sys.addaudithook(_on_audit)

# An interrupt must never land inside the driver's output code: there it
# could lose output taken from a buffer, leave half a message on fd 4 (the
# next one would be glued to it and both lost), or make a TextIOWrapper
# send a write twice (_StderrRaw.write raising after it queued the text).
# The SIGINT handler does not raise while one of these functions is on the
# stack: it holds the interrupt, which the next call of the output code
# raises before it takes any output (_raise_held), and has the signal sent
# again every 0.5 ms until it is raised (_interrupt_again), so that it lands
# in user code. print to stdout runs no driver code: there an interrupt acts
# as in a plain interpreter. A write to fd 1 never sends a byte twice or
# half a character; one the interrupt cuts while it waits for a full pipe
# (the host more than a pipe's worth behind) drops the text print handed to
# the buffer in that call, at most 8 KiB, as a plain interpreter would.
_OUTPUT_CODES = frozenset(
    f.__code__ for f in (_write_msgs, _flush_output, _send_held_err, _send, _emit, _StderrRaw.write, _exit_after_output)
)


def _in_output(frame):
    while frame is not None:
        if frame.f_code in _OUTPUT_CODES:
            return True
        frame = frame.f_back
    return False


def _interrupt_again():
    # Another thread sends it: sent from the handler itself, the signal would
    # be handled again at once, inside the handler. A real signal, not
    # _thread.interrupt_main: it must also end a time.sleep.
    while _held_int and _running:
        time.sleep(0.0005)
        if _held_int and _running:
            signal.pthread_kill(_main_thread, signal.SIGINT)


def _raise_held():
    """Raise a KeyboardInterrupt held back in the output code, in the main thread."""
    global _held_int
    if _held_int and _running and _thread.get_ident() == _main_thread:
        _held_int = False
        raise KeyboardInterrupt

# Rich display and IPython's cell semantics are kernelhost's python package's
# (_kernelhost.shell in transports/kernelpy), attached at start
# (_load_kernelhost). _NoShell stands in where that failed (reported as the
# package reports its failures): no IPython, results as their repr.
class _NoShell:
    obj = None
    missing = "kernelhost's python package (_kernelhost.shell) did not load"

    @staticmethod
    def shell():
        return None

    @staticmethod
    def bundle(value):
        return {"text/plain": repr(value)}

    @staticmethod
    def post_execute_quiet():
        return True


_sh = _NoShell


def _attach_shell(kernelhost):
    global _sh
    shell = kernelhost.load(kernelhost.__name__ + ".shell")
    if shell is not None:
        shell.attach(
            types.SimpleNamespace(
                emit=_emit,
                parent=lambda: _parent,
                count=lambda: _count,
                main_module=_main_module,
                own_imports=_driver_path,
                import_module=_import,
            )
        )
        _sh = shell


def _load_kernelhost():
    """Make kernelhost's python package (transports/kernelpy) from what the
    loader gave: compiled, from the cache, or source. Its environment loads
    now, while the interpreter waits in the pool or starts. What fails is
    reported when the host's setup request asks (_kernelhost.report)."""
    bootstrap = globals().get("_kh_bootstrap")
    if bootstrap is None:
        return  # run by hand, without the loader: the setup request brings the environment
    try:
        if isinstance(bootstrap, str):
            bootstrap = compile(bootstrap, "<kernelhost bootstrap>", "exec")
        with _driver_path():
            exec(bootstrap, {"__name__": "_kernelhost_bootstrap", "MODULES": dict(_kh_modules), "BEFORE_START": _attach_shell, "NOW": True})
    except Exception:
        # The host's setup request finds no package and sends it as source,
        # whose bootstrap fails the same way and says why.
        sys.modules.pop("_kernelhost", None)



# A SIGINT can be lost for as long as a blocking call lasts: CPython runs
# the Python handler in the main thread only, at its next bytecode or when
# the signal cuts short the call it is in. One that reaches another thread
# (a user thread), or the main thread just before it enters time.sleep,
# only sets a flag, and time.sleep(120) sleeps on (seen under load:
# TestPythonPrintArrivesDuringSleep). Its C handler also writes a byte to
# the wakeup pipe, which _on_sigint empties: the output thread, at each
# flush while a cell runs (about every 2 ms), reads the pipe, and when a
# SIGINT seen there has not been handled by its next flush, it sends the
# signal to the main thread again (_check_lost_sigint), a few times at most.
_sigint_r, _sigint_w = os.pipe()  # not inherited by children
os.set_blocking(_sigint_r, False)
os.set_blocking(_sigint_w, False)
signal.set_wakeup_fd(_sigint_w, warn_on_full_buffer=False)
_SIGINT_BYTE = bytes((signal.SIGINT,))
_sigint_runs = 0  # how many times _on_sigint ran
_sigint_wait = None  # (_sigint_runs when the output thread saw a SIGINT, the cell it saw it in, resends so far)
_SIGINT_RESENDS = 5


def _check_lost_sigint():
    # The main thread's handler empties the pipe before it counts the run
    # (_on_sigint), and this reads the count before the pipe: a thread switch
    # between any two of these steps makes a handled SIGINT look handled,
    # never lost. A resend is for the cell that was running when the SIGINT
    # was seen only: one that reached the next cell interrupted it (seen in
    # CI: TestExecutionTimeoutHostDefault).
    global _sigint_wait
    runs, cell = _sigint_runs, _cells
    try:
        seen = _SIGINT_BYTE in os.read(_sigint_r, 512)
    except OSError:  # empty: every SIGINT so far was handled, or never came
        seen = False
    if seen and _running:
        _sigint_wait = (runs, cell, 0)
    elif _sigint_wait is not None:
        runs, cell, resends = _sigint_wait
        if runs != _sigint_runs or cell != _cells or not _running or resends >= _SIGINT_RESENDS:
            _sigint_wait = None
        else:
            _sigint_wait = (runs, cell, resends + 1)
            signal.pthread_kill(_main_thread, signal.SIGINT)


def _on_sigint(signum, frame):
    global _early_int, _held_int, _sigint_runs
    try:
        os.read(_sigint_r, 512)  # handled: the output thread need not send it again
    except OSError:
        pass
    _sigint_runs += 1  # after the read: see _check_lost_sigint
    if _running and not _arming:
        if _in_output(frame):
            # Held: the next output call raises it before it takes anything
            # (_raise_held), or it is raised again where user code runs.
            if not _held_int:
                _held_int = True
                _thread.start_new_thread(_interrupt_again, ())
            return
        _held_int = False
        raise KeyboardInterrupt
    if _parent:
        # The request is in, its code not started yet: interrupt it when it does.
        _early_int = True
    # Between requests an interrupt has nothing to stop: ignore it.


signal.signal(signal.SIGINT, _on_sigint)

# User code runs in a fresh __main__ module, apart from the driver's globals
# (with -c the driver itself is __main__), so it cannot clobber the driver and
# pickling of user-defined classes still finds them.
_main_module = types.ModuleType("__main__")
_main_module.__builtins__ = builtins
sys.modules["__main__"] = _main_module
_ns = _main_module.__dict__
_loop = None


def _await(value):
    global _loop
    import asyncio

    if _loop is None:
        _loop = asyncio.new_event_loop()
    return _loop.run_until_complete(value)


_FLAGS = getattr(ast, "PyCF_ALLOW_TOP_LEVEL_AWAIT", 0)


def _run(code, filename, silent):
    """Run a cell: statements, then the trailing expression, whose value it
    returns (None where a trailing ';' hides it)."""
    source, tree = _parse(code, filename)
    # Tracebacks show the lines that ran, read from here.
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    quiet = _may_end_with_semicolon(source) and _sh.shell() is not None
    shell = _sh.obj
    if shell is not None and not silent:
        # What IPython's run_cell does around the code that matters here:
        # In/_i and the ';' check read the history, and pre_execute and
        # post_execute (see _execute) are the events extensions hook into.
        shell.history_manager.store_inputs(_count, source, code)  # its execution_count is _count (_kernelhost.shell)
        quiet = quiet and shell.displayhook.quiet()
        shell.events.trigger("pre_execute")
    expr = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        expr = ast.Expression(tree.body.pop().value)
    result = eval(compile(tree, filename, "exec", flags=_FLAGS), _ns)
    if isinstance(result, types.CoroutineType):
        _await(result)
    if expr is None:
        return None
    value = eval(compile(expr, filename, "eval", flags=_FLAGS), _ns)
    if isinstance(value, types.CoroutineType) and _has_await(expr):
        value = _await(value)
    return None if quiet else value


def _parse(code, filename):
    """The cell as Python source and its tree: dedented, or where it is not
    Python (`!cmd`, `%magic`, ...), turned into Python by IPython's input
    transformers."""
    source = _dedent(code)
    try:
        tree = ast.parse(source, filename=filename, mode="exec")
        if not _unbound_name(tree) or _sh.shell() is None:
            return source, tree
        # A lone unbound name (`pwd`, `ls`): IPython's automagic may run it.
    except SyntaxError:
        if _sh.shell() is None:
            _check_needs_ipython(source)
            raise
    source = _sh.obj.transform_cell(code)
    return source, ast.parse(source, filename=filename, mode="exec")


def _unbound_name(tree):
    """Whether the cell is one name, bound nowhere: IPython reads `pwd` as %pwd."""
    body = tree.body
    if len(body) != 1 or not isinstance(body[0], ast.Expr) or not isinstance(body[0].value, ast.Name):
        return False
    name = body[0].value.id
    return name not in _ns and not hasattr(builtins, name)


def _dedent(code):
    """Remove the first line's indentation from every line that has it.

    A cell cut from an indented block runs as IPython runs it (its
    leading_indent transformer does the same), with or without IPython.
    Blank lines stay, so line numbers are the user's.
    """
    if not code[:1].isspace():
        return code  # most cells: one check
    lines = code.splitlines(True)
    first = next((line for line in lines if line.strip()), "")
    indent = first[: len(first) - len(first.lstrip(" \t"))]
    if not indent:
        return code
    return "".join(line[len(indent) :] if line.startswith(indent) else line for line in lines)


def _may_end_with_semicolon(source):
    # A cheap look at the last line with code; IPython's displayhook.quiet()
    # decides (a ';' in a string or comment does not count).
    for line in reversed(source.splitlines()):
        line = line.strip()
        if line and not line.startswith("#"):
            return ";" in line
    return False


# A line IPython would run: `!cmd`, `%magic`, `%%cell_magic`, `x = !cmd`.
_IPYTHON_LINE = re.compile(r"^[ \t]*(?:[!%]|[\w.]+[ \t]*=[ \t]*[!%])", re.MULTILINE)


def _check_needs_ipython(source):
    """Without IPython, a cell with IPython syntax fails saying what to install."""
    match = _IPYTHON_LINE.search(source)
    if match is None:
        return
    line = source.count("\n", 0, match.start()) + 1
    raise ModuleNotFoundError(
        "line %d is IPython syntax (!command or %%magic), which needs IPython, and %s cannot import it (%s): "
        "install it (Debian: apt-get install python3-ipython; pip: pip install ipython) "
        "or point KERNELHOST_PYTHON at a Python that has it" % (line, sys.executable, _sh.missing),
        name="IPython",
    ) from None


# The engine's helper requests (cwd, env set and reset: silent, and marked by
# their first line, HELPER_MARK) run apart from user code, with the builtins, os and sys the driver took at start-up: user
# code that replaced builtins.__import__, os.environ or sys.modules cannot
# turn an env reset into a no-op that reports success.
# os.environ's own methods are taken too, bound, since user code can patch
# its class.
def _env_get(key, default=None, _getitem=os.environ.__getitem__):
    try:
        return _getitem(key)
    except KeyError:
        return default


def _env_pop(key, default=None, _getitem=os.environ.__getitem__, _delitem=os.environ.__delitem__):
    try:
        value = _getitem(key)
    except KeyError:
        return default
    _delitem(key)
    return value


_helper_environ = types.SimpleNamespace(get=_env_get, pop=_env_pop, __setitem__=os.environ.__setitem__)
_helper_modules = {
    "os": types.SimpleNamespace(environ=_helper_environ, chdir=os.chdir),
    "sys": types.SimpleNamespace(),
}
_helper_builtins = dict(builtins.__dict__, __import__=lambda name, *args, **kwargs: _helper_modules[name])


HELPER_MARK = "# kernelhost helper\n"


def _run_helper(code):
    exec(compile(code, "<silent>", "exec"), {"__builtins__": _helper_builtins})


# A pooled interpreter starts in the pool's directory. The host hands it to
# a context in another by sending {"cwd": dir} on fd 3 before any request
# (../pool.go); the driver answers kh_cwd, with evalue when it could not
# enter dir (an absolute path). Then it is as if started there: os.chdir
# moves import (-c put '' first on sys.path, which import resolves to the
# cwd at each lookup) and child processes; PWD is dir, as the host gives a
# cold start; invalidate_caches drops what import's finders know of
# directories (a FileFinder keeps a directory's listing until its mtime
# changes: a module written in the same tick as the listing would not be
# found). A context forked from a template ahead of need gets the record
# at every hand-out ("" for dir: it stays where it is) and is handed out
# only if nothing its template preloaded changed on disk since
# (forkserver.py's _stale, which python.go appends here; a driver that is
# no template's fork watches nothing).
def _enter_cwd(path):
    why = _stale()
    if why is not None:
        _emit({"type": "kh_cwd", "evalue": why})
        return
    if not path:
        _emit({"type": "kh_cwd"})
        return
    try:
        os.chdir(path)
    except (OSError, TypeError, ValueError) as exc:
        _emit({"type": "kh_cwd", "evalue": str(exc) or type(exc).__name__})
        return
    os.environ["PWD"] = path
    import importlib

    importlib.invalidate_caches()
    _emit({"type": "kh_cwd"})


def _has_await(node):
    return any(isinstance(n, ast.Await) for n in ast.walk(node))


def _traceback(etype, value, tb, filename):
    # Drop the driver's own frames: the user sees only their cell.
    while tb is not None and tb.tb_frame.f_code.co_filename == _driver_file:
        tb = tb.tb_next
    try:
        traceback = _import("traceback")
    except Exception:
        # Its own imports failed: user code replaced builtins.__import__
        # before the first error (traceback.py's imports use the builtin).
        return ["%s: %s" % (etype.__name__, value) if str(value) else etype.__name__]
    if tb is None or (isinstance(value, SyntaxError) and value.filename == filename):
        # The cell did not compile: no frame is the user's, show only the
        # offending line as Python does.
        lines = traceback.format_exception_only(etype, value)
    else:
        lines = traceback.format_exception(etype, value, tb)
    return [line.rstrip("\n") for line in lines]


def _execute(req):
    global _parent, _running, _count, _early_int, _held_int, _arming
    msg_id = req.get("msg_id", "")
    code = req.get("code", "")
    silent = bool(req.get("silent"))
    _early_int = _held_int = False
    _parent = msg_id
    opening = [{"type": "status", "parent_id": msg_id, "state": "busy"}]
    if not silent:
        _count += 1
        opening.append({"type": "execute_input", "parent_id": msg_id, "execution_count": _count})
    _emit(*opening)
    filename = "Cell In[%d]" % _count if not silent else "<silent>"
    reply = {"type": "execute_reply", "parent_id": msg_id, "status": "ok", "execution_count": _count}
    # The closing messages go out in one write: one wake-up of the host.
    closing = []
    # With the shell, post_execute runs after the cell: the inline backend
    # shows the figures still open then, after the result and the error,
    # as in IPython, so those go out first.
    post_execute = _sh.obj is not None and not silent
    try:
        _running = True
        try:
            if _early_int:
                raise KeyboardInterrupt
            if silent:
                # The engine's own requests (its helpers, its check of a
                # new kernel): short, their output read at their end, so
                # they start no flusher thread.
                value = _run_helper(code) if code.startswith(HELPER_MARK) else _run(code, filename, silent)
            else:
                # A print while the cell runs is sent within _FLUSH_DELAY. A
                # SIGINT while the flusher is armed (its first time makes a
                # thread) is the cell's, raised before its code, not in the
                # middle of the flusher's state nor held for a resend that
                # could land in a later cell.
                _arming = True
                try:
                    _arm_flusher()
                finally:
                    _arming = False
                if _early_int:
                    raise KeyboardInterrupt
                value = _run(code, filename, silent)
            post_execute = _sh.obj is not None and not silent  # the cell may have created it
            if value is not None and not silent:
                result = {"type": "execute_result", "parent_id": msg_id, "execution_count": _count, "data": _sh.bundle(value)}
                _remember_result(value)
                if post_execute and not _sh.post_execute_quiet():
                    _emit(result)
                else:
                    closing.append(result)  # with the reply: one write
            if post_execute:
                post_execute = False
                _sh.obj.events.trigger("post_execute")
        finally:
            _running = False
            _disarm_flusher()
    except BaseException as exc:  # KeyboardInterrupt and SystemExit included: the kernel lives on
        _running = False
        ename = type(exc).__name__
        evalue = str(exc)
        tb = _traceback(type(exc), exc, exc.__traceback__, filename)
        error = {"type": "error", "parent_id": msg_id, "ename": ename, "evalue": evalue, "traceback": tb}
        reply.update(status="error", ename=ename, evalue=evalue, traceback=tb)
        post_execute = post_execute or (_sh.obj is not None and not silent)
        if post_execute:
            _emit(error)
            _post_execute_after_error()
        else:
            closing.append(error)
    closing.append(reply)
    closing.append({"type": "status", "parent_id": msg_id, "state": "idle"})
    _emit(*closing)
    _parent = ""


def _remember_result(value):
    # _ (and with the shell __, ___, _N and Out[N], as IPython keeps them).
    if _sh.obj is not None:
        _sh.obj.displayhook.update_user_ns(value)
    else:
        builtins._ = value


def _post_execute_after_error():
    global _running
    _running = True
    try:
        _sh.obj.events.trigger("post_execute")
    except BaseException:
        pass  # the cell already failed; an interrupt here ends only the callbacks
    finally:
        _running = False


_count = 0


def _main():
    reqs = os.fdopen(REQ_FD, "rb", buffering=1 << 16)
    _emit({"type": "kh_ready"})
    # The flusher's timer and thread now, while the interpreter waits for
    # its first request (in the pool, or while the host hands it out): the
    # first timer imports ctypes.
    with _flusher_lock:
        if _flusher_thread is None:
            _start_flusher()
    while True:
        try:
            line = reqs.readline()
        except KeyboardInterrupt:  # a late interrupt between requests
            continue
        if not line:
            _flush_output()  # what threads printed since the last request
            return
        try:
            req = _loads(line)
            if "cwd" in req:
                _enter_cwd(req["cwd"])
            elif "fork" in req:  # a fork of this context (forkserver.py)
                _fork_context(req["fork"], False)
            else:
                _execute(req)
        except KeyboardInterrupt:
            # Landed in the driver's own code after user code ended; the
            # request already has its reply or gets none: keep serving.
            continue


_load_kernelhost()
# forkserver.py, which python.go appends here, calls _main() (or, in a fork
# template, serves forks).
