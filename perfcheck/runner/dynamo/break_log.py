"""Every graph break Dynamo records, read from its own `graph_breaks` log as it compiles.

``torch._dynamo.explain`` misses breaks that happen at the very start of a frame (a `print` as the
first statement), in generators or on unsupported pytree types: it reports one graph and no
reason while Dynamo's `graph_break` counter counts the break. Dynamo logs each break it takes on
its `graph_breaks` artifact logger ("Graph break in user code at FILE:LINE", the reason, the user
code traceback; the format its own tests pin), so perfcheck listens there during the compile.
Each record also says which code Dynamo was compiling as it took the break, and whether it had
compiled it before: a break taken only while recompiling the code after another break (a resume
function) follows from that break.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import re
import traceback
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

_AT = re.compile(
    r"^Graph break(?: \(user stack suppressed due to duplicate graph break\))? in user code at (.+):(\d+)$"
)
_FRAME = re.compile(r'^\s*File "(.+)", line (\d+), in (.+)$')
# Dynamo's note when it gives up a frame after a break it cannot resume from.
FELL_BACK = "Failed to handle graph break gracefully"
_PREAMBLE = re.compile(r"^Encountered graph break when attempting to trace [^\n]*:\s*\n+", re.S)


@dataclass(frozen=True)
class LoggedBreak:
    reason: str
    stack: list[traceback.FrameSummary]  # outermost first, as Dynamo prints it
    # The code Dynamo was compiling as it took the break (its name, file and first line: for a
    # resume function, ``torch_dynamo_resume_in_F_at_N``, the code after an earlier break), and
    # whether it had compiled that code before; None where Dynamo's state does not say.
    compiling: tuple[str, str, int] | None = None
    recompiling: bool = False
    # Dynamo's id of that compile (``frame/compile``: ``2/0`` is the first compile of the third
    # frame it met); None where its state does not say.
    compile_id: str | None = None

    @property
    def fell_back(self) -> bool:
        """Dynamo's note that it gave up the frame it was compiling after a break it could not
        handle ("Skipping the function and falling back to eager"): not a break of its own, but
        what one break did to that frame."""
        return self.reason.strip().startswith(FELL_BACK)


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


def _compiling() -> dict[str, Any]:
    """The code Dynamo is compiling now and whether it is a recompile of it, from its own state
    (the translator of the frame it compiles, the compile's id ``frame/compile``); nothing where
    that state is not there (private names: another torch may spell them otherwise)."""
    with contextlib.suppress(Exception):
        from torch._dynamo.symbolic_convert import InstructionTranslator
        from torch._guards import CompileContext

        code = InstructionTranslator.current_tx().f_code
        compile_id = CompileContext.current_compile_id()
        return {
            "compiling": (code.co_name, code.co_filename, code.co_firstlineno),
            "recompiling": bool(compile_id is not None and compile_id.frame_compile_id),
            "compile_id": str(compile_id) if compile_id is not None else None,
        }
    return {}


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.breaks: list[LoggedBreak] = []

    def emit(self, record: logging.LogRecord) -> None:
        with contextlib.suppress(Exception):  # a log line perfcheck cannot read is not a crash
            got = parse(record.getMessage())
            if got is not None:
                self.breaks.append(dataclasses.replace(got, **_compiling()))


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
