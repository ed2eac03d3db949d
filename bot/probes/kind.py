"""What a probe is to the torch-free side: one descriptor per probe, in one registry.

A probe's descriptor names it, says when it runs, and carries the two pure functions the review
needs from it: ``compare`` (base and head results and the config -> findings, reasons the verdict
is inconclusive, and for the timing probe its timing change) and ``rows`` (its lines of the
workload table). The runner side registers only the function that runs it
(``runner/probes/base.py``). Adding a probe touches its own files and one registry line.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from perfcheck.config import Config
from perfcheck.schema import Finding, ProbeResult, TimingChange, WorkloadReview


@dataclass(frozen=True)
class Row:
    """One line of a workload's table: a metric, base, head and the change."""

    metric: str
    base: str
    head: str
    delta: str


@dataclass(frozen=True)
class Compared:
    """What comparing one probe's base and head results found."""

    findings: list[Finding] = field(default_factory=list)
    inconclusive: list[str] = field(default_factory=list)  # why the verdict cannot be decided
    timing: TimingChange | None = None


Compare = Callable[[str, ProbeResult, ProbeResult, Config], Compared]
Rows = Callable[[ProbeResult | None, ProbeResult | None, WorkloadReview], list[Row]]


@dataclass(frozen=True)
class ProbeKind:
    name: str
    summary: str  # one line, for --help and the docs
    default: bool = False  # runs when neither --probes nor the workload's `probes` name any
    paired: bool = False  # base and head measured together, after the per-side probes
    compare: Compare | None = None
    rows: Rows | None = None
    # The statuses both sides must have for ``compare`` to run (export compares failures too).
    compared: tuple[str, ...] = ("ok",)


def status_cell(r: ProbeResult | None) -> str | None:
    """A table cell for a probe that did not finish ("crashed", "—" when it did not run), or None."""
    if r is None:
        return "—"
    return None if r.status == "ok" else r.status
