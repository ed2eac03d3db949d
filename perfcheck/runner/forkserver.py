"""Probe processes forked from a parent that has imported torch once: ``python -m
perfcheck.runner.forkserver FD``, and the orchestrator's side of it (``ForkServers``).

Why: a probe process spends about 4 s of CPU importing torch and Dynamo before its own work starts,
and a review starts several per side. A fork server imports them once and forks one child per probe.

What a child keeps of a fresh ``python -m MODULE ARGS``: a process and a session of its own; the
environment, working directory, log and result descriptor asked for; ``MODULE`` run as
``__main__``; the interpreter's own ending (exit code, atexit handlers, a traceback for an uncaught
exception). What it shares with its siblings: everything the server imported, and the memory layout
that came with it. That is why per-side probes are what is forked: timing and compile-latency
processes measure what a process costs, and each pair of them must be an independent draw
(perfcheck/runner/timing.py, perfcheck/runner/latency_runs.py); timing workers fork only on a
CPU (``times_forked``), where the gate's A/A trials were measured with forked workers.

Safety: a server runs no PR code (it imports torch and perfcheck before any tree is read); a child
keeps none of the server's descriptors (with them it could ask for processes or forge a sibling's
exit); a server in which CUDA got initialized refuses to serve, since CUDA cannot work in a child
forked after that (the server counts devices through NVML for that reason: ``serves``); anything
that goes wrong with a server sends its probes back to fresh processes, which is how they ran
before. A request may carry a sandbox (perfcheck/runner/sandbox.py): the child enters it before anything of
the job runs, so the server and the orchestrator are outside the child's PID namespace, out of its
reach.

Protocol, over AF_UNIX SOCK_SEQPACKET sockets (a message is one datagram): the server sends
``ready`` on its control socket once imported. A request is one message, JSON ``{module, args, cwd,
env}``, carrying three descriptors: the child's log, its result channel (``RESULT_FD`` in the child)
and a reply socket, on which the server answers ``pid N`` once forked and ``exit C`` (as
``subprocess`` reports it: negative for a signal) once it has reaped the child. A server ends when
its control socket closes. Linux only; elsewhere every probe starts fresh.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import fcntl
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perfcheck.runner import reaper, sandbox

if TYPE_CHECKING:
    from perfcheck.spec import Walls

RESULT_FD = 3  # where a child finds its result channel: its argument is ``fd:3``
# Read when a compile needs them, not when torch is imported: a child may set them differently
# from its server. Any other difference in the environment gets a server of its own.
LAZY_ENV = frozenset({"TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR"})
# Rewritten by a test runner for every test (pytest's): read by nothing at import, and a server
# per value would be a server per test.
VOLATILE_ENV = frozenset({"PYTEST_CURRENT_TEST"})
# In the server's environment only (a child gets the environment its request asks for): device
# counts through NVML, which leaves CUDA's driver uninitialized (torch.cuda.is_available's note).
NVML_CHECK = {"PYTORCH_NVML_BASED_CUDA_CHECK": "1"}
MAX_SERVERS = 4  # idle ones beyond this are ended, oldest first, when another is needed
DISABLE_ENV = "PERFCHECK_FORKSERVER"  # "0": every probe process starts fresh
READY_TIMEOUT_S = 300.0  # importing torch on a loaded machine; past this, probes start fresh
REPLY_TIMEOUT_S = 60.0
MAX_MESSAGE = 1 << 20


class ServerLost(Exception):
    """The server ended while one of its children ran: that child's exit code is unknown."""


# --- the orchestrator's side (torch-free) ---------------------------------------------------------


@dataclass
class Child:
    """A probe process a server forked; ``wait`` gives its exit code as ``Popen.wait`` would."""

    pid: int
    reply: socket.socket
    done: Callable[[], None] | None = None  # told once, when the caller is through with it

    def wait(self, timeout_s: float | None) -> int | None:
        """The exit code; None when it still runs after ``timeout_s``. Raises ServerLost."""
        self.reply.settimeout(timeout_s)
        try:
            message = self.reply.recv(64)
        except TimeoutError:
            return None
        except OSError as err:
            raise ServerLost(str(err)) from None
        word, _, value = message.decode(errors="replace").partition(" ")
        if word != "exit":
            raise ServerLost("the fork server ended before the probe process did")
        return int(value)

    def close(self) -> None:
        self.reply.close()
        done, self.done = self.done, None
        if done is not None:
            done()


