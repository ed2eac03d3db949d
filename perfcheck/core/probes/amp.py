"""amp_fp32_fallback: matmul/conv-class work that head leaves in fp32 under autocast, and new
graph breaks at autocast boundaries. Pure functions over two results; no torch.

Ops and breaks are keyed by their source text, not the line number, as graph breaks are in
perfcheck/core/compare.py: a PR that adds lines above an old fp32 matmul moves it without adding one.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Literal

from pydantic import Field

from perfcheck.core.markdown import Compound, Figure
from perfcheck.core.probes.kind import Cell, Compared, ProbeKind, Row, entries_beside, settled, status_cell
from perfcheck.measures import GraphBreak, SourceLocation, Strict
from perfcheck.schema import Finding, ProbeResult, WorkloadReview, probe_metrics
from perfcheck.settings import SettingsView


class AmpOp(Strict):
    op: str = Field(description="ATen op or GPU kernel name")
    dtype: str = Field(description="the dtype it ran in")
    count: int = Field(default=1, ge=1)
    location: SourceLocation | None = None
    source: Literal["graph", "kernel"] = "graph"


class AmpMetrics(Strict):
    dtype: Literal["bf16", "fp16"]
    fp32_ops: list[AmpOp] = Field(default=[], description="matmul/conv-class ops left in fp32 under autocast")
    autocast_breaks: list[GraphBreak] = Field(default=[], description="graph breaks at autocast boundaries")
    low_precision_ops: int = Field(default=0, ge=0, description="matmul/conv-class ops in the low dtype")


MAX_LISTED_OPS = 40


def _where(loc: SourceLocation | None) -> tuple[str, str, str]:
    # Its file, its function's qualified name (two sibling classes can read alike) and its source
    # text, not its line number: a PR that adds lines above it moves it without adding one.
    return (loc.path, loc.function or "", loc.code or str(loc.line)) if loc else ("?", "", "?")


def op_key(op: AmpOp) -> tuple[str, ...]:
    return (op.source, op.op, op.dtype, *_where(op.location))


def break_key(gb: GraphBreak) -> tuple[str, ...]:
    return (gb.break_type, *_where(gb.location))


def _added_ops(base: Iterable[AmpOp], head: Iterable[AmpOp]) -> list[tuple[AmpOp, int]]:
    head = list(head)
    added = Counter({op_key(o): o.count for o in head}) - Counter({op_key(o): o.count for o in base})
    return [(o, added[op_key(o)]) for o in head if added[op_key(o)]]


def describe_op(op: AmpOp) -> str:
    where = ""
    if op.location is not None:
        where = f" at {op.location.path}:{op.location.line}"
        if op.location.code:
            where += f": {op.location.code}"
    return f"{op.op} {op.dtype} ×{op.count}{where}"


def op_listing(base: AmpMetrics, head: AmpMetrics) -> str:
    """Head's fp32 matmul/conv work as a diff-style list: '+' for what base did not have."""
    new = {op_key(o) for o, _ in _added_ops(base.fp32_ops, head.fp32_ops)}
    lines = [f"{'+' if op_key(o) in new else ' '} {describe_op(o)}" for o in head.fp32_ops]
    if len(lines) > MAX_LISTED_OPS:
        lines = [*lines[:MAX_LISTED_OPS], f"  … and {len(lines) - MAX_LISTED_OPS} more"]
    return "\n".join(lines)


def _op_finding(wl: str, op: AmpOp, count: int, base: AmpMetrics, head: AmpMetrics) -> Finding:
    what = "kernel" if op.source == "kernel" else "op"
    return Finding(
        category="amp_fp32_fallback",
        severity="error",
        workload=wl,
        probe="amp",
        location=op.location,
        message=f"{op.op} runs in {op.dtype} inside the {head.dtype} autocast region"
        f" ({count}× per step); on base it did not",
        evidence={
            "op": op.op,
            "dtype": op.dtype,
            "count": count,
            "source": what,
            "autocast_dtype": head.dtype,
            "low_precision_ops": [base.low_precision_ops, head.low_precision_ops],
            "ops": op_listing(base, head),
        },
    )


def _break_finding(wl: str, gb: GraphBreak, count: int) -> Finding:
    return Finding(
        category="amp_fp32_fallback",
        severity="error",
        workload=wl,
        probe="amp",
        location=gb.location,
        message=f"Dynamo splits the graph at an autocast boundary: {gb.break_type}",
        evidence={"break_type": gb.break_type, "reason": gb.reason, "count": count},
    )


def amp_findings(wl: str, base: ProbeResult, head: ProbeResult, config: SettingsView) -> list[Finding]:
    b, h = probe_metrics(base, AmpMetrics), probe_metrics(head, AmpMetrics)
    if b is None or h is None:
        return []
    graph = _added_ops(
        [o for o in b.fp32_ops if o.source == "graph"], [o for o in h.fp32_ops if o.source == "graph"]
    )
    kernels = _added_ops(
        [o for o in b.fp32_ops if o.source == "kernel"], [o for o in h.fp32_ops if o.source == "kernel"]
    )
    # A new fp32 op in the graph shows up again as its kernel on a GPU; say it once, where the
    # graph names the source line. Kernels speak for themselves only when the graph did not.
    out = [_op_finding(wl, op, n, b, h) for op, n in (graph or kernels)]
    added = Counter({break_key(gb): gb.count for gb in h.autocast_breaks}) - Counter(
        {break_key(gb): gb.count for gb in b.autocast_breaks}
    )
    out += [_break_finding(wl, gb, added[break_key(gb)]) for gb in h.autocast_breaks if added[break_key(gb)]]
    return out


def rows(ba: ProbeResult | None, ha: ProbeResult | None, wl: WorkloadReview) -> list[Row]:
    rows: list[Row] = []
    if ba or ha:

        def fp32(r: ProbeResult | None) -> Cell:
            m = probe_metrics(r, AmpMetrics)
            if m is None:
                return status_cell(r) or "—"
            fp32_ops = sum(o.count for o in m.fp32_ops)
            return Compound(Figure(fp32_ops, "fp32"), Figure(m.low_precision_ops, m.dtype), "slash")

        dtype = next((m.dtype for r in (ha, ba) if (m := probe_metrics(r, AmpMetrics))), "low precision")
        rows.append(Row(f"matmul/conv ops under {dtype} autocast", fp32(ba), fp32(ha), ""))
    return settled(rows, ba, ha)


def compare(wl: str, base: ProbeResult, head: ProbeResult, config: SettingsView) -> Compared:
    return Compared(amp_findings(wl, base, head, config))


PROBE = ProbeKind(
    name="amp",
    reusable=True,
    summary="matmul/conv-class ops left in fp32 under autocast, autocast-boundary breaks, fp32 GEMMs",
    compare=compare,
    rows=rows,
    metrics=AmpMetrics,
    run="perfcheck.runner.probes.amp_probe:run",
    categories=entries_beside(__file__),  # amp.yml: its own categories' entries
    prior_s={"cpu": 5.0, "cuda": 20.0},
    asked_by=lambda wl: wl.amp != "none",  # a workload that runs under autocast
)
