"""Graph breaks against control-flow nesting depth (the design's nesting-depth × split-point
mapping): each break's depth is measured by the probe (GraphBreak.nesting_depth, computed from
the side's own source in the probe process); here it is only counted, per frame and per workload.

Torch-free, and it never parses code: a recorded result is untrusted data, and its depths are
read as numbers or not at all.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from perfcheck.measures import CompileMetrics, GraphBreak
from perfcheck.schema import ProbeResult, Review, probe_metrics

BUCKETS: tuple[str, ...] = ("0", "1", "2", "3+")
UNKNOWN = "unknown"
_RESUME = re.compile(r"torch_dynamo_resume_in_(\w+?)_at_\d+$")


def bucket(depth: object) -> str:
    """A depth's column: 0, 1, 2 or 3+; ``unknown`` for anything that is no depth (a result from
    before perfcheck measured it, a file the probe could not read, a stored value of another type)."""
    if not isinstance(depth, int) or isinstance(depth, bool) or depth < 0:
        return UNKNOWN
    return BUCKETS[min(depth, len(BUCKETS) - 1)]


def heatmap_row(depth: object) -> str:
    """The heatmap's row of a break at ``depth``: ``depth 0`` … ``depth 3+``, ``depth unknown``
    (they sort in that order)."""
    return f"depth {bucket(depth)}"


def evidence_depth(evidence: Mapping[str, Any]) -> int | None:
    """A finding's nesting depth, where its evidence holds one (it is untrusted, loosely typed JSON)."""
    depth = evidence.get("nesting_depth")
    return depth if bucket(depth) != UNKNOWN else None


def words(depth: int | None, kinds: Sequence[str]) -> str:
    """``inside 2 nested blocks: for › if``, ``inside 1 block: with``; empty at the function's top
    level (0) and where the depth is unknown."""
    if not depth:
        return ""
    blocks = "1 block" if depth == 1 else f"{depth} nested blocks"
    return f"inside {blocks}: {' › '.join(kinds)}"


def frame_name(gb: GraphBreak) -> tuple[str, str]:
    """(file, function) of the frame a break is in; a resume function of Dynamo's is the function
    it resumes."""
    loc = gb.location
    if loc is None:
        return ("?", "?")
    match = _RESUME.match(loc.function or "")
    return (loc.path, match.group(1) if match else (loc.function or "?"))


@dataclass(frozen=True)
class FrameRow:
    """One frame of one workload: its break lines per depth column, base and head."""

    workload: str
    path: str
    function: str
    base: dict[str, int]
    head: dict[str, int]

    def cell(self, column: str) -> str:
        """``2``, or ``1 → 2`` where head differs from base; ``—`` where neither has one."""
        b, h = self.base.get(column, 0), self.head.get(column, 0)
        if b == h:
            return str(h) if h else "—"
        return f"{b} → {h}"


@dataclass(frozen=True)
class DepthTable:
    columns: tuple[str, ...]
    rows: tuple[FrameRow, ...]


def _breaks(results: Sequence[ProbeResult]) -> list[GraphBreak] | None:
    m = next((c for r in results if (c := probe_metrics(r, CompileMetrics)) is not None), None)
    return m.graph_breaks if m is not None else None


def _counts(breaks: Sequence[GraphBreak]) -> dict[tuple[str, str], dict[str, int]]:
    out: dict[tuple[str, str], dict[str, int]] = {}
    for gb in breaks:
        column = bucket(gb.nesting_depth)
        per = out.setdefault(frame_name(gb), {})
        per[column] = per.get(column, 0) + 1
    return out


def depth_table(review: Review) -> DepthTable | None:
    """Per workload and frame, the lines the compile probe found a graph break at, by nesting
    depth, base and head. Break lines, not Dynamo's counts: a break inside a loop is one line
    however many iterations took it. None where no break of the review has a known depth (a
    result recorded before perfcheck measured it): no table of unknowns."""
    rows: list[FrameRow] = []
    known = False
    for wl in review.workloads:
        base, head = _breaks(wl.base) or [], _breaks(wl.head) or []
        known = known or any(gb.nesting_depth is not None for gb in [*base, *head])
        b, h = _counts(base), _counts(head)
        for key in sorted({*b, *h}):
            rows.append(FrameRow(wl.name, key[0], key[1], b.get(key, {}), h.get(key, {})))
    if not known:
        return None
    unknown = any(UNKNOWN in (*r.base, *r.head) for r in rows)
    return DepthTable(BUCKETS + ((UNKNOWN,) if unknown else ()), tuple(rows))
