# _kernelhost.shell: the subprocess driver's rich display and IPython's cell
# semantics (transports/subprocess/drivers/driver.py loads it at start and
# attach()es it; a Jupyter kernel has ipykernel's shell instead).
#
# A plain cell (valid Python, no trailing ';') runs without IPython:
# importing it costs ~0.4 s and ~35 MB, which an idle context must not pay.
# This module creates one InteractiveShell (IPython's own machinery,
# without ZMQ) the first time a cell needs it: a cell that does not compile
# as Python (`!cmd`, `%magic`, `%%cell_magic`, `x?`, ...: IPython's input
# transformers turn it into Python), a trailing ';', a result or display()
# of something other than a builtin scalar (IPython's DisplayFormatter
# formats it), user code importing IPython (its display() and get_ipython()
# must find this shell) or matplotlib.pyplot (the inline backend). From then
# on every result and display goes through shell.display_formatter, so
# formatters registered on get_ipython().display_formatter take effect.
# Cells still run through the driver's own _run, not shell.run_cell: the
# ordering, interrupt and error handling there stay one path for both.
import builtins
import os

obj = None  # the InteractiveShell once created
missing = None  # why IPython could not be loaded, once it could not
_creating = False
_driver = None  # what attach() was given


def attach(driver):
    """Serve the driver: driver.emit(*msgs) sends messages, driver.parent()
    and driver.count() are the running request's id and execution count,
    driver.main_module is the users' __main__, driver.own_imports() a
    context in which the working directory is off sys.path, and
    driver.import_module(name) imports that way. kernelhost is the package
    (_kernelhost), whose import hook calls this module when user code
    imports IPython or matplotlib.pyplot, before the environment's own
    callbacks (see _kernelhost.start)."""
    global _driver
    _driver = driver
    builtins.get_ipython = _get_ipython
    builtins.display = display
    kernelhost = __import__("sys").modules[__package__]
    kernelhost.after_import("IPython", lambda module: shell())
    kernelhost.after_import("matplotlib.pyplot", _on_pyplot_import)


# Exact types whose IPython text/plain is their repr: formatted without IPython.
_PLAIN_TYPES = frozenset((int, float, complex, bool, str, bytes))

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


def shell():
    """The InteractiveShell, created on first use; None where IPython is missing."""
    global obj, missing, _creating
    if obj is not None or missing is not None or _creating:
        return obj
    _creating = True
    try:
        obj = _create_shell()
    except Exception as exc:  # not installed, or broken: run cells without it
        missing = exc
    finally:
        _creating = False
    return obj


