"""How a worker process ends: as ``sys.exit(main())`` would, less the interpreter's teardown.

A process with torch, Dynamo and Inductor loaded spends about a second of CPU after its last line
on teardown, freeing every module's objects one by one and then torch's C++ statics: importing
them and leaving costs 3.3 s of CPU, against 2.35 s when the process ends with ``os._exit``
(``/usr/bin/time python -c "import torch, torch._dynamo, torch._inductor.compile_fx"``). That is
as much as many probes' own work, in every probe process of every review. Nothing the teardown does
is the process's result. So: the exit code as ``sys.exit`` reads it, an uncaught exception's
traceback and exit 1 as the interpreter gives them, atexit handlers run (logging's flush among
them, which TORCH_LOGS and TORCH_TRACE write through), stdio flushed, then ``os._exit``. A thread
the workload left running is not waited for: the result is written, and a thread must not turn
a finished probe into a timeout.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
from collections.abc import Callable
from typing import NoReturn


def _status(code: object) -> int:
    """What the interpreter would exit with for ``sys.exit(code)``."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def run_and_end(main: Callable[[], int | None]) -> NoReturn:
    try:
        status = _status(main())
    except SystemExit as stop:
        status = _status(stop.code)
    except Exception:
        sys.excepthook(*sys.exc_info())
        status = 1
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(status)
