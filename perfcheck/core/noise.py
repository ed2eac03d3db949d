"""The gate's own error rates, measured: A/A reviews (base and head the same content) of the
default branch, per workload and runner class.

An A/A review can only pass: every fail is a false alarm and every inconclusive is a review the
gate could not decide on an unchanged tree. The spread of each deciding metric's estimate over A/A
runs (|head/base − 1|) is how much a budget must allow for before a change is told from noise.

Pure functions over a review and over what the history store kept of earlier ones; the store's
reading and writing stay in perfcheck/core/history.py, printing in perfcheck/cli/history_commands.py.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Literal, get_args

from perfcheck.measures import Environment
from perfcheck.schema import Review, WorkloadReview
from perfcheck.settings import BudgetsConfig

Outcome = Literal["pass", "fail", "inconclusive"]
OUTCOMES: Final = frozenset(get_args(Outcome))

# The deciding metrics an A/A run records, with what a reader calls them and the budget each is
# judged against. The timing gate's metrics keep their names (TimingChange); compile latency is
# named by what decides it, since its unit (seconds or instructions) and budget follow the measure.
METRICS: Final[dict[str, tuple[str, str]]] = {
    "step_ms": ("step time", "max_throughput_regression_pct"),
    "device_ms": ("device time", "max_throughput_regression_pct"),
    "host_ms": ("host issue time", "max_host_overhead_regression_pct"),
    "compile_wall": ("compile time", "max_compile_time_regression_pct"),
    "compile_instructions": ("compile instructions", "max_compile_instructions_regression_pct"),
}

# How many of the last A/A runs a summary covers unless asked otherwise.
DEFAULT_LAST: Final = 30
# Fewer runs than this say too little about a runner's spread to warn that a budget is too tight.
MIN_RUNS_TO_WARN: Final = 3
# A runner class is a label, one line; a longer one is cut (a CPU model string is under 60).
RUNNER_CLASS_MAX: Final = 120


@dataclass(frozen=True)
class Estimate:
    """One deciding metric's head/base estimate in one run, and the budget it was judged by."""

    metric: str
    ratio: float
    ratio_low: float
    ratio_high: float
    budget_pct: float

    @property
    def abs_pct(self) -> float:
        return abs(self.ratio - 1) * 100

    @property
    def high_pct(self) -> float:
        return (self.ratio_high - 1) * 100


@dataclass(frozen=True)
class WorkloadRun:
    """One workload of one recorded A/A review."""

    review_id: int
    recorded_at: str
    runner_class: str
    workload: str
    outcome: Outcome
    estimates: tuple[Estimate, ...] = ()


@dataclass(frozen=True)
class Spread:
    """One deciding metric over a workload's A/A runs: |head/base − 1| in percent, and the upper
    end of the interval (an A/A interval that reaches past the budget leaves the gate undecided)."""

    metric: str
    runs: int
    median_pct: float
    p95_pct: float
    max_pct: float
    median_high_pct: float
    budget_pct: float  # the newest run's: the budget the gate judges by now

    @property
    def label(self) -> str:
        return metric_label(self.metric)


@dataclass(frozen=True)
class Summary:
    """A workload's last A/A runs on one runner class."""

    workload: str
    runner_class: str
    runs: int
    failed: int
    inconclusive: int
    first: str  # recorded_at of the oldest run covered
    last: str
    spreads: tuple[Spread, ...]


def metric_label(metric: str) -> str:
    return METRICS[metric][0] if metric in METRICS else metric


def budget_key(metric: str) -> str | None:
    """The setting a metric is judged against, as a user writes it (budgets.max_..._pct)."""
    return f"budgets.{METRICS[metric][1]}" if metric in METRICS else None


# ---------------------------------------------------------------- what one review says


def _same_commit(a: str, b: str) -> bool:
    # A pinned head may be given short (7+ hex digits); the other side's is git's full SHA.
    a, b = a.lower(), b.lower()
    return min(len(a), len(b)) >= 7 and (a.startswith(b) or b.startswith(a))


