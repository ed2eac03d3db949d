"""Paired statistics: known values, coverage on simulated data, and the three-way verdict."""

from __future__ import annotations

import math
import random

import pytest

from perfcheck.bot.stats import (
    _lower_count,
    _signed_rank_cdf,
    budget_verdict,
    paired_ratio,
    signed_rank_p,
    significant_slowdown,
)


def test_signed_rank_distribution_matches_tables() -> None:
    cdf = _signed_rank_cdf(10)
    assert cdf[-1] == pytest.approx(1.0)
    assert cdf[8] == pytest.approx(0.02441, abs=1e-5)  # two-sided 5 % critical value T = 8 for n = 10
    assert cdf[9] > 0.025
    assert _lower_count(10, 0.05) == 9


def test_p_value_of_all_positive_differences() -> None:
    assert signed_rank_p([0.1 * (i + 1) for i in range(10)]) == pytest.approx(2 / 1024)
    assert signed_rank_p([0.0, 0.0]) == 1.0


def test_identical_sides_give_ratio_one() -> None:
    base = [10.0, 10.2, 9.9, 10.1, 10.0, 10.3]
    est = paired_ratio(base, list(base))
    assert est.ratio == 1.0 and est.ratio_low == 1.0 and est.ratio_high == 1.0
    assert budget_verdict(est, 2.3) == "pass"
    assert not significant_slowdown(est, 0.01)


def test_a_clean_doubling_fails() -> None:
    rng = random.Random(1)
    base = [10 * (1 + rng.gauss(0, 0.01)) for _ in range(12)]
    head = [2 * b * (1 + rng.gauss(0, 0.01)) for b in base]
    est = paired_ratio(base, head)
    assert 1.95 < est.ratio < 2.05
    assert budget_verdict(est, 2.3) == "fail"
    assert significant_slowdown(est, 0.01)


def test_wild_noise_is_inconclusive_not_fail() -> None:
    rng = random.Random(2)
    base = [10 * math.exp(rng.gauss(0, 0.5)) for _ in range(12)]
    head = [10 * math.exp(rng.gauss(0, 0.5)) for _ in range(12)]
    assert budget_verdict(paired_ratio(base, head), 2.3) == "inconclusive"


@pytest.mark.parametrize("n", [8, 20, 60])
def test_interval_coverage_is_at_least_nominal(n: int) -> None:
    rng = random.Random(n)
    trials, covered = 400, 0
    for _ in range(trials):
        base = [10 * math.exp(rng.gauss(0, 0.05)) for _ in range(n)]
        head = [b * 1.03 * math.exp(rng.gauss(0, 0.03)) for b in base]
        est = paired_ratio(base, head)
        covered += est.ratio_low <= 1.03 <= est.ratio_high
    assert covered / trials >= 0.92  # 95 % nominal, exact method; slack for 400 trials


def test_inputs_are_checked() -> None:
    with pytest.raises(ValueError, match="same number"):
        paired_ratio([1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match="positive"):
        paired_ratio([1.0, 0.0], [1.0, 1.0])
    with pytest.raises(ValueError, match="two paired rounds"):
        paired_ratio([1.0], [1.0])


def test_sequential_decision_stops_early_when_clear_and_extends_when_not() -> None:
    from perfcheck.bot.stats import sequential_decision

    rng = random.Random(3)
    base = [10 * (1 + rng.gauss(0, 0.002)) for _ in range(60)]
    clear = sequential_decision(base, [b * 1.5 for b in base], 2.3, 12, 12, 60)
    assert clear is not None and (clear.verdict, clear.rounds) == ("fail", 12)
    noisy_head = [10 * math.exp(rng.gauss(0, 0.3)) for _ in range(60)]
    assert sequential_decision(base[:30], noisy_head[:30], 2.3, 12, 12, 60) is None  # wants more rounds
    final = sequential_decision(base, noisy_head, 2.3, 12, 12, 60)
    assert final is not None and (final.verdict, final.rounds) == ("inconclusive", 60)


def test_host_bound_fail_must_hold_in_both_halves() -> None:
    from perfcheck.bot.stats import gate_verdict, is_host_bound

    # Like the H200 A/A record: identical code, but the head process reads 9 % slow for one stretch.
    base = [30.0 * (1 + 0.01 * (i % 3)) for i in range(24)]
    head = [b * (1.09 if i < 12 else 1.0) for i, b in enumerate(base)]
    assert gate_verdict(base, head, 2.3)[0] == "fail"
    assert gate_verdict(base, head, 2.3, host_bound=True)[0] == "inconclusive"
    # A real slowdown holds throughout, so it still fails.
    steady = [b * 1.09 for b in base]
    assert gate_verdict(base, steady, 2.3, host_bound=True)[0] == "fail"
    assert is_host_bound([29.0, 30.0], [30.0, 31.0]) and not is_host_bound([5.0], [30.0])
