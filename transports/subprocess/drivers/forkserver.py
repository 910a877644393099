
# kernelhost fork server (issue 28; ../fork.go, ../forkserver.go). python.go
# appends this file to driver.py, so it runs in the driver's globals.
#
# Any python context can fork a child that becomes a new context: the host
# sends {"fork": {...}} on fd 3 and this process clones itself with
# CLONE_PARENT, so the child is the host's child, as an interpreter the
# host started itself is (it waits for it, kills its group, reads its exit
# status). The pipes the host made for the child, and the child's own
# control socket, come before the request on this process's control socket
# (fd 5, SCM_RIGHTS); the child puts them on fds 1-5 and serves requests as
# any driver. Not /proc/<host>/fd: the host (the transport plugin) is not
# dumpable, so that is closed to a process of its user without
# CAP_SYS_PTRACE, which an unprivileged host's interpreters are.
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


def _clone_context(flags=_CLONE_PARENT, runs_no_code=False):
    """Clone this process as a sibling (the host's child), or with other
    clone flags (a sandboxed template's: its child, in new namespaces); 0 in
    the child. Not os.fork, whose audit event makes the driver wait for the
    host to read its output (_on_audit): a fork needs no such wait.
    runs_no_code: this process ran no code since it stopped OpenBLAS's
    threads (a template, which stops them once it preloaded, and B): its
    scan of /proc/self/maps is skipped, a cost in the template's serial
    path at every fork (~0.6 ms). A thread started nonetheless is still
    refused below."""
    ctypes = _import("ctypes")
    call = _clone_syscall()
    if call is None:
        raise OSError("fork of a context is not supported on %s" % os.uname().machine)
    nr, order = call
    if not runs_no_code:
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
    flags |= _CLONE_CHILD_SETTID | _SIGCHLD
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


def _fork_context(spec, template):
    """Serve a fork request: its descriptors (the child's four pipes and its
    control socket) came on the control socket; the child becomes a context
    and never returns here; the parent answers "<seq> <pid>" or "<seq>
    error <why>" there. A request the host gave up on is dropped."""
    if spec.get("family"):
        _fork_in_family(spec)
        return
    got = _fork_descriptors(spec)
    if got is None:
        return
    ctl, seq, fds = got
    why, pid = None, -1
    if len(fds) != len(_PIPE_TARGETS) + 1:
        why = "want %d descriptors, got %d" % (len(_PIPE_TARGETS) + 1, len(fds))
    else:
        try:
            why = _stale() if template else None
            pid = _clone_context(runs_no_code=template) if why is None else -1
        except Exception as exc:
            why, pid = str(exc) or type(exc).__name__, -1
    if pid == 0:
        _become_context(spec, fds, template)
        raise SystemExit(0)  # through the frames of the request that forked: the interpreter exits as a driver does
    for fd in fds:
        os.close(fd)
    _answer_fork(ctl, seq, str(pid) if why is None else "error " + why)


def _become_context(spec, fds, template):
    libc = _libc()
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != spec["host"]:
        os._exit(1)  # the host died meanwhile
    os.setpgid(0, 0)  # its own group, which SIGINT and the kill go to
    *pipes, ctl = fds
    _take_pipes(pipes)
    os.dup2(ctl, _CTL_FD, inheritable=False)  # its own control socket, for its forks
    os.close(ctl)
    _serve_as_context(spec, template)


def _fork_descriptors(spec):
    """(control socket, number, descriptors) of fork request spec: the host
    sent its descriptors on the control socket (fd 5), with the request's
    number, before the request; those of requests it gave up on before are
    closed. None when none came (the host gave up on this one too)."""
    socket = _import("socket")
    ctl = _fork_cache.get("ctl")
    if ctl is None:
        ctl = _fork_cache["ctl"] = socket.socket(fileno=_CTL_FD)
    ctl.settimeout(_FORK_FDS_WAIT)
    seq = str(spec.get("seq", 0)).encode()
    while True:
        try:
            msg, fds, _, _ = socket.recv_fds(ctl, 64, 8)
        except OSError:
            return None
        if msg == seq:
            return ctl, seq, fds
        for fd in fds:
            os.close(fd)
        if not msg:
            return None


