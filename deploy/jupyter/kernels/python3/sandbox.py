# Runs a Jupyter kernel in a bubblewrap (bwrap) sandbox with the walls of
# kernelhost's own interpreters (transports/subprocess/internal/sandbox:
# sandbox.go and walls.go; docs/jupyter.md, "Kernels run sandboxed"):
#
#   python3 -I -S sandbox.py --connection-file FILE [--writable DIR]...
#       [--signal-interrupts] -- KERNEL...
#
# The kernel sees the host's files read-only, except the user's dirs
# (~/.local, ~/.cache, ~/.npm, ~/.config, ~/.ipython, $IPYTHONDIR), its
# working directory (the server chose it, writable only under its root dir)
# and each --writable DIR; its own /tmp, /dev and /proc (only its own processes), no
# capabilities, no user namespaces, the kernel's knobs (/proc/sys, ...)
# read-only. It keeps the server's network: it talks ZeroMQ with the server
# on loopback. What would let it reach the server or another kernel is
# hidden: the server's runtime dir (its jpserver-*.json with the token, the
# cookie secret, every kernel's connection file with its HMAC key) holds
# only a copy of this kernel's connection file; the Jupyter config dirs (a
# token or password can be set there) are empty; the Jupyter data dirs
# (kernel specs, this launcher included) are read-only, so no kernel can
# change what the next one is started with; systemd's credentials are
# hidden and the server's token variables unset. A --writable DIR that does
# not exist is left out, as the host's -sandbox-writable does.
#
# Run with -I -S: the working directory and the user site are writable by
# kernels, and nothing there may run here, outside the sandbox. No bwrap, or
# a bwrap that cannot run here: the kernel does not start, and this says why
# on stderr (the server's log).
import ctypes
import json
import os
import signal
import sys

# sandbox.go's userDirs, the same list (TestPythonCopiesOfTheWalls in
# transports/subprocess/internal/sandbox checks it); $IPYTHONDIR is added
# where the server sets it.
USER_DIRS = (".local", ".cache", ".npm", ".config", ".ipython")

# The system-wide files a fresh /proc holds (sysctls, SysRq, IRQ, bus,
# filesystem and driver settings): root's, checked by owner only, and a
# kernel of a root server is uid 0 in its sandbox. Each is covered read-only
# by the host's own entry, whatever bwrap does by itself (0.8.0 left
# /proc/sys writable). walls.go's kernelKnobs, the same list
# (transports/subprocess/internal/sandbox; TestPythonCopiesOfTheWalls
# there checks it).
KERNEL_KNOBS = ("/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus", "/proc/fs",
                "/proc/acpi", "/proc/asound", "/proc/scsi", "/proc/driver", "/proc/mtrr",
                "/proc/latency_stats", "/proc/timer_stats")

# Variables of the server's environment that the kernel must not have: the
# server's token (JUPYTER_TOKEN), a hub's API tokens, and where systemd put
# the server's credentials (hidden: HIDDEN).
UNSET = ("JUPYTER_TOKEN", "JPY_API_TOKEN", "JUPYTERHUB_API_TOKEN", "CREDENTIALS_DIRECTORY")

# systemd's credentials of every service (LoadCredential=: a host's access
# token, the server's own): no kernel has a use for them.
HIDDEN = ("/run/credentials",)


def fail(msg):
    sys.stderr.write("kernelhost kernel sandbox: %s\n" % msg)
    sys.exit(1)


def parse(argv):
    """Returns the connection file, the --writable dirs, whether to pass
    SIGINT in (--signal-interrupts) and the kernel's command."""
    conn, writable, signals = None, [], False
    i = 0
    while i < len(argv) and argv[i] != "--":
        opt = argv[i]
        if opt == "--signal-interrupts":
            signals = True
            i += 1
            continue
        if opt not in ("--connection-file", "--writable") or i + 1 >= len(argv):
            fail("bad argument %r; usage: sandbox.py --connection-file FILE [--writable DIR]... "
                 "[--signal-interrupts] -- KERNEL..." % opt)
        if opt == "--connection-file":
            conn = argv[i + 1]
        elif os.path.isabs(argv[i + 1]):
            writable.append(argv[i + 1])
        else:
            fail("--writable %r: want an absolute path" % argv[i + 1])
        i += 2
    cmd = argv[i + 1:]
    if conn is None or not cmd:
        fail("want --connection-file FILE and, after --, the kernel's command")
    return os.path.realpath(conn), writable, signals, cmd


