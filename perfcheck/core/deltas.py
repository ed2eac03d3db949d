"""How a change is written, everywhere a table or a message shows one: signed, with its unit,
its number formatted as every figure is (perfcheck/core/markdown.py ``figure``)."""

from __future__ import annotations

from perfcheck.core.markdown import Figure, figure


def signed_pct(x: float, digits: int = 1) -> str:
    """A change already in percent: ``+3.2 %``."""
    return figure(Figure(x, "%", digits, signed=True))


def relative(base: float | None, head: float | None, digits: int = 1, missing: str = "—") -> str:
    """head against base in percent; from zero, the plain difference (no percentage of nothing)."""
    if base is None or head is None:
        return missing
    if base == 0:
        return missing if head == 0 else f"{head - base:+g}"
    return signed_pct(100 * (head - base) / base, digits)


def interval(change_pct: float, low_pct: float, high_pct: float, digits: int = 1) -> str:
    """A change with its confidence interval: ``+3.2 % (+1.0 … +5.4)``."""
    low, high = (figure(Figure(x, places=digits, signed=True)) for x in (low_pct, high_pct))
    return f"{signed_pct(change_pct, digits)} ({low} … {high})"


def count(base: int, head: int, unit: str = "") -> str:
    """A change in a count: ``+2`` (``+2 breaks``, ``+1 break``), or ``=`` when there is none."""
    if head == base:
        return "="
    one = abs(head - base) == 1 and unit.endswith("s")
    return figure(Figure(head - base, unit[:-1] if one else unit, signed=True))
