"""The Pareto front of measured points: none of its members is beaten on every objective at once.

Pure and torch-free. Every objective is minimised (step time, peak memory, compile latency).
Equal points do not dominate each other, so duplicates on the front all stay on it.
"""

from __future__ import annotations

from collections.abc import Sequence

Objectives = Sequence[float]


def dominates(a: Objectives, b: Objectives) -> bool:
    """``a`` is no worse than ``b`` anywhere and strictly better somewhere."""
    if len(a) != len(b):
        raise ValueError(f"points of different dimension: {len(a)} and {len(b)}")
    return all(x <= y for x, y in zip(a, b, strict=True)) and any(x < y for x, y in zip(a, b, strict=True))


def pareto_front(points: Sequence[Objectives]) -> list[int]:
    """Indices of the non-dominated points, in input order."""
    # Quadratic, which is fine: a sweep has tens of points, and this keeps ties obvious.
    return [
        i for i, p in enumerate(points) if not any(dominates(q, p) for j, q in enumerate(points) if j != i)
    ]
