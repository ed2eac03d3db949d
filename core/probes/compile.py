"""The compile probe, reviewed: graph breaks matched by their source, recompiles by their cause,
cold compile against its budget. Structural findings are exact: a diff is a diff."""

from __future__ import annotations

import re
from collections import Counter

from perfcheck.config import Config
from perfcheck.core import deltas
from perfcheck.core.probes.kind import Compared, ProbeKind, Row, status_cell
from perfcheck.schema import CompileMetrics, Finding, GraphBreak, ProbeResult, WorkloadReview


def _break_key(gb: GraphBreak) -> tuple[str, str, str]:
    # Keyed by the source text, not the line number: a PR that adds lines above an old break
    # moves it without adding one.
    loc = gb.location
    where = (loc.path, loc.code or str(loc.line)) if loc else ("?", "?")
    return (gb.break_type, *where)


def _resume_base(function: str) -> str:
    match = re.match(r"torch_dynamo_resume_in_(\w+?)_at_\d+$", function)
    return match.group(1) if match else function


def normalize_guard(reason: str) -> str:
    """A recompile reason with its values and file locations blanked, so the same cause compares
    equal: base and head live in different trees, and a PR may move the line."""
    text = re.sub(r"\S*\.py:\d+", "<file>", reason)
    text = re.sub(r"'[^']*'", "'…'", text)
    return re.sub(r"\d+", "N", text)


def _compile_findings(wl: str, base: CompileMetrics, head: CompileMetrics, config: Config) -> list[Finding]:
    out: list[Finding] = []
    base_breaks = Counter({_break_key(b): b.count for b in base.graph_breaks})
    head_breaks = Counter({_break_key(b): b.count for b in head.graph_breaks})
    added, removed = head_breaks - base_breaks, base_breaks - head_breaks
    over_budget = sum(added.values()) > config.budgets.max_new_graph_breaks
    graphs = [base.graph_count, head.graph_count]
    changes = (
        ("graph_break_added", "error" if over_budget else "warning", head.graph_breaks, added, "splits"),
        ("graph_break_removed", "info", base.graph_breaks, removed, "no longer splits"),
    )
    for category, severity, breaks, delta, verb in changes:
        for gb in breaks:
            if delta[_break_key(gb)]:
                out.append(
                    Finding(
                        category=category,
                        severity=severity,  # type: ignore[arg-type]
                        workload=wl,
                        probe="compile",
                        location=gb.location,
                        message=f"Dynamo {verb} the graph here: {gb.break_type}",
                        evidence={
                            "break_type": gb.break_type,
                            "reason": gb.reason,
                            "count": delta[_break_key(gb)],
                            "graphs": graphs,
                        },
                    )
                )
    base_reasons = {(_resume_base(r.function), normalize_guard(r.reason)) for r in base.recompiles}
    new = [
        r
        for r in head.recompiles
        if (_resume_base(r.function), normalize_guard(r.reason)) not in base_reasons
    ]
    seen: set[tuple[str, str]] = set()
    for r in new:
        key = (_resume_base(r.function), normalize_guard(r.reason))
        if key in seen:
            continue
        seen.add(key)
        out.append(
            Finding(
                category="recompile",
                severity="error",
                workload=wl,
                probe="compile",
                message=f"new recompilation of `{r.function}`: {r.reason.splitlines()[0]}",
                evidence={
                    "function": r.function,
                    "reason": r.reason,
                    "recompiles": [base.recompile_count, head.recompile_count],
                },
            )
        )
    return out


def _compile_latency_findings(
    wl: str, base: CompileMetrics, head: CompileMetrics, config: Config
) -> list[Finding]:
    limit = config.budgets.compile_latency_s.get(wl)
    if limit is None or head.cold_compile_s <= limit:
        return []
    return [
        Finding(
            category="compile_latency_regression",
            severity="error",
            workload=wl,
            probe="compile",
            message=f"cold compile {base.cold_compile_s:.1f} → {head.cold_compile_s:.1f} s, over the "
            f"{limit:g} s budget",
            evidence={
                "base_s": base.cold_compile_s,
                "head_s": head.cold_compile_s,
                "budget_s": limit,
                "breakdown_base": base.compile_breakdown_s,
                "breakdown_head": head.compile_breakdown_s,
            },
        )
    ]


def _compile_failed(wl: str, base: ProbeResult, head: ProbeResult) -> Finding | None:
    """torch.compile raising inside torch on the head's code: not a crashed probe, a finding."""
    h = head.compile
    if head.status != "failed" or h is None:
        return None
    also = base.status == "failed"
    return Finding(
        category="compile_failed",
        severity="warning" if also else "error",
        workload=wl,
        probe="compile",
        location=h.error_location,
        message=f"torch.compile fails{' (as on base)' if also else ''}: {h.error_type}",
        evidence={"error_type": h.error_type or "", "error": (h.error_message or "")[:2000]},
    )


def compare(wl: str, base: ProbeResult, head: ProbeResult, config: Config) -> Compared:
    failed = _compile_failed(wl, base, head)
    if failed is not None:
        return Compared([failed])
    b, h = base.compile, head.compile
    if b is None or h is None or "failed" in (base.status, head.status):
        return Compared()
    return Compared(_compile_findings(wl, b, h, config) + _compile_latency_findings(wl, b, h, config))


def rows(bc: ProbeResult | None, hc: ProbeResult | None, wl: WorkloadReview) -> list[Row]:
    rows: list[Row] = []
    if bc or hc:
        bm = bc.compile if bc else None
        hm = hc.compile if hc else None

        def cell(r: ProbeResult | None, value: str | None) -> str:
            return status_cell(r) or (value if value is not None else "—")

        rows.append(
            Row(
                "graphs / breaks",
                cell(bc, f"{bm.graph_count} / {bm.graph_break_count}" if bm else None),
                cell(hc, f"{hm.graph_count} / {hm.graph_break_count}" if hm else None),
                deltas.count(bm.graph_break_count, hm.graph_break_count, "breaks") if bm and hm else "",
            )
        )
        rows.append(
            Row(
                "recompiles",
                cell(bc, str(bm.recompile_count) if bm else None),
                cell(hc, str(hm.recompile_count) if hm else None),
                deltas.count(bm.recompile_count, hm.recompile_count) if bm and hm else "",
            )
        )
        if (bm and bm.second_batch) or (hm and hm.second_batch):
            # Recompiles are counted without the call with another batch: say so, per side.
            rows.append(
                Row(
                    "recompile check's second batch",
                    cell(bc, (bm.second_batch or "ran") if bm else None),
                    cell(hc, (hm.second_batch or "ran") if hm else None),
                    "",
                )
            )
        either = hm or bm
        rows.append(
            Row(
                f"cold compile ({either.backend})" if either else "cold compile",
                cell(bc, f"{bm.cold_compile_s:.2f} s" if bm else None),
                cell(hc, f"{hm.cold_compile_s:.2f} s" if hm else None),
                deltas.relative(bm.cold_compile_s, hm.cold_compile_s, digits=0, missing="")
                if bm and hm
                else "",
            )
        )
    return rows


PROBE = ProbeKind(
    name="compile",
    summary="graphs, graph breaks with their source lines, recompiles, cold compile",
    default=True,
    compare=compare,
    rows=rows,
    compared=("ok", "failed"),  # torch rejecting a side's code is compared too
)
