"""Every graph break Dynamo records, read from its own `graph_breaks` log as it compiles.

``torch._dynamo.explain`` misses breaks that happen at the very start of a frame (a `print` as the
first statement), in generators or on unsupported pytree types: it reports one graph and no
reason while Dynamo's `graph_break` counter counts the break. Dynamo logs each break it takes on
its `graph_breaks` artifact logger ("Graph break in user code at FILE:LINE", the reason, the user
code traceback; the format its own tests pin), so perfcheck listens there during the compile.
"""

from __future__ import annotations

import contextlib
import logging
import re
import traceback
from collections.abc import Iterator
from dataclasses import dataclass

_AT = re.compile(
    r"^Graph break(?: \(user stack suppressed due to duplicate graph break\))? in user code at (.+):(\d+)$"
)
_FRAME = re.compile(r'^\s*File "(.+)", line (\d+), in (.+)$')
_PREAMBLE = re.compile(r"^Encountered graph break when attempting to trace [^\n]*:\s*\n+", re.S)


@dataclass(frozen=True)
class LoggedBreak:
    reason: str
    stack: list[traceback.FrameSummary]  # outermost first, as Dynamo prints it


def parse(message: str) -> LoggedBreak | None:
    """One record of the graph_breaks log, or None for a line that is no break."""
    lines = message.splitlines()
    if not lines:
        return None
    at = _AT.match(lines[0].strip())
    if at is None:
        return None
    body = "\n".join(lines[1:])
    reason, _, trace = body.partition("\nUser code traceback:")
    reason = _PREAMBLE.sub("", reason.removeprefix("Graph Break Reason: ").strip()).strip()
    stack: list[traceback.FrameSummary] = []
    trace_lines = trace.splitlines()
    for i, line in enumerate(trace_lines):
        m = _FRAME.match(line)
        if m:
            code = trace_lines[i + 1].strip() if i + 1 < len(trace_lines) else None
            stack.append(traceback.FrameSummary(m.group(1), int(m.group(2)), m.group(3).strip(), line=code))
    if not stack:  # the duplicate form carries no traceback: the location line is all there is
        stack.append(traceback.FrameSummary(at.group(1), int(at.group(2)), "?", line=None))
    return LoggedBreak(reason=reason, stack=stack)


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.breaks: list[LoggedBreak] = []

    def emit(self, record: logging.LogRecord) -> None:
        with contextlib.suppress(Exception):  # a log line perfcheck cannot read is not a crash
            got = parse(record.getMessage())
            if got is not None:
                self.breaks.append(got)


def _break_loggers() -> list[logging.Logger]:
    import torch._dynamo  # noqa: F401  (its modules register their graph_breaks loggers)

    names = [n for n in logging.root.manager.loggerDict if n.endswith(".__graph_breaks")]
    return [logging.getLogger(n) for n in sorted(names)]


@contextlib.contextmanager
def recording() -> Iterator[list[LoggedBreak]]:
    """The graph breaks Dynamo logs while the block runs. Listens on the loggers themselves and
    restores their levels: nothing is printed that TORCH_LOGS did not ask for."""
    handler = _Collect()
    loggers = _break_loggers()
    saved = [(lg.level, lg.propagate) for lg in loggers]
    for lg in loggers:
        lg.addHandler(handler)
        if not lg.isEnabledFor(logging.DEBUG):  # TORCH_LOGS did not ask: listen without printing
            lg.setLevel(logging.DEBUG)
            lg.propagate = False
    try:
        yield handler.breaks
    finally:
        for lg, (level, propagate) in zip(loggers, saved, strict=True):
            lg.removeHandler(handler)
            lg.setLevel(level)
            lg.propagate = propagate
