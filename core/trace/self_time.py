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
    order = sorted(range(len(starts)), key=lambda i: (threads[i], starts[i], -durations[i]))
    own = [max(d, 0.0) for d in durations]
    stack: list[tuple[int, float]] = []  # (op index, end) of the ops enclosing the current one
    thread = -1
    for i in order:
        start, end = starts[i], starts[i] + durations[i]
        if threads[i] != thread:
            thread, stack = threads[i], []
        while stack and stack[-1][1] <= start:
            stack.pop()
        if stack:
            parent, parent_end = stack[-1]
            # Profiler clocks can put a child's end a hair past its parent's: clip it.
            own[parent] -= max(0.0, min(end, parent_end) - start)
        stack.append((i, end))
    return [max(t, 0.0) for t in own]
