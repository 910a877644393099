# kernelhost subprocess driver for Python.
#
# Protocol (see ../doc.go): requests arrive on fd 3 as one JSON object per line
# {"msg_id": str, "code": str, "silent": bool}; messages leave on fd 4 as one
# JSON core.Message per line. print and sys.stdout/sys.stderr go out as
# stream messages on fd 4 too, so everything this process writes keeps its
# order; output written to fd 1/2 directly (os.system, child processes, C
# code) is forwarded by the host, which drains fd 1/2 before each fd-4 read
# it hands on, so none comes after a later message.
import ast
import base64
import builtins
import fcntl
import inspect
import json
import linecache
import os
import signal
import sys
import termios
import threading
import time
import traceback
import types

REQ_FD, MSG_FD = 3, 4
# Children (os.system, subprocess) must not inherit the protocol channel: a
# grandchild holding fd 4 would keep the host from seeing the driver die.
os.set_inheritable(REQ_FD, False)
os.set_inheritable(MSG_FD, False)

_write_lock = threading.Lock()
_parent = ""  # msg_id of the request being run, "" between requests
_running = False  # True only while user code runs: SIGINT is ignored otherwise
_early_int = False  # SIGINT came after the request arrived, before its code ran
_defer_int = False  # the main thread is writing a long message: hold SIGINT
_held_int = False  # a SIGINT held back by _defer_int
_main_thread = threading.get_ident()
_driver_file = sys._getframe().f_code.co_filename
_PIPE_BUF = 4096  # a write up to this size to a pipe is atomic
_quote = json.encoder.encode_basestring_ascii  # the C quoting json.dumps uses


def _send(data):
    """Write one or more whole JSON lines to fd 4.

    A KeyboardInterrupt must never leave half a line there: the next message
    would be glued to it and both lost. A write up to PIPE_BUF is atomic on a
    blocking pipe (all or nothing), so the common case is one os.write; a
    longer one holds SIGINT back in the main thread until the line is out.
    """
    with _write_lock:
        if len(data) <= _PIPE_BUF:
            n = os.write(MSG_FD, data)
            if n == len(data):
                return
            data = data[n:]  # not expected on a blocking pipe; finish below
        _send_long(data)


def _send_long(data):
    global _defer_int, _held_int
    main = threading.get_ident() == _main_thread
    if main:
        _defer_int = True
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(MSG_FD, view):]
    finally:
        if main:
            _defer_int = False
    if main and _held_int:
        _held_int = False
        if _running:
            raise KeyboardInterrupt


def _emit(*msgs):
    # Several messages go out in one write: the host reads fd 1/2 between
    # reads of fd 4, so busy and execute_input must arrive together.
    _send("".join(json.dumps(m) + "\n" for m in msgs).encode())


class _Stream:
    """sys.stdout/sys.stderr: each write is one stream message on fd 4, at once.

    One channel for print, display and results keeps them in the order they
    were written, stdout against stderr included (as ipykernel does over
    IOPub). Unbuffered, so output streams live; a message costs one quoting
    in C and one os.write.
    """

    encoding = "utf-8"
    errors = "replace"

    def __init__(self, name, fd):
        self.name = name
        self._fd = fd
        self._head = '{"type":"stream","name":"%s","parent_id":' % name

    def write(self, s):
        if not isinstance(s, str):
            raise TypeError("write() argument must be str, not " + type(s).__name__)
        if s:
            # parent_id "" (a thread writing between requests): the host
            # gives it the running request's id, or drops it.
            _send((self._head + _quote(_parent) + ',"text":' + _quote(s) + "}\n").encode())
        return len(s)

    def writelines(self, lines):
        for line in lines:
            self.write(line)

    def flush(self):
        pass

    def fileno(self):
        return self._fd

    def isatty(self):
        return False

    def readable(self):
        return False

    def writable(self):
        return True

    def seekable(self):
        return False

    @property
    def closed(self):
        return False


# A child process writes to fd 1/2, which the host reads apart from fd 4. The
# host drains fd 1/2 before it hands on what it read from fd 4, so a child's
# output never comes after a later print. For the other direction (print,
# then a child prints), just before a child starts this waits until the host
# has handed on all that was written to fd 4: the host reads fd 4 and hands
# on what it read in turn, so once it has read fd 4 empty, then read an
# empty line written after that, the earlier messages are out, and the
# child's output, read later, comes after them. Usually this costs two
# ioctls and a one-byte write; it is bounded, so a host that does not read
# cannot hang the cell.
_SPAWN_EVENTS = frozenset(("os.system", "subprocess.Popen", "os.posix_spawn", "os.fork", "os.forkpty", "os.exec"))
_SYNC_WAIT = 1.0  # seconds, for each of the two waits


def _on_audit(event, args):
    if event in _SPAWN_EVENTS:
        if _wait_fd4_read():
            with _write_lock:
                os.write(MSG_FD, b"\n")  # an empty line: the host skips it
            _wait_fd4_read()


def _wait_fd4_read():
    """Wait until the host has read all of fd 4; False if it did not in time."""
    unread = bytearray(4)
    deadline = None
    try:
        while True:
            fcntl.ioctl(MSG_FD, termios.FIONREAD, unread)
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

sys.stdout = _Stream("stdout", 1)
sys.stderr = _Stream("stderr", 2)

_print = builtins.print


