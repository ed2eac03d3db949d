"""Rows of a summary regrouped under another key: HolisticTraceAnalysis's short kernel name, so
that a diff's rows are the rows of HTA's ``TraceDiff.compare_traces(..., use_short_name=True)``.

Grouping happens after the pass over the trace, on the per-name totals: the breakdown and the
overlap do not depend on names, and the few thousand distinct names of a trace cost nothing to
shorten, where shortening per event would.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import msgspec

from perfcheck.core.trace.names import hta_short_name
from perfcheck.core.trace.summary import OpTotal, TraceSummary

HTA_SHORT = "hta-short"


def regroup(ops: Iterable[OpTotal], key: Callable[[str], str]) -> tuple[OpTotal, ...]:
    """Rows added up by ``key(name)``: counts and times summed, ``variants`` the full names in
    each row. A row takes the kind of its largest member: names that shorten alike are nearly
    always of one kind, and a row needs one."""
    groups: dict[str, list[OpTotal]] = {}
    # Largest first, so each group's first member gives its kind and the sums run in a fixed order.
    for op in sorted(ops, key=lambda o: (-o.total_us, o.name)):
        groups.setdefault(key(op.name), []).append(op)
    rows = [
        OpTotal(
            name=name,
            kind=members[0].kind,
            count=sum(m.count for m in members),
            total_us=sum(m.total_us for m in members),
            variants=sum(m.variants for m in members),
        )
        for name, members in groups.items()
    ]
    return tuple(sorted(rows, key=lambda t: (-t.total_us, t.name)))


def by_hta_short_name(summary: TraceSummary) -> TraceSummary:
    """``summary`` with its kernels and CPU ops keyed by HTA's short name (``hta_short_name``)."""
    if summary.naming == HTA_SHORT:
        return summary
    return msgspec.structs.replace(
        summary,
        kernels=regroup(summary.kernels, hta_short_name),
        cpu_ops=regroup(summary.cpu_ops, hta_short_name),
        naming=HTA_SHORT,
    )