def under(path, dirs):
    return any(path == d or path.startswith(d.rstrip("/") + "/") for d in dirs)


def existing(paths):
    """The paths that exist, absolute with symlinks resolved, in order, once each."""
    out = []
    for p in paths:
        if p and os.path.exists(p):
            real = os.path.realpath(p)
            if real not in out:
                out.append(real)
    return out


def by_depth(paths):
    # Parents before children: a later mount goes over an earlier one.
    return sorted(paths, key=lambda p: p.count("/"))


def made(paths):
    """Makes each missing dir (0700), so that it can be mounted over."""
    for p in filter(None, paths):
        try:
            os.makedirs(p, 0o700, exist_ok=True)
        except OSError:
            pass
    return existing(paths)


def server_root(runtime):
    """The root_dir of the Jupyter Server that started this kernel, from its
    jpserver-<pid>.json beside the connection file; None if there is none
    (another client of jupyter_client)."""
    try:
        with open(os.path.join(runtime, "jpserver-%d.json" % os.getppid())) as f:
            root = json.load(f).get("root_dir")
    except (OSError, ValueError, AttributeError):
        return None
    return os.path.realpath(root) if isinstance(root, str) and os.path.isabs(root) else None


def writable_dirs(home, extra, root):
    """The user dirs, the cwd and extra. The cwd only inside the server's
    root: the server takes a kernel's cwd from its start request's path,
    and "../../etc" leads out of the root. Never "/"."""
    user = [os.path.join(home, d) for d in USER_DIRS] if home not in ("", "/") else []
    if os.environ.get("IPYTHONDIR"):
        user.append(os.environ["IPYTHONDIR"])
    cwd = existing([os.getcwd()])
    if root is not None:
        cwd = [d for d in cwd if under(d, [root])]
    return made(user) + [d for d in cwd + existing(extra) if d != "/"]


def jupyter_dirs(home, env_dir, env_path, default):
    """The dirs of a Jupyter path family: $X_DIR (or the default) and the
    user site's, both made if missing so a kernel cannot create one, and
    those $X_PATH lists."""
    mine = [os.environ.get(env_dir)]
    if home not in ("", "/"):
        mine[0] = mine[0] or os.path.join(home, default)
        mine.append(os.path.join(home, ".local", "etc" if "CONFIG" in env_dir else "share", "jupyter"))
    listed = [p for p in os.environ.get(env_path, "").split(os.pathsep) if os.path.isabs(p)]
    return made(mine) + existing(listed)


def find_bwrap(writable):
    # Not a bwrap a kernel could have planted (~/.local/bin on PATH).
    for d in os.environ.get("PATH", "/usr/bin:/bin").split(os.pathsep):
        path = os.path.join(d, "bwrap")
        if not os.path.isabs(d) or under(os.path.realpath(d), writable) or under(d, writable):
            continue
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    fail("bwrap is not installed, or only in a dir kernels can write (Debian: apt-get install "
         "bubblewrap); the kernel does not start unsandboxed (docs/jupyter.md, \"Kernels run sandboxed\")")


def walls(bwrap):
    """bwrap's namespace and privilege arguments, with no user namespaces
    for the kernel where this bwrap and machine allow (--disable-userns,
    bwrap 0.8+; a root server where user namespaces are refused runs
    without): probed as transports/subprocess does."""
    base = ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp",
            "--unshare-pid", "--unshare-ipc", "--unshare-cgroup-try",
            "--new-session", "--die-with-parent", "--cap-drop", "ALL"]
    nouserns = ["--unshare-user", "--uid", str(os.getuid()), "--gid", str(os.getgid()), "--disable-userns"]
    err = b""
    for args in (base + nouserns, base):
        ok, err = runs([bwrap] + args + ["--", "/bin/true"])
        if ok:
            return args + [a for p in KERNEL_KNOBS if os.path.lexists(p) for a in ("--ro-bind", p, p)]
    fail("bwrap (%s) fails here: %s" % (bwrap, err.decode(errors="replace").strip()))