def is_aa(review: Review) -> bool:
    """Base and head are the same content: the same commit where both are known, else the same
    folder (a review of one checkout against itself)."""
    base, head = review.base, review.head
    if base.revision and head.revision:
        return _same_commit(base.revision, head.revision)
    return os.path.normpath(base.tree) == os.path.normpath(head.tree)


def runner_class(env: Environment | None) -> str | None:
    """Where a review ran, as a short stable label: the device kind and its name (``cuda:NVIDIA
    H200``, ``cpu:AMD EPYC 7B13, 4 cores``). Versions are left out on purpose: a runner keeps its
    class across a torch upgrade, so its noise history carries on (and shows the upgrade's effect)."""
    if env is None:
        return None
    if env.gpu_name:
        label = f"cuda:{env.gpu_name}"
    else:
        cores = f", {env.cpu_count} cores" if env.cpu_count else ""
        label = f"cpu:{env.cpu or 'unknown CPU'}{cores}"
    return " ".join(label.split())[:RUNNER_CLASS_MAX]


def review_runner_class(review: Review) -> str | None:
    """The runner class of the head side (the one the gate judges), else of base."""
    for info, side in ((review.head, "head"), (review.base, "base")):
        env = info.environment or next(
            (r.environment for wl in review.workloads for r in getattr(wl, side) if r.environment),
            None,
        )
        if env is not None:
            return runner_class(env)
    return None


def workload_outcome(review: Review, wl: WorkloadReview) -> Outcome:
    """What the review's verdict was for this workload: fail where an error finding of it stands
    (not acknowledged), inconclusive where a reason the review could not decide names it, else
    pass. A gate's own undecided interval counts only where the review let it hold the verdict (a
    wall-clock compile latency's does not: compile.py says why)."""
    if any(f.workload == wl.name and f.severity == "error" and f.ack is None for f in review.findings):
        return "fail"
    # A reason starts `workload/probe:` (compare.py, the probes' comparators) or, the timing gate's,
    # `workload:`. Matching the probes the workload ran keeps a workload named `a` from claiming
    # the reasons of one named `a/b`.
    ran = {r.probe for r in [*wl.base, *wl.head]}
    prefixes = (f"{wl.name}: ", *(f"{wl.name}/{p}:" for p in ran))
    undecided = any(why.startswith(prefixes) for why in review.inconclusive)
    return "inconclusive" if undecided else "pass"


def deciding_estimates(wl: WorkloadReview) -> list[Estimate]:
    """The estimates the workload's verdict came from: each timing metric that decides, and
    compile latency's where it was measured."""
    out = []
    if wl.timing is not None:
        out += [
            Estimate(m.metric, m.ratio, m.ratio_low, m.ratio_high, m.budget_pct)
            for m in wl.timing.metrics
            if m.decides
        ]
    c = wl.compile_latency
    if c is not None:
        name = "compile_instructions" if c.measure == "callgrind" else "compile_wall"
        out.append(Estimate(name, c.ratio, c.ratio_low, c.ratio_high, c.budget_pct))
    return out


# ---------------------------------------------------------------- over many runs


