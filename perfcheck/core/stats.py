"""Statistics for timings where the worker process is the unit of replication. Pure Python.

Two processes running identical code can differ for their whole life (placement, memory layout),
so a verdict must come from the variation *between* processes, not from many values of one
process pair (pyperf's model: many processes, few values each). Each process pair gives one
log ratio head/base of its per-process figures; the estimate is their mean, its interval the
Student t interval over pairs, and the same distribution gives the test. The base and head
figures shown beside it are the geometric means over each side's processes, so
``head / base == ratio`` exactly: the table and its Δ come from one estimator.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

MetricVerdict = Literal["pass", "fail", "inconclusive"]


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the regularized incomplete beta function (modified Lentz)."""
    tiny, eps = 1e-300, 1e-15
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 400):
        m2 = 2 * m
        for num in (
            m * (b - m) * x / ((qam + m2) * (a + m2)),
            -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2)),
        ):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < eps:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    """I_x(a, b), the regularized incomplete beta function."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_two_sided_p(t: float, df: int) -> float:
    """P(|T| >= |t|) for Student's t with ``df`` degrees of freedom."""
    if math.isinf(t):
        return 0.0
    return _betainc(df / 2.0, 0.5, df / (df + t * t))


def t_quantile(p: float, df: int) -> float:
    """The ``p`` quantile of Student's t (p in (0.5, 1)), by bisection on the exact CDF."""
    target = 2.0 * (1.0 - p)  # the two-sided tail mass beyond the quantile
    lo, hi = 0.0, 1.0
    while t_two_sided_p(hi, df) > target:
        hi *= 2.0
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if t_two_sided_p(mid, df) > target:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12 * max(1.0, hi):
            break
    return (lo + hi) / 2.0


@dataclass(frozen=True)
class ProcessEstimate:
    """head/base over process pairs: the ratio, its interval, the test's p-value."""

    n: int
    base: float  # geometric mean over base processes
    head: float
    ratio: float
    ratio_low: float
    ratio_high: float
    p_value: float
    confidence: float

    @property
    def change_pct(self) -> float:
        return (self.ratio - 1) * 100

    @property
    def low_pct(self) -> float:
        return (self.ratio_low - 1) * 100

    @property
    def high_pct(self) -> float:
        return (self.ratio_high - 1) * 100


def ratio_fields(est: ProcessEstimate) -> dict[str, float]:
    """The estimate as the fields of a schema RatioChange (its verdict and budget aside)."""
    return {
        "base": est.base,
        "head": est.head,
        "ratio": est.ratio,
        "ratio_low": est.ratio_low,
        "ratio_high": est.ratio_high,
        "confidence": est.confidence,
        "p_value": est.p_value,
    }


def geometric_mean(xs: Sequence[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def process_ratio(base: Sequence[float], head: Sequence[float], confidence: float = 0.95) -> ProcessEstimate:
    """head/base from paired per-process figures (process i of base ran beside process i of head)."""
    if len(base) != len(head):
        raise ValueError("paired figures need as many base as head processes")
    if len(base) < 2:
        raise ValueError("at least two process pairs are needed")
    if min(*base, *head) <= 0:
        raise ValueError("figures must be positive")
    d = [math.log(h / b) for b, h in zip(base, head, strict=True)]
    n = len(d)
    mean = sum(d) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in d) / (n - 1))
    if sd == 0.0:
        # Every pair agrees exactly (counts, or a deterministic figure): no spread to test against.
        half, p = 0.0, (1.0 if mean == 0.0 else 0.0)
    else:
        se = sd / math.sqrt(n)
        half = t_quantile(0.5 + confidence / 2, n - 1) * se
        p = t_two_sided_p(mean / se, n - 1)
    return ProcessEstimate(
        n=n,
        base=geometric_mean(base),
        head=geometric_mean(head),
        ratio=math.exp(mean),
        ratio_low=math.exp(mean - half),
        ratio_high=math.exp(mean + half),
        p_value=min(1.0, p),
        confidence=confidence,
    )


def budget_verdict(est: ProcessEstimate, budget_pct: float) -> MetricVerdict:
    """fail: the whole interval is a slowdown beyond the budget; pass: all of it within; else neither."""
    if est.low_pct > budget_pct:
        return "fail"
    if est.high_pct <= budget_pct:
        return "pass"
    return "inconclusive"


# A significant slowdown smaller than this share of its budget is not worth a warning, nor more
# samples to settle one: device time and instruction counts are steady enough that an identical
# tree's 0.1 % order effect tests significant once there are enough pairs (docs/benchmarks.md).
WARN_SHARE = 0.25


def worth_warning(change_pct: float, budget_pct: float) -> bool:
    """A slowdown large enough, against its budget, to be reported when it is significant."""
    return change_pct >= WARN_SHARE * budget_pct


def significant_slowdown(est: ProcessEstimate, alpha: float) -> bool:
    """The test rejects 'no change' at ``alpha`` and the estimate is a slowdown."""
    return est.p_value < alpha and est.ratio > 1.0


def fast_mean(times: Sequence[float], share: float = 0.05, least: int = 3) -> float:
    """The mean of a process's fastest steps (``share`` of them, at least ``least``).

    On a shared machine interference only ever adds time, so the fast end of the distribution is
    the time the code itself takes; medians carry the machine's bursts. Measured on a loaded
    2-core CPU (docs/benchmarks.md): between process pairs of identical code, the log ratio of
    this figure had a standard deviation of 0.7 %, the median's 3.5 %.
    """
    ordered = sorted(times)
    k = min(len(ordered), max(least, int(len(ordered) * share)))
    return sum(ordered[:k]) / k
