"""Probe processes forked from a parent that has imported torch once: ``python -m
perfcheck.runner.process.forkserver FD``, and the orchestrator's side of it (``ForkServers``).

Why: a probe process spends about 4 s of CPU importing torch and Dynamo before its own work starts,
and a review starts several per side. A fork server imports them once and forks one child per probe.

What a child keeps of a fresh ``python -m MODULE ARGS``: a process and a session of its own; the
environment, working directory, log and result descriptor asked for; ``MODULE`` run as
``__main__``; the interpreter's own ending (exit code, atexit handlers, a traceback for an uncaught
exception). What it shares with its siblings: everything the server imported, and the memory layout
that came with it. That is why per-side probes are what is forked: timing and compile-latency
processes measure what a process costs, and each pair of them must be an independent draw
(perfcheck/runner/timing/pairs.py, perfcheck/runner/latency/runs.py); timing workers fork only on a
CPU (``times_forked``), where the gate's A/A trials were measured with forked workers.

Safety: a server runs no PR code (it imports torch and perfcheck before any tree is read); a child
keeps none of the server's descriptors (with them it could ask for processes or forge a sibling's
exit); a server in which CUDA got initialized refuses to serve, since CUDA cannot work in a child
forked after that (the server counts devices through NVML for that reason: ``serves``); anything
that goes wrong with a server sends its probes back to fresh processes, which is how they ran
before. A request may carry a sandbox (perfcheck/runner/process/sandbox.py): the child enters it
before anything of the job runs, so the server and the orchestrator are outside the child's PID
namespace, out of its reach.

Protocol, over AF_UNIX SOCK_SEQPACKET sockets (a message is one datagram): the server sends
``ready`` on its control socket once imported. A request is one message, JSON ``{module, args, cwd,
env}``, carrying three descriptors: the child's log, its result channel (``RESULT_FD`` in the child)
and a reply socket, on which the server answers ``pid N`` once forked and ``exit C`` (as
``subprocess`` reports it: negative for a signal) once it has reaped the child. A server ends when
its control socket closes. Linux only; elsewhere every probe starts fresh.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perfcheck.runner.process import reaper, sandbox

if TYPE_CHECKING:
    from perfcheck.spec import Walls
from perfcheck.runner.process.forkserver_warmup import own_headers, preimport, server_headers

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
# The server's argument for children that compile with no Inductor (aot_eager, eager, export):
# it then skips Inductor's first compile, about 2 s with its warm-up cache and 17 s without.
NO_INDUCTOR = "--no-inductor"
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
        self._servers: dict[tuple[str, bool, tuple[tuple[str, str], ...]], _Server | None] = {}
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
        inductor: bool = True,
    ) -> Child | None:
        """A child running ``python -m module *args``, behind ``walls`` where given (the child
        enters them before anything of the module runs); None: start it fresh. ``inductor``: the
        child may compile with Inductor (its server warms Inductor up; one that need not, does not)."""
        if not enabled():
            return None
        reaper.check_stopping()
        differ = LAZY_ENV | VOLATILE_ENV
        key = (python, inductor, tuple(sorted((k, v) for k, v in env.items() if k not in differ)))
        with self._lock:  # one start per key, even with probes asking from several threads
            if key not in self._servers:
                self._end_idle(keep=MAX_SERVERS - 1)
                self._servers[key] = self._start(python, env, self._started, inductor)
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

    def _start(self, python: str, env: Mapping[str, str], n: int, inductor: bool) -> _Server | None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            with (self.workdir / f"forkserver-{n}.log").open("wb") as log, reaper.spawning() as started:
                proc = subprocess.Popen(
                    [
                        python,
                        "-m",
                        "perfcheck.runner.process.forkserver",
                        str(theirs.fileno()),
                        *([] if inductor else [NO_INDUCTOR]),
                    ],
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
    sandbox: str | None = None  # perfcheck/runner/process/sandbox.py's view, as JSON


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
            headers = server_headers()
            if headers is not None:
                view = dataclasses.replace(view, visible=(*view.visible, headers))
            sandbox.enter(view)
        except (sandbox.Unavailable, OSError, ValueError, KeyError) as err:
            print(f"perfcheck sandbox: {err}", file=sys.stderr)
            os._exit(125)
        if headers is not None:
            own_headers()
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


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) not in (1, 2) or not args[0].isdigit() or args[1:] not in ([], [NO_INDUCTOR]):
        print(
            f"usage: python -m perfcheck.runner.process.forkserver FD [{NO_INDUCTOR}] "
            f"(FD: a SOCK_SEQPACKET socket; {NO_INDUCTOR}: its children compile with no Inductor, "
            "so it makes no first compile)",
            file=sys.stderr,
        )
        return 2
    control = socket.socket(fileno=int(args[0]))
    refusal = preimport(inductor=NO_INDUCTOR not in args)
    if refusal is not None:
        print(f"perfcheck fork server: not serving: {refusal}", file=sys.stderr)
        return 1
    control.send(b"ready")
    job = _serve(control)
    return 0 if job is None else _run(job)


if __name__ == "__main__":
    sys.exit(main())