def percentile(values: Sequence[float], share: float) -> float:
    """Nearest rank: a value that was measured (with 19 runs or fewer, p95 is the largest)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(share * len(ordered)) - 1)]


def _spread(metric: str, estimates: Sequence[Estimate]) -> Spread:
    """``estimates`` newest first."""
    sizes = [e.abs_pct for e in estimates]
    return Spread(
        metric=metric,
        runs=len(estimates),
        median_pct=percentile(sizes, 0.5),
        p95_pct=percentile(sizes, 0.95),
        max_pct=max(sizes),
        median_high_pct=percentile([e.high_pct for e in estimates], 0.5),
        budget_pct=estimates[0].budget_pct,
    )


def _newest_first(run: WorkloadRun) -> tuple[str, int]:
    return run.recorded_at, run.review_id


def summarise(runs: Sequence[WorkloadRun], last: int = DEFAULT_LAST) -> list[Summary]:
    """Per workload and runner class, its ``last`` newest A/A runs: how many failed (false alarms)
    and were inconclusive, and each deciding metric's spread. Sorted by runner class, then workload."""
    groups: dict[tuple[str, str], list[WorkloadRun]] = {}
    for run in sorted(runs, key=_newest_first, reverse=True):
        kept = groups.setdefault((run.runner_class, run.workload), [])
        if len(kept) < last:
            kept.append(run)
    out = []
    for (klass, workload), kept in sorted(groups.items()):
        by_metric: dict[str, list[Estimate]] = {}
        for run in kept:
            for e in run.estimates:
                by_metric.setdefault(e.metric, []).append(e)
        order = list(METRICS)
        metrics = sorted(by_metric, key=lambda m: (order.index(m) if m in order else len(order), m))
        out.append(
            Summary(
                workload=workload,
                runner_class=klass,
                runs=len(kept),
                failed=sum(r.outcome == "fail" for r in kept),
                inconclusive=sum(r.outcome == "inconclusive" for r in kept),
                first=kept[-1].recorded_at,
                last=kept[0].recorded_at,
                spreads=tuple(_spread(m, by_metric[m]) for m in metrics),
            )
        )
    return out


def config_budgets(budgets: BudgetsConfig) -> dict[str, float]:
    """Each metric's budget as ``budgets`` (a config's) sets it."""
    return {m: float(getattr(budgets, key)) for m, (_, key) in METRICS.items()}


def budget_warnings(
    summaries: Sequence[Summary],
    budgets: Mapping[str, float] | None = None,
    min_runs: int = MIN_RUNS_TO_WARN,
) -> list[str]:
    """Where a budget is tighter than a runner's A/A noise allows, naming the setting and the
    figure. ``budgets``: metric -> percent (a config's, config_budgets); without it, the budget each
    metric was last judged by. A budget at or under the p95 of |Δ| on an unchanged tree will see
    estimates beyond it by noise alone (false alarms); one under the median upper end of the A/A
    interval leaves the gate undecided on most unchanged trees (inconclusives)."""
    out = []
    for s in summaries:
        for spread in s.spreads:
            budget = budgets.get(spread.metric, spread.budget_pct) if budgets else spread.budget_pct
            key = budget_key(spread.metric) or spread.metric
            where = f"{s.workload} on {s.runner_class}"
            if spread.runs < min_runs:
                continue
            if budget <= spread.p95_pct:
                out.append(
                    f"{key} {budget:g} % is within this runner's A/A noise ({where}): p95 |Δ| "
                    f"{spread.p95_pct:.1f} % over {spread.runs} runs; expect false alarms"
                )
            elif budget < spread.median_high_pct:
                out.append(
                    f"{key} {budget:g} % is under the upper end of this runner's A/A interval "
                    f"({where}): median +{spread.median_high_pct:.1f} % over {spread.runs} runs; "
                    "expect inconclusive reviews"
                )
    return out


def footer(summaries: Sequence[Summary], klass: str, workloads: Sequence[str]) -> list[str]:
    """The PR comment's lines on the gate's measured error rates: per reviewed workload with A/A
    runs on ``klass``, its false alarms and inconclusives and each deciding metric's p95 |Δ|."""
    mine = {s.workload: s for s in summaries if s.runner_class == klass}
    lines = []
    for name in workloads:
        s = mine.get(name)
        if s is None:
            continue
        plural = "s" if s.runs != 1 else ""
        spreads = ", ".join(f"{x.label} {x.p95_pct:.1f} %" for x in s.spreads)
        lines.append(
            f"A/A on this runner ({klass}), last {s.runs} run{plural} of {name}: {s.failed} failed, "
            f"{s.inconclusive} inconclusive" + (f" · p95 |Δ| {spreads}" if spreads else "")
        )
    return lines
