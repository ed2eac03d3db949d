"""Each side's probe processes in a sandbox of their own: ``enter(view)`` in a process about to
run PR code, or ``python -m perfcheck.runner.process.sandbox VIEW -- ARGV`` around a fresh one.

Why: head's code runs with the same rights as everything it is compared against. Without walls
it can rewrite base's tree so that base measures head's code, append to perfcheck's installed
modules, write a compile cache base reads, or reach the orchestrator's descriptors through
``/proc/<pid>/fd`` and ``pidfd_getfd`` (issue 29, docs/security.md).

What a sandboxed process sees, built from Linux user, mount, PID, network and IPC namespaces, the
mechanism rootless containers use (no privilege, no setuid helper):

- a root of its own, read-only, holding only what it was given (``shown_folders``): its own tree,
  the interpreters and packages it imports, perfcheck's install, the review's folder, the
  system's programs, libraries and settings (``SYSTEM_FOLDERS``: /usr, /etc, /sys, ...) and the
  model caches the environment names; nothing else of the machine (/run, /var, /home, /root, /mnt,
  /opt) exists inside, so no socket, FIFO or device there can be reached by any name it was bound
  or linked by. Writable only the folders ``view.writable`` names (its side's compile caches), a
  private ``/tmp`` (its side's scratch folder) and a private ``/dev/shm``;
- ``view.hidden`` (the other side's tree, every compile cache of the review) replaced by an empty
  read-only folder, except what ``view.visible`` and ``view.writable`` put back;
- a PID namespace of its own with a fresh ``/proc``: no other process of the machine can be named,
  so none can be traced, signalled, or entered through ``/proc/<pid>/root``, ``/fd`` or ``/mem``;
- a network namespace with only loopback (torchrun's and gloo's rendezvous stay on the side) and
  System V IPC of its own;
- inside the folders it holds, no socket file the machine has bound there either (each that
  ``/proc/net/unix`` names is covered by ``/dev/null``, where ``connect()`` is refused): a second
  wall for a socket in a tree, the first being that the machine's socket folders are not there;
- a ``/dev`` of its own with only the devices a probe uses (null, zero, full, random, urandom and
  the GPU's), its sysctls read-only, and for root no supplementary groups.

The mounts are made in a user namespace, then locked by a second one nested in it: the kernel then
refuses to make a read-only mount writable or to unmount what hides a folder, even for code that
is root inside. The process that entered stays outside the PID namespace as its first process's
parent and ends as that process ends (same exit code, same signal), so the orchestrator waits for,
times out and kills a sandboxed probe as it did before.

Only the standard library here: the launcher starts in a fresh interpreter before every probe
process that does not come from a fork server.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import json
import os
import signal
import socket
import stat
import struct
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

DISABLE_ENV = "PERFCHECK_SANDBOX"  # "0": probe processes run without a sandbox (debugging only)

CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_BIND, MS_REC, MS_PRIVATE = 4096, 16384, 1 << 18
AT_FDCWD, AT_RECURSIVE = -100, 0x8000
MOUNT_ATTR_RDONLY = 0x1
SYS_MOUNT_SETATTR = 442  # the same number on every architecture (the unified syscall table)
PR_SET_PDEATHSIG = 1
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1
# The machine's folders of sockets and daemons' state: a read-only mount does not stop connect(),
# and a runner's user can often reach a privileged daemon's socket there (GitHub's hosted runners:
# /var/run/docker.sock). Outside the allowlisted root anyway; hidden too where a view shows them.
MACHINE_HIDDEN = ("/run", "/var/run")
# What a sandbox's root holds of the machine, read-only, besides its view's folders (its tree,
# the interpreters and packages it imports, perfcheck's install, the review's folder): the
# system's programs, libraries and settings an interpreter, a C++ compiler and a GPU's runtime
# read (merged-/usr links kept as links), and the kernel's view of the devices (/sys). Nothing else
# of the machine exists inside, no /run, /var, /home, /root, /mnt, /opt or /srv: no socket, FIFO
# or device file there has a name in the sandbox, whatever name it was bound or linked by.
SYSTEM_FOLDERS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/sys")
# Where the environment says models and their weights are read from (read-only inside).
DATA_ENV = ("HF_HOME", "HF_HUB_CACHE", "TORCH_HOME", "TRANSFORMERS_CACHE")
# More folders of the machine to show read-only, absolute, separated by ':' (a dataset under
# /data, say): the operator's, from the workflow's environment, never from the reviewed trees.
READ_ENV = "PERFCHECK_SANDBOX_READ"
# The root is built in a tmpfs mounted here, inside the side's scratch folder, then pivoted into.
ROOT_MOUNT = ".perfcheck-root"
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}
MNT_DETACH = 2
# Kernel knobs shown read-only: as uid 0 (the example container) a process could write the
# machine's sysctls (a piped kernel.core_pattern runs a program as root outside every wall) and
# its interrupts' CPU affinities (/proc/irq). runc's read-only /proc paths, all of them.
READ_ONLY_PROC = ("/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger")
# The devices a sandbox shows, each bound from the machine's /dev into a /dev of its own: what
# Python, torch and a GPU's runtime open (NVIDIA: nvidia0..N, nvidiactl, nvidia-uvm, nvidia-caps;
# AMD: kfd, dri), never the rest (/dev/kmsg, /dev/kvm, disks, /dev/log's socket). A device on a
# read-only mount stays writable, which is why the others are left out rather than shown read-only.
DEVICES = ("null", "zero", "full", "random", "urandom")
GPU_DEVICE_PREFIXES = ("nvidia", "kfd", "dri")
DEV_LINKS = {
    "fd": "/proc/self/fd",
    "stdin": "/proc/self/fd/0",
    "stdout": "/proc/self/fd/1",
    "stderr": "/proc/self/fd/2",
}
# Where the machine's network namespace lists the socket files bound in it (the path is the last
# column, where there is one): each is covered in a sandbox, whatever folder it lies in.
UNIX_SOCKETS_TABLE = "/proc/net/unix"

# A sandboxed process's temporary files go to its private /tmp, whatever TMPDIR the runner has:
# torch writes its default caches, locks and precompiled headers under tempfile.gettempdir(), and
# any other folder is read-only in the sandbox.
INSIDE_ENV = {"TMPDIR": "/tmp"}


class Unavailable(Exception):
    """The kernel or the machine's policy refuses a sandbox here: why."""


