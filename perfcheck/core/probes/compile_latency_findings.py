"""The compile probe's compile latency, reviewed: cache-cold compiles of base and head against the
relative budget (paired samples, the gate's statistics: perfcheck/core/compile_latency.py), a
process's first compile against the workload's absolute budget, and the table's rows for both.
The compile probe's own module (compile.py) raises these findings and shows these rows."""

from __future__ import annotations

from typing import Literal

from perfcheck.core import compile_latency, deltas
from perfcheck.core.markdown import Figure
from perfcheck.core.probes.kind import Compared, Row
from perfcheck.measures import CompileLatencyChange, CompileMetrics
from perfcheck.schema import Finding
from perfcheck.settings import COMPILE_RUNS_MAX, SettingsView

STAGE_LABELS = {
    "dynamo": "Dynamo",
    "aot_autograd": "AOTAutograd",
    "inductor": "Inductor",
    "other": "other (guards, the first step)",
}


def latency_figure(value: float, measure: str) -> Figure:
    """An instruction count in millions (``372.4 M instr``) or billions, or seconds."""
    if measure == "callgrind":
        return Figure(value / 1e9, "G instr", 2) if value >= 1e10 else Figure(value / 1e6, "M instr", 1)
    return Figure(value, "s", 2)


def _stage_words(change: CompileLatencyChange) -> str:
    top = compile_latency.grew(change)
    if top is None:
        return ""
    name = STAGE_LABELS.get(top.stage, top.stage)
    return (
        f"; {name} grew most: {latency_figure(top.base, change.measure)} → "
        f"{latency_figure(top.head, change.measure)} ({deltas.relative(top.base, top.head)})"
    )


def _relative_finding(wl: str, change: CompileLatencyChange, runs: int) -> Finding | None:
    """Against the relative budget: the whole interval beyond it, an error; a significant slowdown
    within it, a warning. Undecided (the interval straddles it) is never silent: a warning where
    the estimate is beyond the budget or the slowdown significant, else an info note, each saying
    what would decide it (``runs``: the compiles a side makes now, compile.runs)."""
    if change.verdict == "pass" and not change.warn:
        return None
    budget = f"{change.budget_pct:g} % budget"
    severity: Literal["error", "warning", "info"] = "warning"
    if change.verdict == "fail":
        severity, against = "error", f"beyond the {budget}"
    elif change.verdict == "pass":
        against = f"significant, within the {budget}"
    else:
        beyond = change.change_pct > change.budget_pct
        severity = "warning" if beyond or change.warn else "info"
        against = (
            f"undecided against the {budget}: the estimate is {'beyond' if beyond else 'within'} it "
            f"and the interval reaches {'below' if beyond else 'beyond'} it; {_what_decides(change, runs)}"
        )
    what = "instructions" if change.measure == "callgrind" else "wall-clock time"
    top = compile_latency.grew(change)
    return Finding(
        category="compile_latency_regression",
        severity=severity,
        workload=wl,
        probe="compile",
        message=f"cache-cold compile {what} {latency_figure(change.base, change.measure)} → "
        f"{latency_figure(change.head, change.measure)}, "
        f"{deltas.interval(change.change_pct, change.low_pct, change.high_pct)} "
        f"({change.confidence:.0%} CI, {change.pairs} pairs of compiles), {against}{_stage_words(change)}",
        evidence={
            "measure": change.measure,
            "base": change.base,
            "head": change.head,
            "change_pct": round(change.change_pct, 3),
            "p_value": change.p_value,
            "budget_pct": change.budget_pct,
            "stage": top.stage if top else "",
            "stages": {st.stage: [st.base, st.head] for st in change.stages},
            "undecided": change.verdict == "inconclusive",
        },
    )


def _what_decides(change: CompileLatencyChange, runs: int) -> str:
    """What would settle an undecided compile latency: more pairs where compile.runs allows them,
    else instructions, which do not scatter with the machine's load."""
    need = compile_latency.pairs_to_decide(change)
    if need is None:
        return "the estimate sits on the budget, where no number of pairs decides"
    pairs = f"about {need} pairs would decide it (compile.runs: {need}, now {runs})"
    if change.measure == "callgrind":
        return pairs
    counted = "instructions (compile.measure: callgrind) do not scatter with the machine's load"
    if need <= COMPILE_RUNS_MAX:
        return f"{pairs}, or {counted}"
    return f"more pairs than compile.runs allows ({COMPILE_RUNS_MAX}) would be needed; {counted}"


