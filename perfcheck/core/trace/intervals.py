"""Time intervals on one timeline: merging, covered length and the length two sets share."""

from __future__ import annotations

from collections.abc import Iterable

Interval = tuple[float, float]


def merge(intervals: Iterable[Interval]) -> list[Interval]:
    """Sorted, disjoint intervals covering the same time; touching intervals become one."""
    out: list[Interval] = []
    for start, end in sorted(intervals):
        if out and start <= out[-1][1]:
            if end > out[-1][1]:
                out[-1] = (out[-1][0], end)
        else:
            out.append((start, end))
    return out


def covered(merged: list[Interval]) -> float:
    """Total length of disjoint intervals."""
    return sum(end - start for start, end in merged)


def shared(a: list[Interval], b: list[Interval]) -> float:
    """Length of time inside both of two sorted, disjoint interval lists."""
    total, i, j = 0.0, 0, 0
    while i < len(a) and j < len(b):
        start = max(a[i][0], b[j][0])
        end = min(a[i][1], b[j][1])
        if end > start:
            total += end - start
        # Advance whichever ends first: it cannot meet anything later in the other list.
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total
