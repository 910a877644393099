# kernelhost's bootstrap of its python package in a kernel: makes the
# _kernelhost module (see _kernelhost/__init__.py) from MODULES, module name
# -> code object or source, hands it the other modules, runs BEFORE_START
# (None, or a callable given the package: the subprocess driver registers its
# shell's import callbacks there) and starts it (NOW: load the environment at
# once). It runs in a namespace of its own: in the subprocess driver at start,
# with code objects from its compiled cache, and in the setup request of a
# kernel without the package (a Jupyter kernel), with source. A kernel that
# has the package already is left as it is.
#
# Where the package itself fails to load, a stand-in takes its place whose
# report() gives the failure, so that it is reported as any other is.
import sys

if "_kernelhost" not in sys.modules:
    import types

    root = types.ModuleType("_kernelhost")
    root.__path__ = []  # a package: `import _kernelhost.env` finds the loaded submodule
    sys.modules["_kernelhost"] = root
    try:
        code = MODULES.pop("_kernelhost")
        if isinstance(code, str):
            code = compile(code, "<kernelhost _kernelhost>", "exec")
        exec(code, root.__dict__)
        root.define(MODULES)
    except Exception:
        import traceback

        failure = [
            "kernelhost: loading its python package _kernelhost failed; charts, data and images will be missing from results:\n"
            + traceback.format_exc()
        ]

        def report():
            while failure:
                sys.stderr.write(failure.pop())

        root = types.ModuleType("_kernelhost", "a stand-in for kernelhost's python package, which failed to load")
        root.report = report
        sys.modules["_kernelhost"] = root
    else:
        if BEFORE_START is not None:
            try:
                BEFORE_START(root)
            except Exception:
                root.failed("setting up the driver's shell")
        root.start(NOW)
