"""No process a probe starts outlives it. Torch-free; Linux.

A probe's process group is killed when it times out, but PR code can leave its group: a daemon
that calls ``setsid`` and forks once more is nobody's child and could rewrite results after the
probe has been judged. The orchestrator therefore makes itself a *child subreaper*
(``prctl(PR_SET_CHILD_SUBREAPER)``): every process orphaned below it is re-parented to it instead
of to init, whatever sessions or groups it made. A child of the orchestrator that it is not
waiting for, in a session other than its own (probe processes get sessions of their own, and an
orphan can never join the orchestrator's), is an orphan of a probe: ``reap_orphans`` kills and
collects it.

Where prctl is not available (not Linux, or a sandbox that refuses it) ``become_subreaper``
returns False and only process groups are killed; ``guarantee`` says which holds.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

PR_SET_CHILD_SUBREAPER = 36

_lock = threading.Lock()
_started: set[int] = set()  # processes this orchestrator started and still waits for
_subreaper = False
_stopping = False  # set by ``stop_all``: no process starts any more


class Stopping(Exception):
    """The review is being stopped (Ctrl-C, SIGTERM): no process may start."""


def check_stopping() -> None:
    if _stopping:
        raise Stopping("the review is stopping")


def become_subreaper() -> bool:
    """Make this process the subreaper of everything it starts; True when the kernel agreed."""
    global _subreaper
    if _subreaper:
        return True
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        _subreaper = libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        _subreaper = False
    return _subreaper


def guarantee() -> str:
    if _subreaper:
        return "every process a probe starts is ended with it (child subreaper)"
    return "a probe's process group is ended with it; a process that left the group may outlive it"


@contextmanager
def spawning() -> Iterator[Callable[[int], None]]:
    """Start a process inside: the callable marks its pid as ours before any reaping can look.
    Raises Stopping once ``stop_all`` was called."""
    with _lock:
        check_stopping()
        yield _started.add


def finished(pid: int) -> None:
    """``pid`` was waited for: from now on a process of that pid is nobody we started."""
    with _lock:
        _started.discard(pid)


def _children() -> list[tuple[int, int]]:
    """(pid, session id) of every child of this process."""
    me = os.getpid()
    out: list[tuple[int, int]] = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return out
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as f:
                stat = f.read()
        except OSError:
            continue  # gone meanwhile
        # pid (comm) state ppid pgrp session ...: comm may hold spaces and parentheses.
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 3 and fields[1].isdigit() and int(fields[1]) == me and fields[3].isdigit():
            out.append((int(entry), int(fields[3])))
    return out


def reap_orphans() -> list[int]:
    """Kill and collect every orphan of a probe that was re-parented to this process."""
    if not _subreaper:
        return []
    mine = os.getsid(0)
    killed = []
    with _lock:
        for pid, session in _children():
            if pid in _started or session == mine:
                continue
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
    for pid in killed:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)
    return killed


def stop_all(rounds: int = 20) -> int:
    """End every process this one started and everything below it (Ctrl-C, SIGTERM): from now on
    no process starts (``check_stopping``), each child's process group is killed (a probe, a
    timing worker, a fork server, a sandbox's relay and with it the sandbox), and what that
    re-parents here (a fork server's children, a probe's orphans) is killed in the next round,
    until no child is left. Safe in a signal handler: it takes no lock. The number killed."""
    global _stopping
    _stopping = True
    killed = 0
    for _ in range(rounds):
        children = _children()
        if not children:
            break
        for pid, _session in children:
            for kill in (os.killpg, os.kill):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    kill(pid, signal.SIGKILL)
            killed += 1
        for pid, _session in children:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
    return killed