def _absolute_finding(
    wl: str,
    base: CompileMetrics,
    head: CompileMetrics,
    config: SettingsView,
    change: CompileLatencyChange | None,
) -> Finding | None:
    """The workload's own seconds, against a process's first compile: what a user waits for."""
    limit = config.budgets.compile_latency_s.get(wl)
    if limit is None or head.cold_compile_s <= limit:
        return None
    return Finding(
        category="compile_latency_regression",
        severity="error",
        workload=wl,
        probe="compile",
        message=f"cold compile {base.cold_compile_s:.1f} → {head.cold_compile_s:.1f} s, over the "
        f"{limit:g} s budget{_stage_words(change) if change else ''}",
        evidence={
            "base_s": base.cold_compile_s,
            "head_s": head.cold_compile_s,
            "budget_s": limit,
            "breakdown_base": base.compile_breakdown_s,
            "breakdown_head": head.compile_breakdown_s,
        },
    )


def compile_latency_findings(
    wl: str, base: CompileMetrics, head: CompileMetrics, config: SettingsView
) -> Compared:
    change = None
    findings: list[Finding] = []
    inconclusive: list[str] = []
    if compile_latency.unmeasured(base.latency, head.latency) is None:
        assert base.latency is not None and head.latency is not None
        change = compile_latency.decide(base.latency, head.latency, config.budgets, config.timing)
        relative = _relative_finding(wl, change, config.compile.runs)
        findings += [relative] if relative else []
        # Only an instruction count's undecided interval holds the review's verdict back: it is
        # deterministic to ±0.3 %, so straddling the budget means a change near it. Cache-cold
        # compiles by wall clock scatter by ±20 % between fresh processes (H200, ResNet-18: 5.0 to
        # 7.5 s), so three pairs rarely decide, and a gate that leaves every identical tree
        # inconclusive gets switched off; the row says undecided, a significant change still
        # warns and an interval wholly over the budget still fails.
        if change.verdict == "inconclusive" and change.measure == "callgrind":
            inconclusive.append(
                f"{wl}/compile: compile latency "
                f"{deltas.interval(change.change_pct, change.low_pct, change.high_pct)} over "
                f"{change.pairs} pairs straddles the {change.budget_pct:g} % budget "
                "(more compile.runs narrow it)"
            )
    absolute = _absolute_finding(wl, base, head, config, change)
    findings += [absolute] if absolute and not findings else []
    return Compared(findings, inconclusive, compile_latency=change)


def latency_rows(
    bm: CompileMetrics | None, hm: CompileMetrics | None, change: CompileLatencyChange | None
) -> list[Row]:
    """The deciding compile-latency row, then each stage's base → head."""
    if change is None:
        why = compile_latency.unmeasured(bm.latency if bm else None, hm.latency if hm else None)
        measured = (bm and bm.latency) or (hm and hm.latency)
        return [Row("compile latency (cache-cold)", "—", "—", why or "")] if measured else []
    how = "instructions, callgrind" if change.measure == "callgrind" else "wall clock"
    note = (hm.latency.note if hm and hm.latency else None) or ""
    rows = [
        Row(
            f"compile latency ({how}, {change.pairs} cache-cold per side) · decides",
            latency_figure(change.base, change.measure),
            latency_figure(change.head, change.measure),
            deltas.interval(change.change_pct, change.low_pct, change.high_pct)
            + (
                f" · undecided against {change.budget_pct:g} % (wall clock; more compile.runs narrow it)"
                if change.verdict == "inconclusive" and change.measure == "wall"
                else ""
            )
            + (f" · {note}" if note else ""),
        )
    ]
    for st in change.stages:
        rows.append(
            Row(
                f"· {STAGE_LABELS.get(st.stage, st.stage)}",
                latency_figure(st.base, change.measure),
                latency_figure(st.head, change.measure),
                deltas.relative(st.base, st.head),
            )
        )
    return rows