def _create_shell():
    with _driver.own_imports():
        from IPython.core.displayhook import DisplayHook
        from IPython.core.displaypub import DisplayPublisher
        from IPython.core.history import HistoryManager
        from IPython.core.interactiveshell import InteractiveShell
        from traitlets import Type
        from traitlets.config import Config

    # The two pieces of IPython's bookkeeping the driver runs for every cell
    # (In, _i, _iN; Out, _, _N), as IPython does them, at a third of the cost:
    # IPython keeps _i, _ii, _iii and _i00 as traits, whose every set is
    # validated and notified (four a cell), and reads each trait (shell,
    # cache_size) anew at every use; here they are plain attributes and each
    # trait is read once. Nothing observes those four traits.
    class History(HistoryManager):
        _i = _ii = _iii = _i00 = ""

        def store_inputs(self, line_num, source, source_raw=None):
            if source_raw is None:
                source_raw = source
            source = source.rstrip("\n")
            source_raw = source_raw.rstrip("\n")
            if self._exit_re.match(source_raw.strip()):
                return  # as IPython: exit and quit are not history
            parsed, raw = self.input_hist_parsed, self.input_hist_raw
            if len(parsed) < line_num:
                # Cells that ran before the shell existed (it is made when a
                # cell first needs it) are empty entries: In[N] is cell N.
                parsed.extend([""] * (line_num - len(parsed)))
                raw.extend([""] * (line_num - len(raw)))
            parsed.append(source)
            raw.append(source_raw)
            with self.db_input_cache_lock:
                # Written to the in-memory database when asked for (%history
                # -g): no thread saves a ":memory:" history, none to wake.
                self.db_input_cache.append((line_num, source, source_raw))
            self._iii, self._ii, self._i, self._i00 = self._ii, self._i, self._i00, source_raw
            shell = self.shell
            if shell is not None:
                shell.push({"_i": self._i, "_ii": self._ii, "_iii": self._iii, "_i%s" % line_num: source_raw}, interactive=False)

    class ResultHook(DisplayHook):
        def update_user_ns(self, result):
            shell = self.shell
            ns = shell.user_ns
            out = ns["_oh"]
            cache_size = self.cache_size
            if not cache_size or result is out:
                return  # as IPython: no cache, or Out itself (a cycle)
            full = self.do_full_cache
            if full and len(out) >= cache_size:
                self.cull_cache()
            # _, __ and ___ move on unless the user bound one of them, or
            # _ is a builtin (gettext's), as in IPython.
            move = "_" not in builtins.__dict__
            for name in ("_", "__", "___"):
                if name in ns and getattr(self, name) is not ns[name]:
                    move = False
            self.___, self.__, self._ = self.__, self._, result
            to_main = {"_": result, "__": self.__, "___": self.___} if move else {}
            if full:
                count = self.prompt_count
                to_main["_%s" % count] = result
            shell.push(to_main, interactive=False)
            if full:
                out[count] = result

    class Publisher(DisplayPublisher):
        """display(), IPython's and the inline backend's: a message on fd 4, at once."""

        def publish(self, data, metadata=None, source=None, *, transient=None, update=False, **kwargs):
            kind = "update_display_data" if update else "display_data"
            _driver.emit({"type": kind, "parent_id": _driver.parent(), "data": _json_bundle(data)})

        def clear_output(self, wait=False):
            pass  # the wire contract has no clear_output

    class Shell(InteractiveShell):
        display_pub_class = Type(Publisher)
        displayhook_class = Type(ResultHook)

        def init_history(self):
            self.history_manager = History(shell=self, parent=self)
            self.configurables.append(self.history_manager)
        # `!cmd`, %pip, %conda: the command writes to fd 1/2 itself, streamed
        # live by the host, stdout apart from stderr, and after the prints
        # before it (the audit hook). IPython's default, system_piped, reads
        # it through a pty (pexpect) and merges stderr into stdout.
        system = InteractiveShell.system_raw

        # The driver's count is the execution count (each reply carries it):
        # a property that reads it, not the trait the driver would set before
        # each cell, whose validation and change notification cost ~19 us of
        # the interpreter's CPU a cell (a fifth of what the shell adds to a
        # `1+1`). IPython's own setters (%reset) change nothing, as the
        # driver's next cell set it back before.
        @property
        def execution_count(self):
            return _driver.count()

        @execution_count.setter
        def execution_count(self, value):
            pass

        def _showtraceback(self, etype, evalue, stb):
            # An error a magic (%time 1/0) or an event callback caught and
            # showed: an error message, as ipykernel sends it; the cell goes on.
            _driver.emit({"type": "error", "parent_id": _driver.parent(), "ename": etype.__name__, "evalue": str(evalue), "traceback": stb})

        def enable_gui(self, gui=None):
            if gui not in (None, "inline"):
                from IPython.core.error import UsageError

                raise UsageError("no GUI event loop in a kernelhost context: use %matplotlib inline")

    config = Config()
    # One history per context, kept in memory: contexts would otherwise share
    # (and lock) one sqlite file in ~/.ipython.
    config.HistoryManager.hist_file = ":memory:"
    config.InteractiveShell.colors = "NoColor"
    return Shell.instance(config=config, user_module=_driver.main_module)


def _get_ipython():
    """get_ipython() before the shell exists: it creates it."""
    return shell()


def _on_pyplot_import(pyplot):
    # matplotlib's inline backend, as ipykernel sets it up: plt.show() displays
    # the figures as image/png, and post_execute shows the ones still open at
    # the end of the cell, then closes them. An MPLBACKEND the user set wins.
    made = None if os.environ.get("MPLBACKEND") else shell()
    if made is not None:
        made.enable_matplotlib("inline")


# The post_execute callbacks that show nothing while no figure is open:
# pyplot's (draws the stale figures of an interactive session) and the
# inline backend's (shows the figures open at the end of the cell).
_QUIET_POST_EXECUTE = frozenset(
    (("matplotlib.pyplot", "_draw_all_if_interactive"), ("matplotlib_inline.backend_inline", "flush_figures"))
)


def post_execute_quiet():
    """Whether the shell's post_execute callbacks will send nothing now:
    each is one of _QUIET_POST_EXECUTE and no pyplot figure is open. The
    driver then sends a cell's result with its reply, in one write (one
    wake-up of the host), instead of before post_execute."""
    for f in obj.events.callbacks.get("post_execute", ()):
        if (getattr(f, "__module__", None), getattr(f, "__qualname__", None)) not in _QUIET_POST_EXECUTE:
            return False
    helpers = __import__("sys").modules.get("matplotlib._pylab_helpers")
    return helpers is None or not helpers.Gcf.figs