def _answer_fork(ctl, seq, answer):
    try:
        ctl.sendall(seq + b" " + answer.encode())
    except OSError:
        pass  # the host gave up; the child, if any, finds its pipes gone and exits


_FORK_FDS_WAIT = 30  # seconds: forkAckWait, the host's bound


# The pipes, in the order of proc.go's childFiles: 3, 4, 1, 2.
_PIPE_TARGETS = (REQ_FD, MSG_FD, 1, 2)


def _take_pipes(fds):
    for fd, target in zip(fds, _PIPE_TARGETS):
        os.dup2(fd, target, inheritable=target < 3)
        os.close(fd)


def _libc():
    libc = _fork_cache.get("libc")
    if libc is None:
        libc = _fork_cache["libc"] = _import("ctypes").CDLL(None, use_errno=True)
    return libc


def _serve_as_context(spec, template):
    """The child's own state (its output, frame mark, SIGINT pipe, cwd,
    environment, numpy draws), then serve requests as any driver."""
    global _FRAME_MARK, _hold_err, _sigint_r, _sigint_w, _main_thread, _start_env
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
    if template:
        _start_env = dict(os.environ)  # what its copies start with
    else:
        _reset_env()
    if template and "numpy.random" in sys.modules:
        sys.modules["numpy.random"].seed()  # else every context draws the template's numbers
    if spec.get("warm_up"):
        _warm_up()
    _main()


def _warm_up():
    """Use once what a new context's first requests use (the hand-out's
    check, the engine's set-up requests, a DataFrame, a groupby and its
    display, a line chart and its png and e2b/chart), in a context the host
    forks ahead of need (pool.go), before it says ready. A fork shares the
    template's pages until it writes one, and Python writes what it touches
    (reference counts, caches), so a new context's first cells fault in a
    private copy of each page of the code and data they use: thousands of
    copy-on-write faults, which made a session's cells 2-3x a warm
    context's on a VM where a fault costs ~14 us (docs/benchmarks.md).
    Paid here, while the context waits in the pool, they are not paid by
    the session. Nothing of it shows (readyctx_test.go): its objects are
    local, its figure is closed and was never queued for the inline
    backend to show, its requests are silent (no execution count, no
    history), no random number is drawn and nothing is sent."""
    shell = _sh.obj
    numpy, pandas = sys.modules.get("numpy"), sys.modules.get("pandas")
    try:
        if numpy is not None and pandas is not None:
            frame = pandas.DataFrame({"k": numpy.arange(1000) % 10, "v": numpy.arange(1000.0)})
            means = frame.groupby("k")["v"].mean()
            if shell is not None:
                _sh.bundle(means.to_frame())
        if shell is not None and "matplotlib.pyplot" in sys.modules:
            _warm_up_pyplot(sys.modules["matplotlib"], sys.modules["matplotlib.pyplot"])
    except Exception:
        pass  # a broken library: the context's own cells say how
    # The hand-out's check and the engine's first requests (a silent cell,
    # a helper), through the driver's own code, their messages dropped.
    global OUT_FD
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
    except OSError:
        return
    out, OUT_FD = OUT_FD, devnull
    try:
        _stale()
        _execute(_loads(b'{"msg_id":"","code":"None","silent":true}'))
        _execute({"msg_id": "", "code": HELPER_MARK + "import os\nos.environ.get('PWD')", "silent": True})
    finally:
        os.close(OUT_FD)
        OUT_FD = out


def _warm_up_pyplot(matplotlib, plt):
    # Not interactive meanwhile, the inline backend queues nothing to show
    # (its new_figure_manager_given_figure); closed, the figure leaves its
    # number free: the session's first figure is still figure 1.
    interactive = matplotlib.is_interactive()
    matplotlib.interactive(False)
    try:
        figure = plt.figure()
        try:
            plt.plot(range(10), [x * x for x in range(10)])
            _sh.bundle(figure)
        finally:
            plt.close(figure)
    finally:
        matplotlib.interactive(interactive)


