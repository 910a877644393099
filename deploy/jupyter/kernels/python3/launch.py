# ipykernel with unbounded ZeroMQ send queues (kernelhost, docs/jupyter.md).
#
# ZeroMQ's default send queue holds 1,000 messages; when the Jupyter server
# falls behind a fast kernel (a loaded machine, a burst of flushed prints),
# the kernel's IOPub socket drops what does not fit, without a word. With no
# limit (SNDHWM 0) the messages wait in the kernel's memory until the server
# reads them. Every socket of the kernel gets it: setting it on the context
# before ipykernel makes its sockets is the one hook ipykernel 6 offers.
import zmq

_init = zmq.Context.__init__


def _init_unbounded(self, *args, **kwargs):
    _init(self, *args, **kwargs)
    self.setsockopt(zmq.SNDHWM, 0)


zmq.Context.__init__ = _init_unbounded

from ipykernel import kernelapp  # noqa: E402 (after the patch, on purpose)

kernelapp.launch_new_instance()
