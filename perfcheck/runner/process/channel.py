"""How a probe process hands its result back: through a descriptor it inherits, never a path.

The orchestrator opens an anonymous temporary file (unlinked: no name on disk to find), passes
its descriptor to the probe process, and reads it after the process has ended and its orphans
are reaped. A workload that writes a result file of its own and exits has written nothing the
orchestrator reads: the probe ends without a result and is reported crashed. Torch-free.
"""

from __future__ import annotations

import os
import tempfile
from typing import IO

PREFIX = "fd:"
# A result larger than this is not read: untrusted output is bounded before it is parsed.
MAX_RESULT_BYTES = 64 * 1024 * 1024


def open_channel() -> IO[bytes]:
    """An anonymous file for one result: give the process ``argument(f)`` and ``f.fileno()``."""
    return tempfile.TemporaryFile()


def argument(channel: IO[bytes]) -> str:
    return argument_fd(channel.fileno())


def argument_fd(fd: int) -> str:
    return f"{PREFIX}{fd}"


def read_back(channel: IO[bytes]) -> bytes | None:
    """What the process wrote; None when it wrote more than MAX_RESULT_BYTES."""
    channel.seek(0)
    data = channel.read(MAX_RESULT_BYTES + 1)
    return None if len(data) > MAX_RESULT_BYTES else data


def write_result(target: str, text: str) -> None:
    """In the probe process: ``target`` is ``fd:N`` from the orchestrator (or a path, run by hand)."""
    data = text.encode()
    if target.startswith(PREFIX):
        fd = int(target[len(PREFIX) :])
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.close(fd)
        return
    with open(target, "wb") as f:
        f.write(data)