# A context's start environment: its interpreter's, less the driver's own
# variables (_take_env); a template's context's: the template's, taken when
# it forked the context. A live copy of a context starts with it, as a new
# context does, not with what its source's cells made of os.environ (issue
# 43); the engine then applies the global env vars to the copy as to any
# new context. _start_environ is os.environ as the driver found it: a cell
# may have rebound the name.
_start_environ = os.environ


def _reset_env():
    """The copy's environment: its context's start environment, PWD naming
    the cwd it kept, as a context started there has it."""
    env = _start_environ
    for key in [k for k in env if k not in _start_env]:
        del env[key]
    for key, value in _start_env.items():
        if env.get(key) != value:
            env[key] = value
    try:
        env["PWD"] = os.getcwd()
    except OSError:
        env.pop("PWD", None)  # its directory was removed


# Forks of a sandboxed template (forkserver.go; docs/RATIONALE.md, "Contexts
# by fork"). The template runs in a bwrap sandbox of its own with a user
# namespace of its own, where it holds CAP_SYS_ADMIN, CAP_SETPCAP and
# CAP_SYS_RESOURCE (none on the host): with them it could remount its read-only paths writable,
# so it runs only code from read-only paths: python -s (no user site) and
# no import path under a writable directory (KH_WRITABLE). A context is
# made in two processes, both of them this driver's code until the
# context's own code runs; the pipes, a status pipe and a handshake socket
# came with the request (SCM_RIGHTS):
#
#   B, the template's child, cloned into new mount, PID and IPC namespaces
#     and, unless contexts have the host's network (KH_FORK_NETNS), a network
#     namespace, whose loopback it brings up (pid 1 in its own), says "b" on the handshake socket (the host reads
#     its pid from the credentials the kernel attaches) and waits while the
#     host moves it into the context's cgroup; it unshares the cgroup
#     namespace, mounts the context's own /tmp, /dev and /proc (with
#     bwrap's read-only covers), sets the template's namespace's limit of
#     user namespaces to 0 and forks C; it drops every capability and
#     becomes its family's init (_family_init): when C ends, it writes C's
#     wait status to the status pipe, and once C and every live copy of it
#     ended, it exits, which ends all that is left in the namespace (bwrap's
#     init does the same when its interpreter ends). The template reaps it.
#   C, pid 2, the interpreter: a session of its own, its control socket to
#     the host on fd 5 (its copies' descriptors come there), says "c", drops
#     every capability (the bounding set included) and sets no_new_privs,
#     takes the import path a cold start has (user site included) and serves.

_CLONE_NEWNS = 0x00020000
_CLONE_NEWCGROUP = 0x02000000
_CLONE_NEWIPC = 0x08000000
_CLONE_NEWPID = 0x20000000
_CLONE_NEWNET = 0x40000000
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 1, 2, 4, 8
_MS_REMOUNT, _MS_BIND, _MS_REC, _MS_PRIVATE = 32, 4096, 16384, 1 << 18
_PR_CAPBSET_DROP, _PR_SET_NO_NEW_PRIVS, _PR_CAP_AMBIENT = 24, 38, 47
_CTL_FD = 5  # the control socket: a sandboxed template's requests, a fork's descriptors (../fork.go)
_SANDBOXED = _take_env("KH_FORK_SANDBOX") is not None
_NETNS = _take_env("KH_FORK_NETNS") is not None  # each context in a network namespace of its own (../network.go)
_cold_path = list(sys.path)  # the import path a cold start has (the template prunes its own)
_shadow = None  # why the template cannot serve: a module it loaded is shadowed where it cannot look


def _checked(ret, what):
    if ret != 0:
        err = _import("ctypes").get_errno()
        raise OSError(err, "%s: %s" % (what, os.strerror(err)))


