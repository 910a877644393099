# _kernelhost: kernelhost's python inside a kernel, and its boot stage.
#
# The package (this directory, embedded by kernelpy.go):
#
#   _kernelhost        this file: makes the other modules from what the kernel
#                      was given (define, load), the one import hook
#                      (after_import), and the failures to report (report)
#   _kernelhost.env    the chart/data/image environment: e2b/chart, e2b/data,
#                      JSON, PIL and plt.show() (docs/python-results.md)
#   _kernelhost.shell  the subprocess driver's IPython shell (a Jupyter kernel
#                      has ipykernel's)
#
# A kernel never imports these from disk: bootstrap.py makes this module from
# what it is given, code objects from the subprocess driver's compiled cache
# (transports/subprocess/pycache.go) or source carried by the setup request
# of a Jupyter kernel, and hands it the others (define); each is made on its
# first load.
#
# The environment is loaded once the kernel has something it formats or
# shows (an IPython shell, PIL.Image or matplotlib.pyplot; the subprocess
# driver asks for it at start, from its cache), else at the first import of
# one: compiling env.py from source costs more than a context taken from the
# warm pool.
#
# A failure to load any of it is never swallowed: it is kept until report(),
# which the host's setup request of every new kernel calls: the host logs
# what it writes to stderr and shows it on the first execution's stderr. One
# that comes later, in a cell (an import that loads the environment), is
# written to that cell's stderr at once.
import builtins
import sys

ENV = __name__ + ".env"
# env.py's ON_IMPORT: the modules the environment patches once imported.
# The hook must know them before the environment is loaded (kernelpy_test
# checks that the two lists agree).
ENV_WATCHED = ("PIL.Image", "matplotlib.pyplot", "IPython.core.interactiveshell")

_code = {}  # module name -> its code object or source, until it is loaded
_failures = []  # what failed, not reported yet
_reported = False  # report() ran: a failure from now on goes to the running cell's stderr
_after = {}  # module name -> callbacks run once it has loaded, in the order registered


def define(modules):
    """Take the package's other modules (name -> code object or source) to
    load on demand."""
    _code.update(modules)


def load(name):
    """The module name of this package, made on the first call; None where it
    failed (the failure is reported, and not retried)."""
    module = sys.modules.get(name)
    if module is not None:
        return module
    code = _code.pop(name, None)
    if code is None:
        return None
    import types

    module = types.ModuleType(name)
    module.__package__ = __name__
    sys.modules[name] = module
    try:
        if isinstance(code, str):
            code = compile(code, "<kernelhost %s>" % name, "exec")
        exec(code, module.__dict__)
    except Exception:
        del sys.modules[name]
        failed("loading " + name)
        return None
    setattr(sys.modules[__name__], name.rpartition(".")[2], module)
    return module


def failed(what):
    """Keep the exception being handled, with its traceback, as a failure of
    kernelhost's python: for report(), or at once on the running cell's stderr
    once the setup has reported."""
    import traceback

    text = "kernelhost: %s failed; charts, data and images may be missing from results:\n%s" % (what, traceback.format_exc())
    if _reported:
        sys.stderr.write(text)
    else:
        _failures.append(text)


def report():
    """Write the failures not reported yet to stderr (the setup request's:
    the host logs them and shows them on the first execution's stderr)."""
    global _reported
    _reported = True
    while _failures:
        sys.stderr.write(_failures.pop(0))


def after_import(name, callback):
    """Have callback(module) run each time the module name has loaded, after
    the callbacks registered for it before. A callback that fails is
    reported (failed); the import succeeds all the same."""
    _after.setdefault(name, []).append(callback)


class _ImportHook:
    """The one sys.meta_path finder of kernelhost: runs after_import's
    callbacks once a module they wait for has loaded.

    It finds nothing itself: for a watched name it asks the other finders
    and wraps the exec_module of the loader they return (a loader object of
    that one module; class-level importers are left alone); every other
    import costs one dict lookup."""

    def find_spec(self, name, path=None, target=None):
        callbacks = _after.get(name)
        if not callbacks:
            return None
        try:
            spec = self._find(name, path, target)
        except Exception:  # a finder of someone else's failed: import as if we were not here
            return None
        loader = getattr(spec, "loader", None)
        exec_module = getattr(loader, "exec_module", None)
        if exec_module is None or isinstance(loader, type):
            return spec

        def exec_then_callbacks(module):
            exec_module(module)
            for callback in list(callbacks):
                try:
                    callback(module)
                except Exception:
                    failed("setting up " + name)

        loader.exec_module = exec_then_callbacks
        return spec

    def _find(self, name, path, target):
        for finder in sys.meta_path:
            if finder is not self and hasattr(finder, "find_spec"):
                spec = finder.find_spec(name, path, target)
                if spec is not None:
                    return spec
        return None


def _patch_on_import(module):
    env = load(ENV)
    if env is not None:
        env.ON_IMPORT[module.__name__](module)


def _needed_now():
    if any(name in sys.modules for name in ENV_WATCHED):
        return True
    return getattr(getattr(builtins, "display", None), "formatter", None) is not None


def start(now=False):
    """Install the import hook and have the environment patch what it
    watches; load it now if now or if the kernel has something to format or
    show already, else at the first import that needs it.

    Callbacks registered before (the subprocess driver's shell) run before
    the environment's: its inline backend is set up before the environment
    looks whether plt.show() needs its patch."""
    for name in ENV_WATCHED:
        after_import(name, _patch_on_import)
    sys.meta_path.insert(0, _ImportHook())
    if now or _needed_now():
        load(ENV)