class _Server:
    def __init__(self, proc: subprocess.Popen[bytes], control: socket.socket) -> None:
        self.proc = proc
        self.control = control
        self.lock = threading.Lock()
        self.active = 0  # children forked and not yet closed by the caller

    def _finished(self) -> None:
        with self.lock:
            self.active -= 1

    def fork(self, request: dict[str, Any], log_fd: int, result_fd: int) -> Child | None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            with self.lock:
                socket.send_fds(
                    self.control, [json.dumps(request).encode()], [log_fd, result_fd, theirs.fileno()]
                )
                self.active += 1
            theirs.close()
            ours.settimeout(REPLY_TIMEOUT_S)
            word, _, value = ours.recv(64).decode(errors="replace").partition(" ")
            if word != "pid" or not value.isdigit():
                ours.close()
                self._finished()
                return None
            return Child(int(value), ours, self._finished)
        except OSError:
            theirs.close()
            ours.close()
            return None

    def close(self) -> None:
        """End the server at once: it holds nothing to save, and an interpreter that imported
        torch takes seconds to shut down (3 s here). Its children are in sessions of their own,
        out of the signal's reach."""
        with self.lock:
            if self.control.fileno() == -1:
                return  # closed already: its pid may be another process's by now
            self.control.close()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        reaper.finished(self.proc.pid)


def enabled() -> bool:
    return sys.platform.startswith("linux") and os.environ.get(DISABLE_ENV, "1") != "0"


def serves(device: str) -> bool:
    """Whether per-side probes on ``device`` fork from a server: on a CPU and on CUDA. A server
    counts devices through NVML (``NVML_CHECK``), since ``torch.cuda.is_available()`` otherwise
    initializes CUDA's driver, as something the server imports asks (on the H200's image it did:
    bench/cuda_fork.py), after which a forked child could not use CUDA; a server that finds the
    driver initialized all the same refuses, and its probes start fresh."""
    return device in ("cpu", "cuda")


def times_forked(device: str) -> bool:
    """Whether timing workers fork from a server too. Only on a CPU, where the gate's quality was
    measured with forked workers; on a GPU it was measured with fresh ones (bench/processes.py),
    each pair an independent draw, so there they stay fresh."""
    return device == "cpu"


class ForkServers:
    """Fork servers for one review, or for several a caller runs in turn: one per interpreter and
    environment, started on first use, ended on ``close``. ``fork`` returns None wherever a fresh
    process should run instead."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self._servers: dict[tuple[str, tuple[tuple[str, str], ...]], _Server | None] = {}
        self._lock = threading.Lock()
        self._started = 0

    def _end_idle(self, keep: int) -> None:
        """End idle servers, oldest first, until at most ``keep`` are left (caller holds the lock)."""
        live = [(k, s) for k, s in self._servers.items() if s is not None]
        for key, server in live[: max(0, len(live) - keep)]:
            if server.active == 0:
                del self._servers[key]
                server.close()

    def __enter__(self) -> ForkServers:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def fork(
        self,
        python: str,
        module: str,
        args: Sequence[str],
        cwd: str,
        env: Mapping[str, str],
        log_fd: int,
        result_fd: int,
        walls: Walls | None = None,
    ) -> Child | None:
        """A child running ``python -m module *args``, behind ``walls`` where given (the child
        enters them before anything of the module runs); None: start it fresh."""
        if not enabled():
            return None
        reaper.check_stopping()
        differ = LAZY_ENV | VOLATILE_ENV
        key = (python, tuple(sorted((k, v) for k, v in env.items() if k not in differ)))
        with self._lock:  # one start per key, even with probes asking from several threads
            if key not in self._servers:
                self._end_idle(keep=MAX_SERVERS - 1)
                self._servers[key] = self._start(python, env, self._started)
                self._started += 1
            server = self._servers[key]
        if server is None:
            return None
        request = {"module": module, "args": list(args), "cwd": cwd, "env": dict(env)}
        if walls is not None:
            request["sandbox"] = walls.model_dump_json()
        child = server.fork(request, log_fd, result_fd)
        if child is None:  # a server that cannot fork now will not later: fresh processes from here
            with self._lock:
                self._servers[key] = None
            server.close()
        return child

    def _start(self, python: str, env: Mapping[str, str], n: int) -> _Server | None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            with (self.workdir / f"forkserver-{n}.log").open("wb") as log, reaper.spawning() as started:
                proc = subprocess.Popen(
                    [python, "-m", "perfcheck.runner.forkserver", str(theirs.fileno())],
                    cwd=self.workdir,
                    env={**{k: v for k, v in env.items() if k not in LAZY_ENV}, **NVML_CHECK},
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    pass_fds=(theirs.fileno(),),
                )
                started(proc.pid)
        except OSError:
            ours.close()
            return None
        finally:
            theirs.close()
        server = _Server(proc, ours)
        ours.settimeout(READY_TIMEOUT_S)
        try:
            ready = ours.recv(64) == b"ready"
        except OSError:
            ready = False
        if not ready:  # it could not import, or refused (its log says why): probes start fresh
            server.close()
            return None
        ours.settimeout(None)
        return server

    def close(self) -> None:
        with self._lock:
            servers, self._servers = [s for s in self._servers.values() if s is not None], {}
        for server in servers:
            server.close()


# --- the server process -------------------------------------------------------------------------


@dataclass(frozen=True)
class _Job:
    """What a forked child runs, once it has left the server's loop."""

    module: str
    args: list[str]
    cwd: str
    env: dict[str, str]
    log_fd: int
    result_fd: int
    sandbox: str | None = None  # perfcheck/runner/sandbox.py's view, as JSON