def _mount(src, target, fstype, flags, data=None):
    ctypes = _import("ctypes")
    enc = lambda v: None if v is None else v.encode()
    ret = _libc().mount(enc(src), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data))
    _checked(ret, "mount %s on %s" % (fstype or src, target))


def _drop_caps():
    """No capability left, none to gain by exec: bounding and ambient sets
    cleared, then the others; no_new_privs."""
    ctypes = _import("ctypes")
    libc = _libc()
    for cap in range(_fork_cache["cap_last"] + 1):
        _checked(libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0), "drop capability %d" % cap)
    _checked(libc.prctl(_PR_CAP_AMBIENT, 4, 0, 0, 0), "clear ambient capabilities")  # PR_CAP_AMBIENT_CLEAR_ALL

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    data = (ctypes.c_uint32 * 6)()  # two of {effective, permitted, inheritable}, all 0
    _checked(libc.capset(ctypes.byref(Header(0x20080522, 0)), data), "capset")  # _LINUX_CAPABILITY_VERSION_3
    _checked(libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")


def _unescape_mount_point(s):
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), s)


def _own_tmp():
    """A tmpfs on /tmp, as bwrap's --tmpfs; the paths bwrap bound under the
    template's /tmp (a workspace there, the interpreter's directory) are
    bound again over it, read-only as they were or writable."""
    with open("/proc/self/mountinfo") as f:
        points = sorted({_unescape_mount_point(line.split()[4]) for line in f})
    keep = []
    for point in points:
        if point.startswith("/tmp/") and not any(point.startswith(k + "/") for k in keep):
            keep.append(point)
    held = [(point, os.open(point, os.O_PATH | os.O_CLOEXEC)) for point in keep]
    _mount("tmpfs", "/tmp", "tmpfs", _MS_NOSUID | _MS_NODEV, "mode=0755")
    for point, fd in held:
        if os.path.isdir("/proc/self/fd/%d" % fd):
            os.makedirs(point, 0o755, exist_ok=True)
        else:
            os.makedirs(os.path.dirname(point), 0o755, exist_ok=True)
            os.close(os.open(point, os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0o644))
        _mount("/proc/self/fd/%d" % fd, point, None, _MS_BIND | _MS_REC)
        os.close(fd)


def _own_dev():
    """A /dev of its own, as bwrap's --dev makes one: a tmpfs with the
    template's device nodes bound in, its symlinks and directories, and a
    devpts of its own. The template's /dev (and /dev/shm, where POSIX shared
    memory lives) is writable, and must not be shared by its contexts."""
    stat = _import("stat")
    entries = []
    for name in sorted(os.listdir("/dev")):
        path = "/dev/" + name
        st = os.lstat(path)
        if stat.S_ISLNK(st.st_mode):
            entries.append((path, "link", os.readlink(path)))
        elif stat.S_ISDIR(st.st_mode):
            entries.append((path, "dir", stat.S_IMODE(st.st_mode)))
        else:
            entries.append((path, "node", os.open(path, os.O_PATH | os.O_CLOEXEC)))
    _mount("tmpfs", "/dev", "tmpfs", _MS_NOSUID | _MS_NODEV, "mode=0755")
    for path, kind, value in entries:
        if kind == "link":
            os.symlink(value, path)
        elif kind == "dir":
            os.mkdir(path)
            os.chmod(path, value)
        else:
            os.close(os.open(path, os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0o666))
            _mount("/proc/self/fd/%d" % value, path, None, _MS_BIND)
            os.close(value)
    if os.path.isdir("/dev/pts"):
        _mount("devpts", "/dev/pts", "devpts", _MS_NOSUID | _MS_NOEXEC, "newinstance,ptmxmode=0666,mode=620")


