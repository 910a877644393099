# ipykernel without its debugger and jedi, with unbounded ZeroMQ send
# queues, no idle waits per cell and its history in memory (kernelhost,
# docs/jupyter.md).
import sys

# No debugger and no jedi. Debian's ipykernel depends on debugpy and imports
# it at start for JupyterLab's debugger; IPython's completer imports jedi
# for its completions. debugpy, pydevd and the pkg_resources they pull in,
# and jedi with parso, are over a third of a kernel's start (CPU and wall).
# kernelhost sends neither debug_request nor complete_request, so ipykernel
# and IPython are made to find both missing, as on a system without them
# (the kernel's log says "debugging will not be enabled"; completions fall
# back to IPython's own). Once they are imported, a cell may import either.
sys.modules["debugpy"] = None
sys.modules["jedi"] = None

# ZeroMQ's default send queue holds 1,000 messages; when the Jupyter server
# falls behind a fast kernel (a loaded machine, a burst of flushed prints),
# the kernel's IOPub socket drops what does not fit, without a word. With no
# limit (SNDHWM 0) the messages wait in the kernel's memory until the server
# reads them. Every socket of the kernel gets it: setting it on the context
# before ipykernel makes its sockets is the one hook ipykernel 6 offers.
import zmq  # noqa: E402

_init = zmq.Context.__init__


def _init_unbounded(self, *args, **kwargs):
    _init(self, *args, **kwargs)
    self.setsockopt(zmq.SNDHWM, 0)


zmq.Context.__init__ = _init_unbounded

# Each cell costs ipykernel 6 six flushes of stdout/stderr (before its
# result, before its reply, before its idle) and each flush, even of
# nothing, is a round trip to the IOPub thread: two wake-ups of that thread
# and a wait for the GIL to pass to it and back. A flush with nothing
# buffered returns at once here. Order on IOPub is kept: what was written
# is still flushed (and waited for) before anything that follows it, and
# output a flush already took from the buffer is sent by the IOPub thread
# before any message queued after it.
from ipykernel.iostream import OutStream  # noqa: E402 (after the patch, on purpose)

if hasattr(OutStream, "_rotate_buffer"):  # ipykernel 6: a buffer that the IOPub thread swaps out
    _flush = OutStream.flush

    def _flush_unless_empty(self):
        lock = getattr(self, "_buffer_lock", None)
        if lock is not None and getattr(self, "echo", None) is None:
            with lock:
                if self._buffer.tell() == 0:
                    return
        _flush(self)

    OutStream.flush = _flush_unless_empty

from ipykernel import kernelapp  # noqa: E402
from ipykernel.kernelbase import Kernel  # noqa: E402

del sys.modules["debugpy"], sys.modules["jedi"]

# ipykernel sleeps 0.5 ms (1 ms and more on a busy machine) before every
# execute_reply, for clients that stop reading IOPub at the reply. kernelhost
# reads until the request's status idle, which comes after all its output.
if "_execute_sleep" in Kernel.class_trait_names():
    Kernel._execute_sleep.default_value = 0.0

# Each kernel keeps IPython's history (In, %history) in memory. On disk it
# would be the history.sqlite of the IPYTHONDIR that every kernel of the
# server may write: a kernel would read the cells of every other (%history
# -g), and kernels writing it at once print "Session/line number was not
# unique in database" into a cell's output. The command line wins over any
# ipython_kernel_config.py.
sys.argv.append("--HistoryManager.hist_file=:memory:")

kernelapp.launch_new_instance()