def runs(argv):
    """Runs argv; says whether it succeeded, with its stderr. posix_spawn,
    not subprocess, whose import is half this launcher's start."""
    r, w = os.pipe()
    pid = os.posix_spawn(argv[0], argv, os.environ, file_actions=[
        (os.POSIX_SPAWN_OPEN, 1, "/dev/null", os.O_WRONLY, 0),
        (os.POSIX_SPAWN_DUP2, w, 2)])
    os.close(w)
    chunks = []
    while True:
        b = os.read(r, 65536)
        if not b:
            break
        chunks.append(b)
    os.close(r)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) == 0, b"".join(chunks)


def mounts(conn, writable):
    home = os.path.expanduser("~")
    spec_dir = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))  # .../kernels
    readonly = existing([spec_dir]) + jupyter_dirs(home, "JUPYTER_DATA_DIR", "JUPYTER_PATH", ".local/share/jupyter")
    args = []
    for d in by_depth(writable):
        args += ["--bind", d, d]
    cwd = os.path.realpath(os.getcwd())
    if under(cwd, ["/tmp"]) and not under(cwd, writable):
        # A cwd the sandbox's own /tmp hides is shown, read-only.
        args += ["--ro-bind", cwd, cwd]
    # After the writable ones, which may hold them (~/.local/share/jupyter).
    for d in by_depth(readonly):
        args += ["--ro-bind", d, d]
    for d in by_depth(existing(HIDDEN) + jupyter_dirs(home, "JUPYTER_CONFIG_DIR", "JUPYTER_CONFIG_PATH", ".jupyter")):
        args += ["--tmpfs", d]
    runtime = os.path.dirname(conn)
    if not under(runtime, ["/tmp"]) or under(runtime, writable + readonly):
        # Not hidden already by the sandbox's own /tmp (a client's
        # connection file straight in /tmp is, with what else is there).
        args += ["--tmpfs", runtime]
    # A copy, not a bind: ipykernel writes its connection file again once
    # its sockets are bound (and removes it at its end), here in the mask.
    fd = os.open(conn, os.O_RDONLY)
    os.set_inheritable(fd, True)
    return args + ["--file", str(fd), conn]


PR_SET_PDEATHSIG = 1  # prctl(2)


def supervise(args):
    """Runs bwrap (args) as a child in a process group of its own and passes
    the SIGINT the server sends this launcher's group on to the sandbox's
    init's group, where the kernel is (the init ignores it); ends as bwrap
    does. For kernels that take interrupts only as signals (IRkernel): the
    server's SIGINT would otherwise end bwrap. The server's SIGTERM or
    SIGKILL ends this launcher, and bwrap's --die-with-parent the sandbox."""
    child = None

    def interrupt(signum, frame):
        if child is None:
            return
        try:
            with open("/proc/%d/task/%d/children" % (child, child)) as f:
                inits = [int(p) for p in f.read().split()]
        except OSError:
            return
        for init in inits:
            try:
                os.killpg(init, signal.SIGINT)
            except OSError:
                pass

    # The launcher dies with the server (a kill -9 of the server included),
    # and bwrap's --die-with-parent takes the sandbox with it, as a kernel
    # the server exec'd directly would. Checked after: the server may have
    # died before.
    parent = os.getppid()
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:
        sys.exit(1)
    # Handled before bwrap starts (exec resets it there): a SIGINT meanwhile
    # must not end this launcher.
    signal.signal(signal.SIGINT, interrupt)
    child = os.posix_spawn(args[0], args, os.environ, setpgroup=0)
    _, status = os.waitpid(child, 0)
    code = os.waitstatus_to_exitcode(status)
    sys.exit(code if code >= 0 else 128 - code)


def main():
    conn, extra, signals, cmd = parse(sys.argv[1:])
    if not os.path.isfile(conn):
        fail("connection file %s: not a file" % conn)
    writable = writable_dirs(os.path.expanduser("~"), extra, server_root(os.path.dirname(conn)))
    bwrap = find_bwrap(writable)
    args = [bwrap] + walls(bwrap) + mounts(conn, writable)
    for name in UNSET:
        args += ["--unsetenv", name]
    # The kernel's parent is the sandbox's init, pid 1, whatever the
    # server's pid: ipykernel, told so, polls no parent (its poller would
    # take pid 1 for a dead server and exit at once; --die-with-parent ends
    # the kernel with the server instead) and prints no note for a kernel
    # started by hand.
    args += ["--setenv", "JPY_PARENT_PID", "1"]
    args += ["--chdir", os.path.realpath(os.getcwd()), "--"] + cmd
    if signals:
        supervise(args)
    os.execv(bwrap, args)


main()