def _preimport() -> str | None:
    """Import what every probe process imports; the reason not to serve, if any. Besides torch,
    Dynamo and export: what a process's first torch.compile imports on the way, whatever the
    backend (aot_eager too goes through Inductor's modules), about 0.9 s of a 1.3 s first compile."""
    import torch
    import torch._dynamo
    import torch._dynamo.backends.common
    import torch._functorch.aot_autograd
    import torch._inductor.compile_fx
    import torch.export

    from perfcheck.runner import timing_worker, worker  # noqa: F401
    from perfcheck.runner.probes.lookup import load_builtin

    load_builtin()
    if torch.cuda.is_initialized() or _cuda_driver_initialized():
        return "CUDA was initialized while importing; a child forked now could not use CUDA"
    # The CPU compile not where a GPU is: on the H200 it initialized CUDA's driver
    # (bench/cuda_fork.py) and took 48-57 s, which every probe waits for.
    if not torch.cuda.device_count():  # through NVML (NVML_CHECK), which initializes nothing
        _headers_of_the_server()
        _first_compile()
    _release_nvml()
    # Checked again: where NVML cannot answer, the count asks CUDA itself.
    if _cuda_driver_initialized():
        return "CUDA was initialized while warming up; a child forked now could not use CUDA"
    return None


def _first_compile() -> None:
    """Pay what a process's first Inductor compile pays whatever the code, once, for every child.

    On a CPU most of a first compile is this: Inductor checks which vector ISAs the compiler and
    machine support by building and loading a test library per ISA (each load a Python process of
    its own) and runs the C++ toolchain for the first time; measured, 8.7 of a 10.5 s first compile
    of the demo's classifier. The results are kept in the process's memory, so a child inherits
    them. Kept fork-safe: one thread (no OpenMP team, no compile thread pool; both restored to
    decide afresh in the child) and a cache folder of the server's own, deleted after; anything
    that goes wrong leaves the children to pay it themselves, as before."""

    import torch
    import torch._dynamo
    import torch._inductor.config as inductor_config

    threads, compile_threads = torch.get_num_threads(), inductor_config.compile_threads
    old_cache = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    with tempfile.TemporaryDirectory(prefix="perfcheck-forkserver-") as cache:
        try:
            os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache
            torch.set_num_threads(1)
            inductor_config.compile_threads = 1
            compiled = torch.compile(lambda x: torch.relu(x @ x + 1.0), backend="inductor")
            compiled(torch.ones(8, 8))
        except Exception as err:
            print(f"perfcheck fork server: no first compile ({type(err).__name__}: {err})", file=sys.stderr)
        finally:
            torch._dynamo.reset()
            inductor_config.compile_threads = compile_threads
            torch.set_num_threads(threads)
            if old_cache is None:
                os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)
            else:
                os.environ["TORCHINDUCTOR_CACHE_DIR"] = old_cache


CUDA_ERROR_NOT_INITIALIZED = 3
NVML_MAX_RELEASES = 64