def _json_bundle(data):
    # Binary values (a png a formatter returned as bytes) go out as base64.
    out = {}
    for mime, value in data.items():
        if isinstance(value, (bytes, bytearray)):
            value = _driver.import_module("base64").b64encode(value).decode("ascii")
        out[mime] = value
    return out


def bundle(value):
    """The MIME bundle of a result or displayed value, JSON-ready."""
    if type(value) in _PLAIN_TYPES:
        if obj is None:
            return {"text/plain": repr(value)}
        text = _plain_text_only(obj.display_formatter, value)
        if text is not None:
            return {"text/plain": text}
    made = shell()
    if made is not None:
        data, _ = made.display_formatter.format(value)
        return _json_bundle(data)
    data = {"text/plain": repr(value)}
    for mime, name in _REPR_METHODS:
        method = getattr(value, name, None)
        if callable(method) and not isinstance(value, type):
            try:
                rich = method()
            except Exception:
                continue
            if isinstance(rich, tuple):
                rich = rich[0]
            if rich is not None:
                data[mime] = rich
    return _json_bundle(data)


def _plain_text_only(display_formatter, value):
    """The text/plain of a builtin scalar no other formatter claims, else None.

    DisplayFormatter.format runs every formatter (~1 ms for 2); for a scalar
    only text/plain (which keeps %precision) has something to say, unless a
    formatter was registered for its type.
    """
    cls = type(value)
    key = (cls.__module__, cls.__name__)
    for types, deferred in _other_printers(display_formatter):
        if cls in types or key in deferred:
            return None
    text = display_formatter.formatters["text/plain"]
    if _prints_repr(text, value):
        try:
            return repr(value)
        except Exception:
            pass  # the formatter reports it, as it would have
    return text(value)


# The printer dicts of every formatter but text/plain, read through
# traitlets once rather than for every result (a `1+1`'s formatting was
# ~25 us of the interpreter's CPU): the dicts themselves, so a printer
# registered in one (for_type) is seen at once; made again when a
# formatter is added or one of these traits is given a new dict.
_printers = None  # [(type_printers, deferred_printers)], or None: to be made
_printers_of = None  # (display_formatter, its formatters dict, their number) they were made from, by id


def _other_printers(display_formatter):
    global _printers, _printers_of
    formatters = display_formatter.formatters
    of = (id(display_formatter), id(formatters), len(formatters))  # the shell keeps both alive
    if _printers is None or _printers_of != of:
        others = [f for mime, f in formatters.items() if mime != "text/plain"]
        others += [display_formatter.mimebundle_formatter, display_formatter.ipython_display_formatter]
        for f in others:
            f.observe(_forget_printers, names=["type_printers", "deferred_printers"])
        display_formatter.observe(_forget_printers, names=["formatters", "mimebundle_formatter", "ipython_display_formatter"])
        _printers, _printers_of = [(f.type_printers, f.deferred_printers) for f in others], of
    return _printers


def _forget_printers(change=None):
    global _printers
    _printers = None


_repr_printer = None  # IPython's pretty._repr_pprint, once looked up


def _prints_repr(formatter, value):
    """Whether formatter, IPython's own PlainTextFormatter, would print
    repr(value) as it is: the printer it picks for value (by identity, else
    by its exact type, a builtin scalar) is pretty._repr_pprint, which
    writes repr's lines, and a scalar's repr is one line. Then the pretty
    printer it builds for each value (most of a scalar's formatting) is
    not needed; a printer the user registered for the type is used."""
    global _repr_printer
    if _repr_printer is None:
        from IPython.core.formatters import PlainTextFormatter
        from IPython.lib import pretty

        _repr_printer = (PlainTextFormatter, getattr(pretty, "_repr_pprint", False))
    plain, printer = _repr_printer
    if not printer or type(formatter) is not plain:
        return False
    singletons = formatter.singleton_printers
    if id(value) in singletons:
        return singletons[id(value)] is printer
    return formatter.type_printers.get(type(value)) is printer


def display(*objs, raw=False, **kwargs):
    """Show each object as a rich display_data message (IPython's display() where it is installed)."""
    if shell() is not None:
        from IPython.display import display as ipython_display

        return ipython_display(*objs, raw=raw, **kwargs)
    for value in objs:
        data = value if raw else bundle(value)
        if data:
            _driver.emit({"type": "display_data", "parent_id": _driver.parent(), "data": data})
