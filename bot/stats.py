"""Paired A/B statistics for timings: pure Python, no numpy, so the bot side stays light.

Each timing round gives one base and one head sample measured back to back; the analysis works
on the log ratio of each pair, so drift that hits both sides of a round cancels. The estimate is
the Hodges-Lehmann median of Walsh averages, its confidence interval comes from the exact
distribution of the Wilcoxon signed-rank statistic, and the same distribution gives the test.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache
from statistics import NormalDist, median
from typing import Literal

MetricVerdict = Literal["pass", "fail", "inconclusive"]

# Above this many pairs the signed-rank distribution is replaced by its normal approximation.
EXACT_LIMIT = 300


@cache
def _signed_rank_cdf(n: int) -> tuple[float, ...]:
    """P(W <= w) for w = 0..n(n+1)/2, where W is the signed-rank sum of n pairs under H0."""
    m = n * (n + 1) // 2
    counts = [0] * (m + 1)
    counts[0] = 1
    for k in range(1, n + 1):
        for w in range(min(m, k * (k + 1) // 2), k - 1, -1):
            counts[w] += counts[w - k]
    total = 2.0**n
    cdf, acc = [], 0
    for c in counts:
        acc += c
        cdf.append(acc / total)
    return tuple(cdf)


def _lower_count(n: int, alpha: float) -> int:
    """How many Walsh averages to drop from each end for a (1 - alpha) interval."""
    m = n * (n + 1) // 2
    if n <= EXACT_LIMIT:
        cdf = _signed_rank_cdf(n)
        # the largest c with P(W <= c - 1) <= alpha / 2
        c = 0
        while c < m and cdf[c] <= alpha / 2:
            c += 1
        return c
    z = NormalDist().inv_cdf(1 - alpha / 2)
    return max(0, math.floor(m / 2 - z * math.sqrt(n * (n + 1) * (2 * n + 1) / 24)))


def walsh_averages(d: list[float]) -> list[float]:
    return sorted((d[i] + d[j]) / 2 for i in range(len(d)) for j in range(i, len(d)))


def signed_rank_p(d: list[float]) -> float:
    """Two-sided p-value of the Wilcoxon signed-rank test that the pairs' differences center on 0."""
    nz = [x for x in d if x != 0.0]
    n = len(nz)
    if n == 0:
        return 1.0
    order = sorted(range(n), key=lambda i: abs(nz[i]))
    ranks = [0.0] * n
    i = 0
    while i < n:  # average ranks over ties
        j = i
        while j + 1 < n and abs(nz[order[j + 1]]) == abs(nz[order[i]]):
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    w_plus = sum(r for r, x in zip(ranks, nz, strict=True) if x > 0)
    m = n * (n + 1) / 2
    if n <= EXACT_LIMIT and all(r == int(r) for r in ranks):
        cdf = _signed_rank_cdf(n)
        w = int(min(w_plus, m - w_plus))
        return min(1.0, 2 * cdf[w])
    sd = math.sqrt(n * (n + 1) * (2 * n + 1) / 24)
    z = (abs(w_plus - m / 2) - 0.5) / sd
    return min(1.0, 2 * (1 - NormalDist().cdf(max(z, 0.0))))


@dataclass(frozen=True)
class PairedEstimate:
    """head/base as a ratio, with its confidence interval and the test's p-value."""

    n: int
    base_median: float
    head_median: float
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


def paired_ratio(base: list[float], head: list[float], confidence: float = 0.95) -> PairedEstimate:
    """Estimate head/base from paired positive samples (round i of base with round i of head)."""
    if len(base) != len(head):
        raise ValueError("paired samples need the same number of base and head rounds")
    if len(base) < 2:
        raise ValueError("at least two paired rounds are needed")
    if min(base + head) <= 0:
        raise ValueError("timings must be positive")
    d = [math.log(h / b) for b, h in zip(base, head, strict=True)]
    walsh = walsh_averages(d)
    c = _lower_count(len(d), 1 - confidence)
    # The interval runs from the c-th smallest to the c-th largest Walsh average (1-indexed).
    lo, hi = (walsh[c - 1], walsh[len(walsh) - c]) if c > 0 else (walsh[0], walsh[-1])
    return PairedEstimate(
        n=len(d),
        base_median=median(base),
        head_median=median(head),
        ratio=math.exp(median(walsh)),
        ratio_low=math.exp(lo),
        ratio_high=math.exp(hi),
        p_value=signed_rank_p(d),
        confidence=confidence,
    )