def _release_nvml() -> None:
    """Shut NVML down where counting devices through it left it initialized (torch initializes it
    once per count and never shuts it down): a child closes every descriptor it inherits, NVML's
    on the GPU's device files among them, and an NVML that believes itself initialized over
    closed (or reused) descriptors answers a child's next device count wrongly; the H200's
    forked Llama probes failed with 'Invalid device id'. Shut down, a child's NVML starts afresh.
    ``nvmlShutdown`` undoes one ``nvmlInit`` and fails once none is left."""
    try:
        if "libnvidia-ml.so" not in Path("/proc/self/maps").read_text():
            return
        nvml = ctypes.CDLL("libnvidia-ml.so.1")  # the library already loaded: no second copy
        for _ in range(NVML_MAX_RELEASES):
            if nvml.nvmlShutdown() != 0:
                break
    except (OSError, AttributeError):
        return


def _cuda_driver_initialized() -> bool:
    """Whether CUDA's driver was initialized (``cuInit``) in this process: a child forked after that
    cannot use CUDA. Loaded is not initialized: some images load libcuda at interpreter start (a
    ``.pth`` file of numba's does) and never call into it; a driver call made before ``cuInit``
    answers CUDA_ERROR_NOT_INITIALIZED and initializes nothing. Unsure is initialized."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return True
    if "libcuda.so" not in maps:
        return False
    try:
        driver = ctypes.CDLL("libcuda.so.1")  # the library already loaded: no second copy
        context = ctypes.c_void_p()
        return bool(driver.cuCtxGetCurrent(ctypes.byref(context)) != CUDA_ERROR_NOT_INITIALIZED)
    except (OSError, AttributeError):
        return True


def _request(data: bytes) -> dict[str, Any] | None:
    try:
        request = json.loads(data)
    except ValueError:
        return None
    ok = (
        isinstance(request, dict)
        and isinstance(request.get("module"), str)
        and isinstance(request.get("cwd"), str)
        and isinstance(request.get("args"), list)
        and all(isinstance(a, str) for a in request["args"])
        and isinstance(request.get("env"), dict)
        and all(isinstance(k, str) and isinstance(v, str) for k, v in request["env"].items())
        and isinstance(request.get("sandbox", ""), str)
    )
    return request if ok else None


def _serve(control: socket.socket) -> _Job | None:
    """Fork a child per request until the control socket closes (None); in a child, its job."""
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.set_wakeup_fd(wake_w)
    replies: dict[int, socket.socket] = {}
    try:
        with selectors.DefaultSelector() as selector:
            selector.register(control, selectors.EVENT_READ, "request")
            selector.register(wake_r, selectors.EVENT_READ, "child")
            while True:
                for key, _ in selector.select():
                    if key.data == "child":
                        with contextlib.suppress(BlockingIOError):
                            os.read(wake_r, 4096)
                        _reap(replies)
                        continue
                    message, fds, _, _ = socket.recv_fds(control, MAX_MESSAGE, 3)
                    if not message:
                        return None  # the orchestrator is done
                    if len(fds) != 3:
                        for fd in fds:
                            os.close(fd)
                        continue
                    log_fd, result_fd, reply_fd = fds
                    reply = socket.socket(fileno=reply_fd)
                    request = _request(message)
                    if request is None:
                        reply.send(b"refused")
                        reply.close()
                        os.close(log_fd)
                        os.close(result_fd)
                        continue
                    sys.stdout.flush()
                    sys.stderr.flush()
                    pid = os.fork()
                    if pid == 0:  # the child leaves the loop; every socket of the server closes
                        reply.close()
                        for other in replies.values():
                            other.close()
                        control.close()
                        return _Job(
                            request["module"],
                            request["args"],
                            request["cwd"],
                            request["env"],
                            log_fd,
                            result_fd,
                            request.get("sandbox"),
                        )
                    os.close(log_fd)
                    os.close(result_fd)
                    with contextlib.suppress(OSError):
                        reply.send(f"pid {pid}".encode())
                    replies[pid] = reply
    finally:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        os.close(wake_r)
        os.close(wake_w)


def _reap(replies: dict[int, socket.socket]) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        reply = replies.pop(pid, None)
        if reply is not None:
            with contextlib.suppress(OSError):  # the orchestrator may have stopped waiting
                reply.send(f"exit {os.waitstatus_to_exitcode(status)}".encode())
            reply.close()


def _run(job: _Job) -> int:
    """In the child: become the process ``python -m job.module *job.args`` would have been."""
    import runpy

    os.setsid()
    # Above every number that will be taken, then into place: stdin, stdout, stderr, the result.
    null = os.open(os.devnull, os.O_RDONLY)
    high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 100) for fd in (null, job.log_fd, job.result_fd)]
    stdin, log, result = high
    for fd, target in ((stdin, 0), (log, 1), (log, 2), (result, RESULT_FD)):
        os.dup2(fd, target)
    for name in os.listdir("/proc/self/fd"):
        if int(name) > RESULT_FD:
            with contextlib.suppress(OSError):
                os.close(int(name))
    if job.sandbox is not None:
        # Before anything of the job's: this process stays outside as the sandbox's relay, and the
        # job runs in its first process (one thread here: the server's loop thread only).
        try:
            view = sandbox.View.from_json(job.sandbox)
            headers = _server_headers()
            if headers is not None:
                view = dataclasses.replace(view, visible=(*view.visible, headers))
            sandbox.enter(view)
        except (sandbox.Unavailable, OSError, ValueError, KeyError) as err:
            print(f"perfcheck sandbox: {err}", file=sys.stderr)
            os._exit(125)
        if headers is not None:
            _own_headers()
    os.chdir(job.cwd)
    os.environ.clear()
    os.environ.update(job.env)
    if job.sandbox is not None:
        os.environ.update(sandbox.INSIDE_ENV)
    sys.argv = ["", *job.args]
    # As ``-m`` would: the module runs afresh as __main__ (its imports are the server's).
    sys.modules.pop(job.module, None)
    runpy.run_module(job.module, run_name="__main__", alter_sys=True)
    return 0


# Beside torch's own folder of precompiled headers (``default_cache_dir()/precompiled_headers``),
# never that folder itself: see ``_headers_of_the_server``.
SERVER_HEADERS = "perfcheck-fork-server-headers"


def _header_folders(codecache: Any, folder: str) -> None:
    setattr(codecache, "_HEADER_DIR", folder)  # noqa: B010 (torch's private module globals)
    setattr(codecache, "_HEADER_LOCK_DIR", os.path.join(folder, "locks"))  # noqa: B010


def _headers_of_the_server() -> None:
    """The server's C++ precompiled headers (built by its first compile, used by every child) go
    to a folder of perfcheck's beside torch's default one. A sandboxed child sees the server's
    folder read-only at its path (its compiles name the headers in it), so were it torch's
    default folder, every fresh process of that side (torchrun's ranks, a compile-latency run)
    would find its default folder read-only and fail on the first lock Inductor takes there
    (issue 40: every compiled DDP variant failed on both sides). Kept across reviews, as torch
    keeps its own: a header is keyed by its compiler, flags and preprocessed content."""
    codecache = sys.modules.get("torch._inductor.codecache")
    if codecache is None or not hasattr(codecache, "_HEADER_DIR"):
        return
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    _header_folders(codecache, os.path.join(default_cache_dir(), SERVER_HEADERS))


def _server_headers() -> str | None:
    """The folder of the C++ precompiled headers Inductor built or found for the server's first
    compile, where the server has one: a child keeps their paths in memory (``_precompile_header``
    is cached for the life of a process), so a sandboxed child sees that folder, read-only."""
    codecache = sys.modules.get("torch._inductor.codecache")
    folder = getattr(codecache, "_HEADER_DIR", None)
    return folder if isinstance(folder, str) and os.path.isdir(folder) else None


def _own_headers() -> None:
    """In a sandboxed child: a header of other flags than the server's is built where a fresh
    process of its side builds one, torch's default folder in the side's own /tmp, not in the
    server's folder, which the child sees read-only. A header is code compiled into every kernel,
    so one side's processes never write a header the other side reads."""
    codecache = sys.modules.get("torch._inductor.codecache")
    if codecache is None or not hasattr(codecache, "_HEADER_DIR"):
        return
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    _header_folders(codecache, os.path.join(default_cache_dir(), "precompiled_headers"))


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or not args[0].isdigit():
        print("usage: python -m perfcheck.runner.forkserver FD (a SOCK_SEQPACKET socket)", file=sys.stderr)
        return 2
    control = socket.socket(fileno=int(args[0]))
    refusal = _preimport()
    if refusal is not None:
        print(f"perfcheck fork server: not serving: {refusal}", file=sys.stderr)
        return 1
    control.send(b"ready")
    job = _serve(control)
    return 0 if job is None else _run(job)


if __name__ == "__main__":
    sys.exit(main())
