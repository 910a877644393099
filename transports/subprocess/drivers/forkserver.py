
# kernelhost fork server (issue 28; ../fork.go, ../forkserver.go). python.go
# appends this file to driver.py, so it runs in the driver's globals.
#
# Any python context can fork a child that becomes a new context: the host
# sends {"fork": {...}} on fd 3 and this process clones itself with
# CLONE_PARENT, so the child is the host's child, as an interpreter the
# host started itself is (it waits for it, kills its group, reads its exit
# status). The child opens the pipes the host made for it through
# /proc/<host>/fd, puts them on fds 1-4, and serves requests as any driver.
# A fork template is an interpreter that preloaded the libraries (KH_PRELOAD)
# and serves nothing but forks (KH_FORK_TEMPLATE): a new context is one of
# its children.
#
# CLONE_PARENT needs the raw clone syscall (os.fork has no flags), so what
# os.fork does around fork() is done here by hand: PyOS_BeforeFork and
# PyOS_AfterFork_* (the import lock, the GIL, os.register_at_fork hooks),
# and glibc's record of the thread's tid (CLONE_CHILD_SETTID). What glibc's
# fork() adds beyond that (its pthread_atfork handlers, taking malloc's
# locks) needs every other thread idle: so a fork is refused while the
# process runs threads other than the driver's output thread, and
# OpenBLAS's thread pool is stopped first (it starts again at the next
# BLAS call, in each process).

_CLONE_PARENT = 0x00008000
_CLONE_CHILD_SETTID = 0x01000000
_SIGCHLD = 17
_PR_SET_PDEATHSIG = 1


def _clone_syscall():
    """(number, argument order) of clone on this machine, or None."""
    machine = os.uname().machine
    if machine == "x86_64":
        return 56, "ctid_then_tls"
    if machine == "aarch64":
        return 220, "tls_then_ctid"
    return None


_fork_cache = {}  # what a fork needs that stays the same: found at the first


def _tid_address(ctypes):
    """The address of glibc's record of this thread's tid (struct pthread's
    tid), which the child must get right: raise() and pthread_kill read it."""
    if "tid" in _fork_cache:
        return _fork_cache["tid"]
    libc = ctypes.CDLL(None)
    libc.pthread_self.restype = ctypes.c_void_p
    base = libc.pthread_self()
    tid = threading.get_native_id()
    found = [off for off in range(0, 2048, 4) if ctypes.c_int.from_address(base + off).value == tid]
    if len(found) != 1:
        raise OSError("cannot find glibc's thread id record (%d candidates)" % len(found))
    _fork_cache["tid"] = base + found[0]
    return base + found[0]


def _stop_blas_threads():
    """Stop OpenBLAS's thread pool: a child would wait for threads it does not have."""
    ctypes = _import("ctypes")
    try:
        with open("/proc/self/maps") as maps:
            libs = {line.split()[-1] for line in maps if "openblas" in line and ".so" in line}
    except OSError:
        return
    for path in libs:
        try:
            shutdown = getattr(ctypes.CDLL(path), "blas_thread_shutdown_", None)
        except OSError:
            continue
        if shutdown is not None:
            shutdown()


def _other_threads():
    """How many threads run besides this one and the driver's output thread."""
    n = len(os.listdir("/proc/self/task")) - 1
    if _flusher_thread is not None and _flusher_thread.is_alive():
        n -= 1
    return n


def _clone_context():
    """Clone this process as a sibling (the host's child); 0 in the child."""
    ctypes = _import("ctypes")
    call = _clone_syscall()
    if call is None:
        raise OSError("fork of a context is not supported on %s" % os.uname().machine)
    nr, order = call
    _stop_blas_threads()
    others = _other_threads()
    if others:
        raise OSError("the context runs %d thread%s of its own: a fork would copy them half done" % (others, "s" if others > 1 else ""))
    ctid = _tid_address(ctypes)
    syscall = _fork_cache.get("syscall")
    if syscall is None:
        syscall = ctypes.PyDLL(None, use_errno=True).syscall  # keeps the GIL across clone, as os.fork does
        syscall.restype = ctypes.c_long
        syscall.argtypes = [ctypes.c_long] * 6
        _fork_cache["syscall"] = syscall
    flags = _CLONE_PARENT | _CLONE_CHILD_SETTID | _SIGCHLD
    args = (ctid, 0) if order == "ctid_then_tls" else (0, ctid)
    api = ctypes.pythonapi
    api.PyOS_BeforeFork()
    pid = syscall(nr, flags, 0, 0, *args)
    if pid == 0:
        api.PyOS_AfterFork_Child()
        return 0
    err = ctypes.get_errno()
    api.PyOS_AfterFork_Parent()
    if pid < 0:
        raise OSError(err, os.strerror(err))
    return pid


def _open_host_fd(host, fd, inode, mode):
    """Open the host's descriptor fd, which must be the pipe of that inode:
    a host that gave up on the request may have closed it, and the number
    may name another file of the host by now."""
    opened = os.open("/proc/%d/fd/%d" % (host, fd), mode | os.O_CLOEXEC)
    if os.fstat(opened).st_ino != inode:
        os.close(opened)
        raise OSError("the host's descriptor %d is no longer the pipe it named" % fd)
    return opened