def budget_verdict(est: PairedEstimate, budget_pct: float) -> MetricVerdict:
    """fail: the whole interval is a slowdown beyond the budget; pass: all of it within; else neither."""
    if est.low_pct > budget_pct:
        return "fail"
    if est.high_pct <= budget_pct:
        return "pass"
    return "inconclusive"


# Host time to issue a step at this share of the device time or more: the GPU waits on the host,
# and the step runs at the host's speed. On the H200 this is what scattered compiled ResNet-50
# steps by 14 %: its device time tracked the host's issue time with r = 0.99 (docs/benchmarks.md).
HOST_BOUND_SHARE = 0.9


def is_host_bound(host_ms: list[float], device_ms: list[float]) -> bool:
    if not host_ms or not device_ms:
        return False
    return median(host_ms) >= HOST_BOUND_SHARE * median(device_ms)


def gate_verdict(
    base: list[float],
    head: list[float],
    budget_pct: float,
    confidence: float = 0.95,
    host_bound: bool = False,
) -> tuple[MetricVerdict, PairedEstimate]:
    """The budget verdict, made robust where the pairing assumption is known to break.

    Host-bound steps carry a per-process bias that lasts for stretches of rounds (two processes
    running identical code read 8 % apart for dozens of rounds on the H200), which pairing cannot
    cancel and the signed-rank test assumes away. For them a fail must hold in both halves of the
    rounds on its own; otherwise the verdict is inconclusive, and a required check re-runs.
    """
    est = paired_ratio(base, head, confidence)
    verdict = budget_verdict(est, budget_pct)
    if verdict == "fail" and host_bound:
        n = len(base) // 2
        halves = ((base[:n], head[:n]), (base[n:], head[n:]))
        if n < 2 or any(
            budget_verdict(paired_ratio(b, h, confidence), budget_pct) != "fail" for b, h in halves
        ):
            verdict = "inconclusive"
    return verdict, est


def generations_verdict(
    base: list[float],
    head: list[float],
    generation_rounds: list[int],
    budget_pct: float,
    confidence: float = 0.95,
    host_bound: bool = False,
    confirm_fail: bool = True,
) -> tuple[MetricVerdict, PairedEstimate, str]:
    """The verdict over one or two pairs of worker processes, the estimate over all rounds, and why.

    A fail counts only when each pair of processes fails on its own rounds: a per-process bias
    would have to strike twice, in the same direction, to fail a check on identical code.
    """
    sizes = generation_rounds or [len(base)]
    verdicts, at = [], 0
    for size in sizes:
        verdicts.append(
            gate_verdict(base[at : at + size], head[at : at + size], budget_pct, confidence, host_bound)[0]
        )
        at += size
    est = paired_ratio(base, head, confidence)
    if verdicts[0] != "fail":
        return verdicts[0], est, ""
    if len(verdicts) == 1:
        if not confirm_fail:
            return "fail", est, ""
        return "inconclusive", est, "the slowdown was not re-checked in a fresh pair of worker processes"
    if all(v == "fail" for v in verdicts):
        return "fail", est, f"reproduced in {len(verdicts)} fresh pairs of worker processes"
    return "inconclusive", est, "the slowdown did not reproduce in a fresh pair of worker processes"


def significant_slowdown(est: PairedEstimate, alpha: float) -> bool:
    """The test rejects 'no change' at ``alpha`` and the estimate is a slowdown."""
    return est.p_value < alpha and est.ratio > 1.0


def alarm(verdict: MetricVerdict, est: PairedEstimate, alpha: float, host_bound: bool = False) -> bool:
    """Whether the gate reports a slowdown: a fail, or a significant one within the budget. For
    host-bound steps the test's independence assumption does not hold, so only a fail counts."""
    return verdict == "fail" or (not host_bound and significant_slowdown(est, alpha))


@dataclass(frozen=True)
class Decision:
    verdict: MetricVerdict
    rounds: int
    estimate: PairedEstimate


def sequential_decision(
    base: list[float],
    head: list[float],
    budget_pct: float,
    min_rounds: int,
    extra_rounds: int,
    max_rounds: int,
    confidence: float = 0.95,
    host_bound: bool = False,
) -> Decision | None:
    """The verdict the gate reaches on these rounds, looking after min_rounds and every extra_rounds.

    Returns None while more rounds are wanted and not yet measured; the runner measures them, and
    the trust benchmark replays recorded rounds through the very same rule.
    """
    n = min_rounds
    while n <= len(base):
        verdict, est = gate_verdict(base[:n], head[:n], budget_pct, confidence, host_bound)
        if verdict != "inconclusive" or n >= max_rounds:
            return Decision(verdict, n, est)
        n = min(n + extra_rounds, max_rounds)
    return None
