# kernelhost's python kernel environment, first stage: what the setup request
# of every new python kernel runs (kernelenv.go), with python_env.py's source
# in _SOURCE.
#
# Compiling python_env.py takes 7-8 ms, nine tenths of what a context taken
# from the warm pool costs, and a kernel needs it only once something can
# format or show a result: an IPython shell, PIL.Image or matplotlib.pyplot.
# So this stage installs the import hook and loads python_env.py at once only
# where the kernel has one of those already (ipykernel, a startup script);
# elsewhere the first import of one loads it, an import that itself takes
# tens of milliseconds.
#
# Running it again is harmless: it installs one hook, and loads the
# environment once.
import builtins
import sys

_NAME = "_kernelhost_env"

# python_env.py's ON_IMPORT: the modules it patches once they are imported
# (kernelenv_test checks that the two lists agree).
_WATCHED = frozenset(("PIL.Image", "matplotlib.pyplot", "IPython.core.interactiveshell"))


def _env():
    """python_env.py as a module, loaded on the first call. Loading it
    registers its formatters where there is a display formatter, and patches
    the watched modules already imported."""
    env = sys.modules.get(_NAME)
    if env is None:
        exec(compile(_SOURCE, "<kernelhost python env>", "exec"), {"__name__": _NAME})
        env = sys.modules[_NAME]
    return env


class _ImportHook:
    """A meta path finder that has python_env.py patch a watched module once
    it has loaded (loading the environment first, the first time).

    It finds nothing itself: for a watched name it asks the other finders
    and wraps the exec_module of the loader they return (a loader object of
    that one module; class-level importers are left alone); every other
    import costs one set lookup."""

    def find_spec(self, name, path=None, target=None):
        if name not in _WATCHED:
            return None
        try:
            spec = self._find(name, path, target)
        except Exception:  # a finder of someone else's failed: import as if we were not here
            return None
        loader = getattr(spec, "loader", None)
        exec_module = getattr(loader, "exec_module", None)
        if exec_module is None or isinstance(loader, type):
            return spec

        def exec_then_patch(module):
            exec_module(module)
            try:
                _env().ON_IMPORT[name](module)
            except Exception:  # the environment is an extra: the module stays as it is
                pass

        loader.exec_module = exec_then_patch
        return spec

    def _find(self, name, path, target):
        for finder in sys.meta_path:
            if finder is not self and hasattr(finder, "find_spec"):
                spec = finder.find_spec(name, path, target)
                if spec is not None:
                    return spec
        return None


def _needed_now():
    if any(name in sys.modules for name in _WATCHED):
        return True
    return getattr(getattr(builtins, "display", None), "formatter", None) is not None


if not any(type(f).__name__ == "_ImportHook" for f in sys.meta_path):
    sys.meta_path.insert(0, _ImportHook())
if _needed_now():
    _env()