def _kh_print(*args, sep=" ", end="\n", file=None, flush=False):
    # print() calls write once per argument, separator and end; notebook
    # clients expect "hello\n" as one chunk, so render first and write once.
    if file is None:
        file = sys.stdout
    if not isinstance(file, _Stream):
        return _print(*args, sep=sep, end=end, file=file, flush=flush)
    if sep is None:
        sep = " "
    if end is None:
        end = "\n"
    file.write(sep.join(map(str, args)) + end)


builtins.print = _kh_print

# Rich display: IPython's DisplayFormatter where it is importable, repr otherwise.
try:
    from IPython.core.formatters import DisplayFormatter

    _formatter = DisplayFormatter()
except Exception:  # no IPython: plain repr and the _repr_*_ methods
    _formatter = None

_REPR_METHODS = (
    ("text/html", "_repr_html_"),
    ("text/markdown", "_repr_markdown_"),
    ("image/svg+xml", "_repr_svg_"),
    ("image/png", "_repr_png_"),
    ("image/jpeg", "_repr_jpeg_"),
    ("text/latex", "_repr_latex_"),
    ("application/json", "_repr_json_"),
    ("application/javascript", "_repr_javascript_"),
    ("application/pdf", "_repr_pdf_"),
)


def _bundle(obj):
    if _formatter is not None:
        data, _ = _formatter.format(obj)
    else:
        data = {"text/plain": repr(obj)}
        for mime, name in _REPR_METHODS:
            method = getattr(obj, name, None)
            if callable(method) and not isinstance(obj, type):
                try:
                    value = method()
                except Exception:
                    continue
                if isinstance(value, tuple):
                    value = value[0]
                if value is not None:
                    data[mime] = value
    out = {}
    for mime, value in data.items():
        if isinstance(value, (bytes, bytearray)):
            value = base64.b64encode(value).decode("ascii")
        out[mime] = value
    return out


def display(*objs, raw=False, **kwargs):
    """Show each object as a rich display_data message."""
    for obj in objs:
        data = obj if raw else _bundle(obj)
        if data:
            _emit({"type": "display_data", "parent_id": _parent, "data": data})


builtins.display = display
try:  # code that imports IPython's display() gets ours
    import IPython.display as _ipd
    import IPython.core.display_functions as _ipdf

    _ipd.display = display
    _ipdf.display = display
except Exception:
    pass


def _on_sigint(signum, frame):
    global _held_int, _early_int
    if _running:
        if _defer_int:
            _held_int = True  # _send_long raises it once its line is out
            return
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


def _run(code, filename):
    """Run a cell: statements, then the trailing expression, whose value it returns."""
    tree = ast.parse(code, filename=filename, mode="exec")
    expr = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        expr = ast.Expression(tree.body.pop().value)
    result = eval(compile(tree, filename, "exec", flags=_FLAGS), _ns)
    if inspect.iscoroutine(result):
        _await(result)
    if expr is None:
        return None
    value = eval(compile(expr, filename, "eval", flags=_FLAGS), _ns)
    if inspect.iscoroutine(value) and _has_await(expr):
        value = _await(value)
    return value


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


def _has_await(node):
    return any(isinstance(n, ast.Await) for n in ast.walk(node))


def _traceback(etype, value, tb, filename):
    # Drop the driver's own frames: the user sees only their cell.
    while tb is not None and tb.tb_frame.f_code.co_filename == _driver_file:
        tb = tb.tb_next
    if tb is None or (isinstance(value, SyntaxError) and value.filename == filename):
        # The cell did not compile: no frame is the user's, show only the
        # offending line as Python does.
        lines = traceback.format_exception_only(etype, value)
    else:
        lines = traceback.format_exception(etype, value, tb)
    return [line.rstrip("\n") for line in lines]


def _execute(req):
    global _parent, _running, _count, _early_int, _held_int
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
    linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
    reply = {"type": "execute_reply", "parent_id": msg_id, "status": "ok", "execution_count": _count}
    # The closing messages go out in one write: one wake-up of the host.
    closing = []
    try:
        _running = True
        try:
            if _early_int:
                raise KeyboardInterrupt
            if silent and code.startswith(HELPER_MARK):
                value = _run_helper(code)
            else:
                value = _run(code, filename)
        finally:
            _running = False
        if value is not None and not silent:
            builtins._ = value
            closing.append({"type": "execute_result", "parent_id": msg_id, "execution_count": _count, "data": _bundle(value)})
    except BaseException as exc:  # KeyboardInterrupt and SystemExit included: the kernel lives on
        _running = False
        ename = type(exc).__name__
        evalue = str(exc)
        tb = _traceback(type(exc), exc, exc.__traceback__, filename)
        closing.append({"type": "error", "parent_id": msg_id, "ename": ename, "evalue": evalue, "traceback": tb})
        reply.update(status="error", ename=ename, evalue=evalue, traceback=tb)
    closing.append(reply)
    closing.append({"type": "status", "parent_id": msg_id, "state": "idle"})
    _emit(*closing)
    _parent = ""


_count = 0


def _main():
    reqs = os.fdopen(REQ_FD, "rb", buffering=1 << 16)
    _emit({"type": "kh_ready"})
    while True:
        try:
            line = reqs.readline()
        except KeyboardInterrupt:  # a late interrupt between requests
            continue
        if not line:
            return
        try:
            _execute(json.loads(line))
        except KeyboardInterrupt:
            # Landed in the driver's own code after user code ended; the
            # request already has its reply or gets none: keep serving.
            continue


_main()
