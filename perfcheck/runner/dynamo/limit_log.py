"""Every recompile limit Dynamo hits, read from its own warning as it gives a frame up.

When a frame's guards have failed until its cache holds ``torch._dynamo.config.recompile_limit``
entries (or every region of the code together ``accumulated_recompile_limit``), Dynamo compiles it
no more: it warns once ("torch._dynamo hit config.recompile_limit (8)", the function with its file
and first line, the last guard that failed), counts the hit as an unimplemented construct
(``counters["unimplemented"]``, "Dynamo recompile limit exceeded ... Limit type: recompile_limit")
and marks the code to run only what it already compiled: a call that no cached entry's guards
accept runs eagerly, for the rest of the process. Its counter says which limit and how often; the
warning says which frame, and Dynamo's compile id at that moment (``frame/compile``) how many
compiles of the frame came before. perfcheck listens on the warning during the compile probe's
passes (tests/test_recompile_limit.py checks what it hears against the counter).
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Iterator
from dataclasses import dataclass

# The logger Dynamo warns on (torch/_dynamo/convert_frame.py, ``log.warning("torch._dynamo hit
# config.%s (%s)\n   function: %s\n   last reason: %s\n..."``); torch < 2.6 named the limit
# cache_size_limit.
LOGGER = "torch._dynamo.convert_frame"
_HIT = re.compile(
    r"torch\._dynamo hit config\.(?P<limit>\w+) \((?P<value>\d+)\)\s*\n"
    r"\s*function: '(?P<name>[^']+)' \((?P<file>.+):(?P<line>\d+)\)\s*\n"
    r"\s*last reason: (?P<reason>.*?)(?:\nTo log all|\Z)",
    re.S,
)
# Dynamo's counter of what it could not do; a recompile limit hit is one of its entries.
LIMIT_GB_TYPE = "Dynamo recompile limit exceeded"


@dataclass(frozen=True)
class LimitHit:
    limit: str  # the config's name: recompile_limit or accumulated_recompile_limit
    value: int  # its value when it was hit
    code: tuple[str, str, int]  # the frame's code: its name, file and first line
    reason: str  # the last guard that failed, as Dynamo gives it
    compiles: int | None  # compiles of the frame before the one the limit refused; None: unknown


def parse(message: str) -> LimitHit | None:
    """One warning of Dynamo's, or None where it is not a recompile limit hit."""
    m = _HIT.search(message)
    if m is None:
        return None
    return LimitHit(
        limit=m.group("limit"),
        value=int(m.group("value")),
        code=(m.group("name"), m.group("file"), int(m.group("line"))),
        reason=m.group("reason").strip(),
        compiles=None,
    )


def _compiles_before() -> int | None:
    """How many compiles of the frame Dynamo counted before the one it is refusing: its compile
    id's second number (``[0/2]``: the frame's third). Private names: None where another torch
    spells them otherwise."""
    with contextlib.suppress(Exception):
        from torch._guards import CompileContext

        compile_id = CompileContext.current_compile_id()
        if compile_id is not None and compile_id.frame_compile_id is not None:
            return int(compile_id.frame_compile_id)
    return None


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.hits: list[LimitHit] = []

    def emit(self, record: logging.LogRecord) -> None:
        with contextlib.suppress(Exception):  # a warning perfcheck cannot read is not a crash
            hit = parse(record.getMessage())
            if hit is not None:
                self.hits.append(LimitHit(hit.limit, hit.value, hit.code, hit.reason, _compiles_before()))


@contextlib.contextmanager
def recording() -> Iterator[list[LimitHit]]:
    """The recompile limits Dynamo hits while the block runs. Listens on its logger and restores
    its level: where logging was turned down (TORCH_LOGS), the warning is heard, not printed."""
    handler = _Collect()
    logger = logging.getLogger(LOGGER)
    level, propagate = logger.level, logger.propagate
    logger.addHandler(handler)
    if not logger.isEnabledFor(logging.WARNING):
        logger.setLevel(logging.WARNING)
        logger.propagate = False
    try:
        yield handler.hits
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        logger.propagate = propagate


def counted(counters: dict[str, dict[str, int]]) -> dict[str, int]:
    """Dynamo's own count of recompile limit hits, per limit, from its ``unimplemented`` counter
    (each entry's text ends in its developer context, "Limit type: recompile_limit")."""
    out: dict[str, int] = {}
    for text, n in counters.get("unimplemented", {}).items():
        if not text.startswith(LIMIT_GB_TYPE):
            continue
        m = re.search(r"Limit type: (\w+)", text)
        limit = m.group(1) if m else "?"
        out[limit] = out.get(limit, 0) + n
    return out
