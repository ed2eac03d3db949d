"""Self (exclusive) time of nested CPU ops: an op's duration less the time of the ops inside it.

CPU ops nest (``aten::linear`` around ``aten::addmm``), so inclusive times double count and a
change in ``addmm`` would show on ``linear`` too. Self times add up to the time the thread spent
in ops, which makes them a sound per-op share of the step, as kernels are on a GPU.
"""

from __future__ import annotations

from collections.abc import Sequence


def self_times(threads: Sequence[int], starts: Sequence[float], durations: Sequence[float]) -> list[float]:
    """The self time of each op, given parallel sequences of its thread (a number per thread),
    start and duration."""
    own = [d if d > 0.0 else 0.0 for d in durations]
    # By thread, then start, the longer (enclosing) op first; sorting plain tuples keeps every
    # comparison in C, which matters on traces of a hundred thousand ops.
    order = sorted(zip(threads, starts, [-d for d in durations], range(len(own)), strict=True))
    stack: list[tuple[int, float]] = []  # (op index, end) of the ops enclosing the current one
    thread = -1
    for op_thread, start, minus_duration, i in order:
        end = start - minus_duration
        if op_thread != thread:
            thread, stack = op_thread, []
        while stack and stack[-1][1] <= start:
            stack.pop()
        if stack:
            parent, parent_end = stack[-1]
            # Profiler clocks can put a child's end a hair past its parent's: clip it.
            inside = (end if end < parent_end else parent_end) - start
            if inside > 0.0:
                own[parent] -= inside
        stack.append((i, end))
    return [t if t > 0.0 else 0.0 for t in own]
