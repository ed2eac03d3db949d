"""Statistics over process pairs: known values, coverage on simulated data, the three-way verdict."""

from __future__ import annotations

import math
import random

import pytest

from perfcheck.core.stats import (
    budget_verdict,
    fast_mean,
    process_ratio,
    significant_slowdown,
    t_quantile,
    t_two_sided_p,
)


@pytest.mark.parametrize(
    ("df", "p", "expected"),
    [(1, 0.975, 12.706), (2, 0.975, 4.303), (4, 0.975, 2.776), (8, 0.995, 3.355), (30, 0.975, 2.042)],
)
def test_t_quantiles_match_tables(df: int, p: float, expected: float) -> None:
    assert t_quantile(p, df) == pytest.approx(expected, abs=1e-3)
    assert t_two_sided_p(expected, df) == pytest.approx(2 * (1 - p), rel=1e-2)


def test_identical_sides_give_ratio_one_and_figures_agree_with_the_ratio() -> None:
    base = [10.0, 10.2, 9.9, 10.1]
    est = process_ratio(base, list(base))
    assert est.ratio == 1.0 and est.ratio_low == 1.0 and est.ratio_high == 1.0 and est.p_value == 1.0
    assert budget_verdict(est, 2.3) == "pass"
    head = [b * f for b, f in zip(base, [1.1, 1.3, 1.2, 1.25], strict=True)]
    est = process_ratio(base, head)
    # The figures shown beside the ratio are the geometric means: head / base is the ratio itself.
    assert est.head / est.base == pytest.approx(est.ratio)


def test_a_clean_doubling_fails_and_is_significant() -> None:
    rng = random.Random(1)
    base = [10 * (1 + rng.gauss(0, 0.01)) for _ in range(3)]
    head = [2 * b * (1 + rng.gauss(0, 0.01)) for b in base]
    est = process_ratio(base, head)
    assert 1.95 < est.ratio < 2.05
    assert budget_verdict(est, 2.3) == "fail"
    assert significant_slowdown(est, 0.01)


def test_a_per_process_bias_of_25_percent_is_inconclusive_not_fail() -> None:
    # The wall clock of a host-bound GPU step: each process carries its own lasting bias.
    base = [10.0, 12.5, 7.5, 10.0]
    head = [12.5, 10.0, 10.0, 7.5]
    est = process_ratio(base, head)
    assert est.low_pct < -10 and est.high_pct > 10
    assert budget_verdict(est, 2.3) == "inconclusive"


@pytest.mark.parametrize("n", [3, 5, 9])
def test_interval_coverage_is_nominal_over_pairs(n: int) -> None:
    rng = random.Random(n)
    covered = 0
    for _ in range(2000):
        base = [math.exp(rng.gauss(0, 0.02)) for _ in range(n)]
        head = [b * 1.03 * math.exp(rng.gauss(0, 0.005)) for b in base]
        est = process_ratio(base, head)
        covered += est.ratio_low <= 1.03 <= est.ratio_high
    assert 0.93 <= covered / 2000 <= 0.97


def test_inputs_are_checked() -> None:
    with pytest.raises(ValueError, match="as many"):
        process_ratio([1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match="two process pairs"):
        process_ratio([1.0], [1.0])
    with pytest.raises(ValueError, match="positive"):
        process_ratio([1.0, 0.0], [1.0, 1.0])


def test_fast_mean_takes_the_fast_end_that_interference_cannot_reach() -> None:
    steps = [1.0] * 20 + [1.5] * 60 + [3.0] * 20  # bursts of a busy neighbour only ever add time
    assert fast_mean(steps) == 1.0
    assert fast_mean([2.0, 1.0]) == 1.5  # at least three, or all there are
    assert fast_mean([4.0, 1.0, 2.0, 9.0, 3.0], least=3) == 2.0