@dataclass(frozen=True)
class View:
    """What one side's processes see besides the read-only file system: perfcheck.spec.Walls as the
    launcher reads it, without pydantic (a fresh interpreter starts it before every process)."""

    scratch: str  # this side's own folder, mounted at /tmp
    writable: tuple[str, ...] = ()
    hidden: tuple[str, ...] = ()
    visible: tuple[str, ...] = field(default=())  # put back read-only where a hidden folder covers it
    moved: tuple[tuple[str, str], ...] = ()  # (folder, path): the folder shown writable at the path

    @staticmethod
    def from_json(text: str) -> View:
        data = json.loads(text)
        return View(
            scratch=str(data["scratch"]),
            writable=tuple(str(p) for p in data["writable"]),
            hidden=tuple(str(p) for p in data["hidden"]),
            visible=tuple(str(p) for p in data["visible"]),
            moved=tuple((str(a), str(b)) for a, b in data.get("moved", ())),
        )


def enabled() -> bool:
    return os.environ.get(DISABLE_ENV, "1") != "0"


@cache
def unavailable() -> str | None:
    """Why a sandbox cannot be made on this machine (None: it can), tried once per process in a
    fresh interpreter: the user namespaces a sandbox needs are a kernel setting (and a policy of
    AppArmor, SELinux or a container's seccomp profile) that differs between machines."""
    if not sys.platform.startswith("linux"):
        return f"Linux namespaces are needed; this is {sys.platform}"
    try:
        done = subprocess.run(
            [sys.executable, "-m", "perfcheck.runner.process.sandbox", "--check"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            env={**os.environ, "PYTHONSAFEPATH": "1"},
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"the check could not run: {err}"
    if done.returncode == 0:
        return None
    return (done.stderr.strip().splitlines() or [f"the check exited with code {done.returncode}"])[-1]


def command(view_json: str, argv: Sequence[str], python: str = sys.executable) -> list[str]:
    """``argv`` run behind the walls ``view_json`` describes: the launcher's command line."""
    return [python, "-m", "perfcheck.runner.process.sandbox", view_json, "--", *argv]


# --- inside the process that enters ------------------------------------------------------------


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise Unavailable(f"{what}: {os.strerror(errno)}")


def _unshare(flags: int, what: str) -> None:
    _check(_libc().unshare(flags), what)


def _map_ids(uid: int, gid: int) -> None:
    """This process's user and group, the same numbers inside its new user namespace."""
    Path("/proc/self/setgroups").write_text("deny")
    Path("/proc/self/uid_map").write_text(f"{uid} {uid} 1")
    Path("/proc/self/gid_map").write_text(f"{gid} {gid} 1")


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    libc = _libc()
    enc = [None if s is None else s.encode() for s in (source, target, fstype, data)]
    _check(libc.mount(enc[0], enc[1], enc[2], ctypes.c_ulong(flags), enc[3]), f"mount {target}")


class _MountAttr(ctypes.Structure):
    _fields_ = [
        ("attr_set", ctypes.c_uint64),
        ("attr_clr", ctypes.c_uint64),
        ("propagation", ctypes.c_uint64),
        ("userns_fd", ctypes.c_uint64),
    ]


def _setattr(path: str, recursive: bool, read_only: bool) -> None:
    attr = _MountAttr(MOUNT_ATTR_RDONLY if read_only else 0, 0 if read_only else MOUNT_ATTR_RDONLY, 0, 0)
    flags = AT_RECURSIVE if recursive else 0
    result = _libc().syscall(
        SYS_MOUNT_SETATTR, AT_FDCWD, path.encode(), flags, ctypes.byref(attr), ctypes.sizeof(attr)
    )
    _check(result, f"mount_setattr {path}")


def holds(folder: str, path: str) -> bool:
    """Whether ``path`` is ``folder`` or lies inside it."""
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def machine_sockets(table: str = UNIX_SOCKETS_TABLE) -> list[str]:
    """The socket files bound in this process's network namespace, by absolute path: read before
    the sandbox's own namespace replaces it. Abstract names (``@...``) need nothing: they belong
    to a network namespace, and the sandbox's is its own."""
    try:
        with open(table, encoding="utf-8", errors="surrogateescape") as lines:
            rows = lines.read().splitlines()[1:]
    except OSError:
        return []
    paths = (row.split(None, 7)[7] for row in rows if len(row.split(None, 7)) == 8)
    return sorted({p for p in paths if p.startswith("/")})


def _device_names(dev: str = "/dev") -> list[str]:
    try:
        names = os.listdir(dev)
    except OSError:
        return []
    return sorted(n for n in names if n in DEVICES or n.startswith(GPU_DEVICE_PREFIXES))


def _cover_sockets(paths: Sequence[str], cover_fd: int) -> None:
    """Each path still a socket where the walls stand (not under a hidden folder) gets ``/dev/null``
    bound over it: a read-only mount does not stop ``connect()``, a device in its place does."""
    for path in paths:
        try:
            is_socket = stat.S_ISSOCK(os.lstat(path).st_mode)
        except OSError:
            continue
        if is_socket:
            _mount(f"/proc/self/fd/{cover_fd}", path, None, MS_BIND)


def _private_dev(devices: dict[str, int], root: str = "") -> None:
    """A /dev of its own: a small tmpfs with the named devices bound in from their descriptors
    (opened before the tmpfs covers them), the usual links into /proc, and a private /dev/shm."""
    dev = f"{root}/dev"
    os.makedirs(dev, exist_ok=True)
    _mount("tmpfs", dev, "tmpfs", MS_NOSUID, "size=64k,mode=0755")
    for name, fd in devices.items():
        target = os.path.join(dev, name)
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            os.mkdir(target)
            _mount(f"/proc/self/fd/{fd}", target, None, MS_BIND | MS_REC)
        else:
            Path(target).touch()
            _mount(f"/proc/self/fd/{fd}", target, None, MS_BIND)
    for name, points_to in DEV_LINKS.items():
        os.symlink(points_to, os.path.join(dev, name))
    os.mkdir(f"{dev}/shm")
    _mount("tmpfs", f"{dev}/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777")


def shown_folders(view: View) -> list[str]:
    """Every folder of the machine a sandbox's root holds (by real path, outermost first, none
    inside another): the system's, the view's, and the data folders the environment names."""
    real = os.path.realpath
    wanted = [
        *(p for p in SYSTEM_FOLDERS if not os.path.islink(p)),
        *view.visible,
        *view.writable,
        *(dst for _, dst in view.moved),
        *(os.environ[n] for n in DATA_ENV if os.environ.get(n, "").startswith("/")),
        *(p for p in os.environ.get(READ_ENV, "").split(":") if p.startswith("/")),
    ]
    found = sorted({real(p) for p in wanted if os.path.isdir(p)}, key=lambda p: (p.count("/"), p))
    out: list[str] = []
    for path in found:
        if path != "/" and not any(holds(o, path) for o in out):
            out.append(path)
    return out


def _allowlisted_root(view: View) -> str:
    """A root of its own, made in a tmpfs: each of ``shown_folders`` bound in (recursively, as
    it is), the system folders that are links (merged /usr) made as the same links, and empty
    mount points for /tmp, /dev and /proc. Returns where it is, to be pivoted into."""
    root = os.path.join(os.path.realpath(view.scratch), ROOT_MOUNT)
    os.makedirs(root, exist_ok=True)
    _mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0755")
    for link in (p for p in SYSTEM_FOLDERS if os.path.islink(p)):
        os.symlink(os.readlink(link), f"{root}{link}")
    for folder in shown_folders(view):
        os.makedirs(f"{root}{folder}", exist_ok=True)
        _mount(folder, f"{root}{folder}", None, MS_BIND | MS_REC)
    os.makedirs(f"{root}/tmp", exist_ok=True)
    # The machine's /proc, under the sandbox's own from its first process on: the kernel mounts a
    # fresh proc in a user namespace only where one is already in full view there.
    os.makedirs(f"{root}/proc", exist_ok=True)
    _mount("/proc", f"{root}/proc", None, MS_BIND | MS_REC)
    return root


def _pivot(root: str) -> None:
    """Into ``root``: the machine's root stacked on top of it and taken away (runc's
    ``pivot_root(".", ".")``), so no path leads back to it."""
    import platform

    number = SYS_PIVOT_ROOT.get(platform.machine())
    if number is None:
        raise Unavailable(f"pivot_root: no syscall number known for {platform.machine()}")
    os.chdir(root)
    _check(_libc().syscall(number, b".", b"."), "pivot_root")
    _check(_libc().umount2(b".", MNT_DETACH), "umount the machine's root")
    os.chdir("/")


def _build_mounts(view: View, sockets: Sequence[str]) -> None:
    """In a new mount namespace (owned by this process's new user namespace): the view's walls.

    /tmp first (the side's scratch folder), then every hidden and every bound folder in order of
    depth, so that each lands on what its parent became: a folder put back inside a hidden one
    (its own tree inside the other's, its cache inside the review's caches) shows, and a hidden
    folder inside one put back (the review's caches inside the review's folder) stays hidden."""
    real = os.path.realpath
    hidden = list(dict.fromkeys(real(p) for p in [*view.hidden, *MACHINE_HIDDEN] if os.path.isdir(p)))
    writable = [real(p) for p in view.writable if os.path.isdir(p)]
    # Never /tmp itself or a folder above it: that would put the machine's /tmp back in place of
    # the side's own (and make it writable with it).
    visible = [real(p) for p in view.visible if os.path.isdir(p)]
    bound = [*writable, *(p for p in visible if not holds(p, "/tmp"))]
    # Opened before anything covers them: a covered folder is bound back from its descriptor.
    fds = {p: os.open(p, os.O_PATH | os.O_DIRECTORY) for p in {*bound, real(view.scratch)}}
    moved = {
        real(dst): os.open(src, os.O_PATH | os.O_DIRECTORY) for src, dst in view.moved if os.path.isdir(dst)
    }
    fds.update(moved)  # a moved folder's path is bound from its folder's descriptor
    bound += list(moved)
    writable += list(moved)
    devices = {name: os.open(f"/dev/{name}", os.O_PATH | os.O_NOFOLLOW) for name in _device_names()}
    _mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing made here reaches the machine's mounts
    root = _allowlisted_root(view)
    _mount(f"/proc/self/fd/{fds[real(view.scratch)]}", f"{root}/tmp", None, MS_BIND)
    layers = sorted({(p, 0) for p in hidden} | {(p, 1) for p in bound}, key=lambda x: (len(x[0]), x[1]))
    for path, kind in layers:
        inside = f"{root}{path}"
        if kind == 0:
            # Hidden where the root holds it (not where /tmp, the scratch folder, covers it, nor
            # outside every folder the root holds).
            if os.path.isdir(inside) and not holds("/tmp", path):
                _mount("tmpfs", inside, "tmpfs", MS_NOSUID | MS_NODEV, "size=64k,mode=0755")
            continue
        os.makedirs(inside, exist_ok=True)  # a mount point inside the empty folder that covers it
        _mount(f"/proc/self/fd/{fds[path]}", inside, None, MS_BIND | MS_REC)
    if "null" not in devices:
        raise Unavailable("the machine has no /dev/null to bind into the sandbox")
    # What is left of the machine's sockets inside the folders the root holds (a socket in the
    # tree, say), covered too: connect() to a device is refused.
    _cover_sockets([f"{root}{p}" for p in sockets if not holds("/dev", p)], devices["null"])
    _private_dev(devices, root)
    for fd in [*fds.values(), *devices.values()]:
        os.close(fd)
    _setattr(root, recursive=True, read_only=True)
    for path in ["/tmp", "/dev/shm", *writable]:
        _setattr(f"{root}{path}", recursive=False, read_only=False)
    _pivot(root)


def _loopback_up() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH22x", b"lo", 0)
        flags = struct.unpack("16sH22x", fcntl.ioctl(sock, SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(sock, SIOCSIFFLAGS, struct.pack("16sH22x", b"lo", flags | IFF_UP))


def _relay(pid: int) -> None:
    """The entering process, outside the PID namespace: end as its first process ends."""
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        # Forwarded: the first process of a PID namespace gets from outside only the signals it
        # has a handler for (and SIGKILL), as it would have got them without a sandbox.
        signal.signal(sig, lambda s, _f: os.kill(pid, s))
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except InterruptedError:
            continue
    code = os.waitstatus_to_exitcode(status)
    if code < 0:
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    os._exit(code if code >= 0 else 128 - code)


def enter(view: View) -> None:
    """Put this process's future behind ``view``'s walls. Returns in the sandbox's first process;
    the calling process waits outside for it and ends as it ends. Call with one thread (a fresh
    interpreter, or a child just forked). Raises Unavailable before anything is changed where the
    kernel refuses the first step."""
    uid, gid = os.geteuid(), os.getegid()
    if uid == 0:
        # Supplementary groups would go on granting what they grant outside (a user namespace can
        # only deny setgroups, not drop them); root may drop them before it leaves the machine's
        # namespace. Another user cannot, which is why the sockets are hidden too (and so does a
        # root without CAP_SETGID, whose groups are then what they were).
        with contextlib.suppress(PermissionError):
            os.setgroups([])
    os.makedirs(view.scratch, exist_ok=True)
    for path in [*view.writable, *(src for src, _ in view.moved)]:
        os.makedirs(path, exist_ok=True)
    sockets = machine_sockets()  # the machine's network namespace's, before this one is left
    _unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC, "unshare")
    _map_ids(uid, gid)
    _build_mounts(view, sockets)
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid != 0:
        _relay(pid)
    # The first process of the new PID namespace: it dies with its relay, and so does the rest.
    _check(_libc().prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl")
    _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    for path in READ_ONLY_PROC:
        if os.path.exists(path):
            _mount(path, path, None, MS_BIND | MS_REC)
            _setattr(path, recursive=True, read_only=True)
    _loopback_up()
    # Locked: copied into a namespace owned by a less privileged user namespace, these mounts can
    # no longer be made writable or taken away, not even by root inside.
    _unshare(CLONE_NEWUSER | CLONE_NEWNS, "unshare (lock)")
    _map_ids(uid, gid)
    os.environ.update(INSIDE_ENV)
    tempfile.tempdir = None  # asked afresh: an earlier answer named a folder outside


def _assert_read_only(path: str, what: str) -> None:
    """``path`` cannot be opened for writing (it need not exist)."""
    try:
        with open(path, "r+b"):
            pass
    except OSError:
        return
    raise AssertionError(what)


def _refused(path: str) -> bool:
    """Whether ``connect()`` to the socket file at ``path`` is refused."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
        try:
            client.connect(path)
        except OSError:
            return True
    return False


@contextlib.contextmanager
def _listening_outside_tmp() -> Iterator[str | None]:
    """A socket file bound where a sandbox still sees its folder (not under /tmp or /run, which
    it replaces): the daemon's socket a sandboxed process must not reach. None where no such
    folder is writable here."""
    for parent in ("/var/tmp", str(Path.home())):
        try:
            folder = tempfile.mkdtemp(prefix="perfcheck-sandbox-check-", dir=parent)
        except OSError:
            continue
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            server.bind(os.path.join(folder, "daemon.sock"))
            server.listen(1)
            yield os.path.join(folder, "daemon.sock")
        finally:
            server.close()
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(folder, "daemon.sock"))
            with contextlib.suppress(OSError):
                os.rmdir(folder)
        return
    yield None


def _check_main() -> int:
    """``--check``: make a sandbox of a scratch folder and try its walls from inside."""
    with (
        tempfile.TemporaryDirectory(prefix="perfcheck-sandbox-check-") as root,
        _listening_outside_tmp() as daemon,
    ):
        scratch, hidden = Path(root, "scratch"), Path(root, "hidden")
        hidden.mkdir()
        (hidden / "secret").write_text("x")
        pid = os.fork()
        if pid == 0:
            try:
                enter(View(scratch=str(scratch), hidden=(str(hidden),)))
                assert daemon is None or _refused(daemon), "a socket file of the machine can be reached"
                shown = set(os.listdir("/dev")) - {*DEV_LINKS, "shm"}
                extra = sorted(n for n in shown if n not in DEVICES and not n.startswith(GPU_DEVICE_PREFIXES))
                assert not extra, f"the machine's devices show through: /dev/{', /dev/'.join(extra)}"
                with open("/dev/null", "wb") as null:
                    null.write(b"x")
                Path("/dev/shm/probe").write_text("x")
                assert not (hidden / "secret").exists(), "a hidden folder shows through"
                assert os.getpid() == 1, "no PID namespace of its own"
                assert not any(os.listdir(p) for p in MACHINE_HIDDEN if os.path.isdir(p)), (
                    "the machine's socket folders (/run) show through"
                )
                _assert_read_only("/proc/sys/kernel/core_uses_pid", "the machine's sysctls are writable")
                assert os.geteuid() != 0 or not os.getgroups(), "root kept its supplementary groups"
                Path("/tmp/probe").write_text("x")
                try:
                    Path(sys.executable).with_name("perfcheck-sandbox-check").write_text("x")
                except OSError:
                    pass
                else:
                    raise AssertionError("the interpreter's folder is writable")
            except (Unavailable, OSError, AssertionError) as err:
                print(f"{type(err).__name__}: {err}", file=sys.stderr)
                os._exit(1)
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        code = os.waitstatus_to_exitcode(status)
        if code == 0 and not (scratch / "probe").exists():
            print("AssertionError: the scratch folder is not the sandbox's /tmp", file=sys.stderr)
            return 1
        return 0 if code == 0 else 1


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args == ["--check"]:
        return _check_main()
    if len(args) < 3 or args[1] != "--":
        print(
            "usage: python -m perfcheck.runner.process.sandbox VIEW_JSON -- COMMAND [ARG...]", file=sys.stderr
        )
        return 2
    try:
        view = View.from_json(args[0])
        enter(view)
    except (Unavailable, OSError, ValueError, KeyError) as err:
        print(f"perfcheck sandbox: {err}", file=sys.stderr)
        return 125
    try:
        os.execvp(args[2], args[2:])
    except OSError as err:
        print(f"perfcheck sandbox: cannot run {args[2]}: {err}", file=sys.stderr)
        return 127


if __name__ == "__main__":
    sys.exit(main())