def _fork_context(spec, template):
    """Serve a fork request: the child becomes a context and never returns
    here; the parent writes the child's pid (or why not) to the host's ack
    pipe. A request the host gave up on is dropped."""
    host = spec["host"]
    try:
        ack = _open_host_fd(host, spec["ack"], spec["inodes"][-1], os.O_WRONLY)
    except (OSError, IndexError):
        return
    try:
        why = _stale() if template else None
        pid = _clone_context() if why is None else -1
    except Exception as exc:
        why, pid = str(exc) or type(exc).__name__, -1
    if pid == 0:
        os.close(ack)
        _become_context(spec, template)
        raise SystemExit(0)  # through the frames of the request that forked: the interpreter exits as a driver does
    try:
        os.write(ack, (str(pid) if why is None else "error " + why).encode())
    except OSError:
        pass  # the host gave up; the child, if any, finds its pipes gone and exits
    finally:
        os.close(ack)


def _become_context(spec, template):
    global _FRAME_MARK, _hold_err, _sigint_r, _sigint_w, _main_thread
    libc = _fork_cache.get("libc") or _import("ctypes").CDLL(None)
    _fork_cache["libc"] = libc
    host = spec["host"]
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != host:
        os._exit(1)  # the host died meanwhile
    os.setpgid(0, 0)  # its own group, which SIGINT and the kill go to
    # The pipes, in the order of proc.go's childFiles: 3, 4, 1, 2.
    targets = (REQ_FD, MSG_FD, 1, 2)
    modes = (os.O_RDONLY, os.O_WRONLY, os.O_WRONLY, os.O_WRONLY)
    if len(spec["fds"]) != len(targets):
        os._exit(1)
    try:
        opened = [_open_host_fd(host, fd, inode, mode) for fd, inode, mode in zip(spec["fds"], spec["inodes"], modes)]
    except OSError:
        os._exit(1)
    for fd, target in zip(opened, targets):
        os.dup2(fd, target, inheritable=target < 3)
        os.close(fd)
    _hold_err = True
    try:
        _stdout.reconfigure(line_buffering=False)  # undo _after_fork_in_child: the output thread flushes again
    except ValueError:
        pass
    _FRAME_MARK = b"\x1ekh" + spec["mark"].encode()
    for fd in (_sigint_r, _sigint_w):
        os.close(fd)
    _sigint_r, _sigint_w = os.pipe()
    os.set_blocking(_sigint_r, False)
    os.set_blocking(_sigint_w, False)
    signal.set_wakeup_fd(_sigint_w, warn_on_full_buffer=False)
    _main_thread = _thread.get_ident()
    cwd = spec.get("cwd")
    if cwd:
        os.chdir(cwd)
        os.environ["PWD"] = cwd
        _import("importlib").invalidate_caches()
    if template and "numpy.random" in sys.modules:
        sys.modules["numpy.random"].seed()  # else every context draws the template's numbers
    _main()


# Preloading and staleness (a template only).
_watched = {}  # path -> mtime_ns (None: missing) when the template preloaded


def _mtime(path):
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return None


def _stale():
    """Why the preloaded modules may no longer be what is installed; None if they are."""
    for path, mtime in _watched.items():
        if _mtime(path) != mtime:
            return "stale: %s changed since the template preloaded" % path
    return None


def _preload(names):
    site = _import("site")
    for name in names:
        try:
            # The driver's import: the template's cwd is not searched. The
            # package's import hook does what a cell's import would: for
            # matplotlib.pyplot, the IPython shell with the inline backend
            # (_kernelhost.shell) and the chart environment's patches.
            _import(name)
        except Exception:
            pass  # not installed here, or broken: a context that imports it says why
    # A change to any directory a preloaded module came from, or on the
    # import path (pip install -U, pip install --user), means the next
    # context must import afresh: the host starts a new template.
    paths = {p for p in sys.path if p} | {site.getusersitepackages()}
    for mod in list(sys.modules.values()):
        f = getattr(mod, "__file__", None)
        if isinstance(f, str) and os.path.basename(f).startswith("__init__."):
            paths.add(os.path.dirname(f))
    for path in paths:
        _watched[path] = _mtime(path)
    gc = _import("gc")
    gc.collect()
    gc.freeze()  # a child's collections then leave the shared pages unwritten


def _serve_forks():
    """A template's loop: preload, say ready, fork a context per request."""
    names = [n for n in (_take_env("KH_PRELOAD") or "").split(",") if n]
    _preload(names)
    _stop_blas_threads()
    reqs = os.fdopen(REQ_FD, "rb")
    _emit({"type": "kh_ready"})
    while True:
        line = reqs.readline()
        if not line:
            return
        try:
            req = _loads(line)
        except ValueError:
            continue
        if "fork" in req:
            _fork_context(req["fork"], True)


if _take_env("KH_FORK_TEMPLATE") is not None:
    _serve_forks()
else:
    _main()
