"""The compile-latency verdict of one workload, from each side's repeated cache-cold compiles.

Pure. Sample i of base and sample i of head are a pair (they ran in the same round, or at the same
place in their processes), so the estimate, its interval and its test are the timing gate's own
(perfcheck/core/stats.py), over pairs of compiles. The figure is the instruction count where both sides were
counted under callgrind, else wall-clock seconds; each has its budget, relative to base, so a PR
that makes compiling 35 % slower is caught without the project knowing its numbers first.
"""

from __future__ import annotations

import math
from statistics import median
from typing import Literal

from perfcheck.core.stats import budget_verdict, process_ratio, ratio_fields, t_quantile, worth_warning
from perfcheck.measures import (
    CompileLatency,
    CompileLatencyChange,
    CompileMeasure,
    CompileSample,
    StageLatency,
)
from perfcheck.schema import COMPILE_STAGES
from perfcheck.settings import BudgetsConfig, TimingConfig


def unit(change: CompileLatencyChange) -> Literal["instructions", "s"]:
    return "instructions" if change.measure == "callgrind" else "s"


def grew(change: CompileLatencyChange) -> StageLatency | None:
    """The stage whose cost grew the most, if any grew."""
    top = max(change.stages, key=lambda s: s.head - s.base, default=None)
    return top if top is not None and top.head > top.base else None


def _figure(measure: CompileMeasure, sample: CompileSample) -> float | None:
    return float(sample.instructions) if measure == "callgrind" and sample.instructions else sample.wall_s


def _stage_figure(measure: CompileMeasure, sample: CompileSample, stage: str) -> float:
    if measure == "callgrind":
        return float(sample.stage_instructions.get(stage, 0))
    return sample.stages_s.get(stage, 0.0)


def measure_of(base: CompileLatency, head: CompileLatency) -> CompileMeasure:
    """Instructions only where both sides were counted."""
    counted = all(s.instructions for s in [*base.samples, *head.samples])
    return "callgrind" if base.measure == head.measure == "callgrind" and counted else "wall"


def unmeasured(base: CompileLatency | None, head: CompileLatency | None) -> str | None:
    """Why the two sides' compiles cannot be compared, or None when they can."""
    if base is None or head is None:
        return "not measured"
    n = min(len(base.samples), len(head.samples))
    if n < 2:
        failed = [f"{side}: {f}" for side, x in (("base", base), ("head", head)) for f in x.failures[:1]]
        why = "; ".join(failed) or (head.note or "").removeprefix("not measured: ")
        return f"not measured ({why})" if why else f"{n} compile{'s' if n != 1 else ''} per side, 2 needed"
    return None


def decide(
    base: CompileLatency, head: CompileLatency, budgets: BudgetsConfig, timing: TimingConfig
) -> CompileLatencyChange:
    """The verdict over the pairs both sides have (check ``unmeasured`` first)."""
    n = min(len(base.samples), len(head.samples))
    b, h = base.samples[:n], head.samples[:n]
    measure = measure_of(base, head)
    figures = [(_figure(measure, x), _figure(measure, y)) for x, y in zip(b, h, strict=True)]
    est = process_ratio([x for x, _ in figures], [y for _, y in figures], timing.confidence)  # type: ignore[misc]
    budget = (
        budgets.max_compile_instructions_regression_pct
        if measure == "callgrind"
        else budgets.max_compile_time_regression_pct
    )
    verdict = budget_verdict(est, budget)
    warn = (
        verdict != "fail"
        and est.p_value < timing.alpha
        and est.ratio_low > 1.0
        and worth_warning(est.change_pct, budget)
    )
    present = [s for s in COMPILE_STAGES if any(_stage_figure(measure, x, s) for x in [*b, *h])]
    stages = [
        StageLatency(
            stage=stage,
            base=median(_stage_figure(measure, x, stage) for x in b),
            head=median(_stage_figure(measure, y, stage) for y in h),
        )
        for stage in present
    ]
    return CompileLatencyChange(
        **ratio_fields(est),
        measure=measure,
        pairs=est.n,
        budget_pct=budget,
        verdict=verdict,
        warn=warn,
        stages=stages,
    )


def pairs_to_decide(change: CompileLatencyChange, most: int = 1000) -> int | None:
    """About how many pairs of compiles would settle an undecided change against its budget, were
    the pairs to scatter as these did: the smallest count whose Student t interval (its quantile
    shrinking with the pairs too) is narrower than the distance between the estimate and the
    budget. None where no count up to ``most`` would (an estimate on the budget)."""
    n = change.pairs
    quantile = 0.5 + change.confidence / 2
    half = (math.log(change.ratio_high) - math.log(change.ratio_low)) / 2
    spread = half * math.sqrt(n) / t_quantile(quantile, n - 1)  # the pairs' standard deviation
    gap = abs(math.log(change.ratio) - math.log1p(change.budget_pct / 100))
    for more in range(n + 1, most + 1):
        if t_quantile(quantile, more - 1) * spread / math.sqrt(more) < gap:
            return more
    return None