# The system-wide files of a fresh /proc, covered read-only: walls.go's
# kernelKnobs (internal/sandbox), the same list under /proc;
# TestPythonCopiesOfTheWalls there checks it.
_KERNEL_KNOBS = ("sys", "sysrq-trigger", "irq", "bus", "fs", "acpi", "asound", "scsi", "driver", "mtrr",
                 "latency_stats", "timer_stats")


def _own_proc():
    """A /proc of the new PID namespace, its system-wide files covered
    read-only as bwrap covers them (a root context must not write sysctls)."""
    _mount("proc", "/proc", "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
    # No user namespace is made in the template's from now on (a cell has
    # no use for one): with CAP_SYS_RESOURCE there, dropped with the rest.
    with open("/proc/sys/user/max_user_namespaces", "w") as f:
        f.write("0\n")
    for sub in _KERNEL_KNOBS:
        path = "/proc/" + sub
        if os.path.lexists(path):
            _mount(path, path, None, _MS_BIND | _MS_REC)
            _mount(None, path, None, _MS_BIND | _MS_REMOUNT | _MS_RDONLY | _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)


def _loopback_up():
    """Bring up the loopback of B's new network namespace, as bwrap's
    --unshare-net does (the host's pasta, under -context-network=isolated,
    adds the rest)."""
    fcntl, socket, struct = _import("fcntl"), _import("socket"), _import("struct")
    siocgifflags, siocsifflags, iff_up = 0x8913, 0x8914, 1
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        req = fcntl.ioctl(s.fileno(), siocgifflags, struct.pack("16sh22x", b"lo", 0))
        flags = struct.unpack("16sh22x", req)[1]
        fcntl.ioctl(s.fileno(), siocsifflags, struct.pack("16sh22x", b"lo", flags | iff_up))


def _reap(*_):
    """Reap the template's ended children (the contexts' namespace inits)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _fork_sandboxed(ctl, spec, fds):
    """Serve a sandboxed template's fork request: answer "<seq> ok" or
    "<seq> error <why>" on the control socket; the child never returns here."""
    socket = _import("socket")
    _reap()
    why = _stale() or _shadow
    if why is None and len(fds) != 8:
        why = "want 8 descriptors, got %d" % len(fds)
    pid = -1
    if why is None:
        try:
            pid = _clone_context(_CLONE_NEWNS | _CLONE_NEWPID | _CLONE_NEWIPC | (_CLONE_NEWNET if _NETNS else 0), runs_no_code=True)
        except Exception as exc:
            why = str(exc) or type(exc).__name__
    if pid == 0:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        ctl.close()
        *pipes, status, sock_fd, family, ctl_fd = fds
        sock = socket.socket(fileno=sock_fd)
        try:
            _sandboxed_child(sock, status, pipes, family, ctl_fd)
        except BaseException as exc:
            try:
                sock.send(("error %s" % exc).encode()[:4000])
            except OSError:
                pass
            os._exit(1)
        # C, the context, once it served: the interpreter exits as a driver does.
        _serve_as_context(spec, True)
        raise SystemExit(0)
    for fd in fds:
        os.close(fd)
    try:
        ctl.send(("%d %s" % (spec.get("seq", 0), "ok" if why is None else "error " + why)).encode())
    except OSError:
        pass


def _sandboxed_child(sock, status, pipes, family, ctl):
    """B, then C (see above); returns in C only. The context's pipes become
    its fds 1-4 in C, and its control socket to the host (its live forks'
    descriptors come there) fd 5: until then B writes the template's."""
    sock.send(b"b")
    if sock.recv(16) != b"go":
        os._exit(1)  # the host gave up
    _libc().unshare(_CLONE_NEWCGROUP)  # where the kernel has cgroup namespaces, as bwrap's --unshare-cgroup-try
    _mount(None, "/", None, _MS_REC | _MS_PRIVATE)
    os.setsid()
    _own_tmp()
    _own_dev()
    _own_proc()
    if _NETNS:
        _loopback_up()
    c = _clone_context(0, runs_no_code=True)
    if c == 0:
        os.close(status)
        os.close(family)
        os.setsid()  # C's own session and group: SIGINT goes to it, not to B
        _take_pipes(pipes)
        os.dup2(ctl, _CTL_FD, inheritable=False)
        os.close(ctl)
        sock.send(b"c")
        sock.close()
        _drop_caps()
        _restore_cold_path()
        return
    sock.close()
    null = os.open("/dev/null", os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    for fd in [int(n) for n in os.listdir("/proc/self/fd")]:
        if fd > 2 and fd not in (status, family):
            try:
                os.close(fd)
            except OSError:
                pass  # the directory listing's own
    _drop_caps()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _family_init(c, status, family)


# A family (issue 43; ../family.go): a context forked from the template and
# its live copies share B, their namespaces' init. A copy is cloned by a
# member's interpreter with CLONE_PARENT, so it is B's child too; B reaps
# every member and writes each one's wait status to that member's status
# pipe, and exits (which ends the namespaces) only once it has no child
# left. The host sends B each new member's status pipe on the family socket,
# with the member's pid in B's namespace.

_FAMILY_KEEP = 64  # statuses of children B was not told of yet that it keeps


def _family_init(first, status, family_fd):
    select, socket = _import("select"), _import("socket")
    members = {first: status}  # pid -> its status pipe
    unclaimed = {}  # pid -> status of a child that ended before its pipe came (or an orphan)
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    family = socket.socket(fileno=family_fd)
    poller = select.poll()
    poller.register(wake_r, select.POLLIN)
    poller.register(family, select.POLLIN)
    while True:
        _reap_members(members, unclaimed)
        for fd, _ in poller.poll():
            if fd == wake_r:
                try:
                    os.read(wake_r, 4096)
                except BlockingIOError:
                    pass
                continue
            try:
                msg, fds, _, _ = socket.recv_fds(family, 64, 1)
            except OSError:
                msg, fds = b"", []
            if not msg:
                poller.unregister(family)  # the host is gone: the members still end here
                continue
            if len(fds) != 1 or not msg.strip().isdigit():
                for f in fds:
                    os.close(f)
                continue
            pid = int(msg)
            if pid in unclaimed:
                _write_status(fds[0], unclaimed.pop(pid))
            else:
                members[pid] = fds[0]


def _reap_members(members, unclaimed):
    """Reap B's ended children; exit once none is left."""
    while True:
        try:
            pid, st = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            os._exit(0)
        if pid == 0:
            return
        fd = members.pop(pid, None)
        if fd is not None:
            _write_status(fd, st)
            continue
        unclaimed[pid] = st
        if len(unclaimed) > _FAMILY_KEEP:
            del unclaimed[next(iter(unclaimed))]


def _write_status(fd, st):
    try:
        os.write(fd, b"%d\n" % st)
    except OSError:
        pass  # the host stopped reading
    os.close(fd)


def _fork_in_family(spec):
    """A live fork of a sandboxed context (C): its copy's descriptors came on
    the control socket (fd 5) with the request's number; the copy, cloned
    with CLONE_PARENT, is B's child, a member of C's family. Answers
    "<seq> ok" or "<seq> error <why>" there; a request the host gave up on
    is dropped."""
    got = _fork_descriptors(spec)
    if got is None:
        return
    ctl, seq, fds = got
    why, pid = None, -1
    if len(fds) != 6:
        why = "want 6 descriptors, got %d" % len(fds)
    else:
        try:
            pid = _clone_context()
        except Exception as exc:
            why = str(exc) or type(exc).__name__
    if pid == 0:
        _become_member(spec, fds)
        raise SystemExit(0)  # as _fork_context's child
    for fd in fds:
        os.close(fd)
    _answer_fork(ctl, seq, "ok" if why is None else "error " + why)


def _become_member(spec, fds):
    """The copy: its own session, pipes and control socket; it says "c" on
    the handshake socket (the host reads its pid there) and waits until the
    host moved it into its cgroup and told its family's init of it."""
    socket = _import("socket")
    *pipes, hs_fd, ctl = fds
    try:
        sock = socket.socket(fileno=hs_fd)
        os.setsid()
        _take_pipes(pipes)
        os.dup2(ctl, _CTL_FD, inheritable=False)
        os.close(ctl)
        sock.send(b"c")
        if sock.recv(16) != b"go":
            os._exit(1)
        sock.close()
    except BaseException:
        os._exit(1)
    _serve_as_context(spec, False)


def _restore_cold_path():
    """The import path of a cold start: the template's pruned entries back,
    and the user site where site.py puts it, its .pth files processed and
    usercustomize imported (after the driver, not before it)."""
    sys.path[:] = _cold_path
    site = _import("site")
    site.ENABLE_USER_SITE = True
    user = site.getusersitepackages()
    if os.path.isdir(user) and user not in sys.path:
        system = set(site.getsitepackages())
        at = next((i for i, p in enumerate(sys.path) if p in system), len(sys.path))
        sys.path.insert(at, user)
        site.addsitedir(user)
        try:
            import usercustomize  # noqa: F401
        except ImportError:
            pass
        except Exception:
            pass  # a cold start prints it; the context starts all the same
    _import("importlib").invalidate_caches()


def _shadowed():
    """Why a context would not import what the template preloaded: a module
    it loaded is also in the user site or another writable entry of the
    import path, which the template does not search."""
    names = {n.partition(".")[0] for n in sys.modules}
    site = _import("site")
    for d in [p for p in _cold_path if p not in ("", ".") and p not in sys.path] + [site.getusersitepackages()]:
        try:
            entries = os.listdir(d)
        except OSError:
            continue
        for e in entries:
            if e.partition(".")[0] in names and (e.partition(".")[0] == e or e.endswith((".py", ".so"))):
                return "shadowed: %s in %s is what a new context imports, not the template's" % (e, d)
    return None


def _serve_sandboxed_forks():
    """A sandboxed template's loop: requests, each with its descriptors, on
    the control socket; its end (the host retired the template) lets the
    template live on, reaping, until its last context ended (they are in
    its PID namespace, which ends with it)."""
    global _shadow
    socket = _import("socket")
    ctl = socket.socket(fileno=_CTL_FD)
    with open("/proc/sys/kernel/cap_last_cap") as f:
        _fork_cache["cap_last"] = int(f.read())
    writable = [w for w in (_take_env("KH_WRITABLE") or "").split(":") if w]
    sys.path[:] = [p for p in sys.path if p and not any(os.path.abspath(p) == w or os.path.abspath(p).startswith(w.rstrip("/") + "/") for w in writable)]
    signal.signal(signal.SIGCHLD, _reap)
    _preload([n for n in (_take_env("KH_PRELOAD") or "").split(",") if n])
    _shadow = _shadowed()
    _stop_blas_threads()
    _emit({"type": "kh_ready"})
    while True:
        msg, fds, _, _ = socket.recv_fds(ctl, 1 << 16, 16)
        if not msg:
            for fd in fds:
                os.close(fd)
            break
        try:
            req = _loads(msg)
        except ValueError:
            req = {}
        if "fork" in req:
            _fork_sandboxed(ctl, req["fork"], fds)
        else:
            for fd in fds:
                os.close(fd)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    while True:
        try:
            os.wait()
        except ChildProcessError:
            return
        except InterruptedError:
            continue


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
    paths = {p for p in sys.path + _cold_path if p} | {site.getusersitepackages()}
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


# The control socket is the driver's, not its children's, as fd 3 and 4
# are (driver.py); a sandboxed context bwrap started has none.
try:
    os.set_inheritable(_CTL_FD, False)
except OSError:
    pass
_is_template = _take_env("KH_FORK_TEMPLATE") is not None
_start_env = dict(os.environ)  # a template's contexts take theirs in _serve_as_context
if _is_template:
    _serve_sandboxed_forks() if _SANDBOXED else _serve_forks()
else:
    _main()
