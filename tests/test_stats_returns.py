"""The return-based sequential test of zero-sum games on simulated poker-like deals (no real games).

Checks: over 400 simulated gates at the null (mean return 0) and 400 at the alternative
(``TARGET`` chips per game), :func:`ml.judge.mean_return.sequential_mean_test` accepts H1 at most
``alpha`` + 0.03 and at least ``1 - beta`` - 0.03 of the time (the normal model is an
approximation for discrete chips with many ties at 0); the student non-inferiority test by
return keeps its rates the same way; the LLR, the bounds and the t interval match
hand-computed values; identical deals decide without a division by zero.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from ml.judge.mean_return import ReturnSPRT, ReturnTally, return_non_inferiority, sequential_mean_test

RUNS = 400
TARGET = 0.5
"""H1: chips per game (leduc's pots run from 1 to 13 chips)."""
CHIPS = np.array([1, 3, 5, 7, 13])
"""Pot sizes a hand is decided by (leduc: the antes, raises of 2 in round one and 4 in round two)."""
SHARE = np.array([0.40, 0.25, 0.15, 0.12, 0.08])
TIE = 0.3
"""Share of games that end in a split pot (return exactly 0)."""


def poker_deals(mean: float, rng: np.random.Generator, seats: int = 2):
    """Duplicate deals of a poker-like game: per game, 0 with probability ``TIE``, else a pot
    from ``CHIPS`` won or lost, the sign biased so that the expected return is ``mean``."""
    expected_pot = float(CHIPS @ SHARE)
    p_win = 0.5 * (1 + mean / ((1 - TIE) * expected_pot))
    assert 0 < p_win < 1
    while True:
        pots = rng.choice(CHIPS, size=seats, p=SHARE)
        sign = np.where(rng.random(seats) < p_win, 1.0, -1.0)
        yield list(np.where(rng.random(seats) < TIE, 0.0, sign * pots))


def accept_rate(mean: float, seed: int, test: ReturnSPRT, **kw) -> tuple[float, float]:
    """Share of RUNS sequential tests that accept H1, and mean deals per decision."""
    rng = np.random.default_rng(seed)
    results = [sequential_mean_test(poker_deals(mean, rng), test, **kw) for _ in range(RUNS)]
    return float(np.mean([r.decision == "H1" for r in results])), float(np.mean([r.deals for r in results]))


def test_return_sprt_false_accept_rate_at_the_null():
    test = ReturnSPRT(0.0, TARGET, alpha=0.05, beta=0.05)
    rate, deals = accept_rate(0.0, 1, test, min_deals=30, max_deals=4000)
    print(f"false-accept rate at mean 0: {rate:.3f} over {RUNS} gates, {deals:.0f} deals per decision")
    assert rate <= 0.05 + 0.03


def test_return_sprt_power_at_the_target():
    test = ReturnSPRT(0.0, TARGET, alpha=0.05, beta=0.05)
    rate, deals = accept_rate(TARGET, 2, test, min_deals=30, max_deals=4000)
    print(f"accept rate at mean {TARGET}: {rate:.3f} over {RUNS} gates, {deals:.0f} deals per decision")
    assert rate >= 1 - 0.05 - 0.03


def test_return_non_inferiority_error_rates():
    """alpha at the margin (a candidate worse by it is accepted), beta at par (an equal one is rejected)."""
    margin = 0.5
    rng = np.random.default_rng(3)
    worse = [return_non_inferiority(poker_deals(-margin, rng), 0.0, margin, min_deals=30, max_deals=4000) for _ in range(RUNS)]
    equal = [return_non_inferiority(poker_deals(0.0, rng), 0.0, margin, min_deals=30, max_deals=4000) for _ in range(RUNS)]
    false_accept = np.mean([not r.regression for r in worse])
    false_reject = np.mean([r.regression for r in equal])
    print(f"student by return: false accept {false_accept:.3f}, false reject {false_reject:.3f} over {RUNS} each")
    assert false_accept <= 0.08 and false_reject <= 0.08


def test_llr_bounds_and_interval_by_hand():
    tally = ReturnTally()
    xs = [1.0, -0.5, 2.0, 0.0, 1.5]
    for x in xs:
        tally.add(x)
    s2 = float(np.var(xs, ddof=1))
    assert tally.mean == pytest.approx(0.8) and tally.variance == pytest.approx(s2)
    test = ReturnSPRT(0.0, 0.5, 0.05, 0.1)
    assert test.upper == pytest.approx(math.log(0.9 / 0.05)) and test.lower == pytest.approx(math.log(0.1 / 0.95))
    assert test.llr(tally) == pytest.approx(0.5 / s2 * (sum(xs) - 5 * 0.25))
    low, high = tally.interval(0.95)
    half = sps.t.ppf(0.975, 4) * math.sqrt(s2 / 5)
    assert (low, high) == pytest.approx((0.8 - half, 0.8 + half))
    with pytest.raises(ValueError):
        ReturnSPRT(0.5, 0.0)
    with pytest.raises(ValueError):
        sequential_mean_test(iter([[0.0]]), test, min_deals=1, max_deals=10)


def test_identical_deals_decide_and_truncation():
    test = ReturnSPRT(0.0, 0.5)
    ties = sequential_mean_test(iter([[0.0, 0.0]] * 100), test, min_deals=5, max_deals=100)
    assert ties.decision == "H0" and ties.decided_early and ties.deals == 5
    wins = sequential_mean_test(iter([[1.0, 1.0]] * 100), test, min_deals=5, max_deals=100)
    assert wins.decision == "H1" and wins.deals == 5 and wins.played == 10
    halfway = [[0.25 + d, 0.25 - d] for d in (1.0, -1.0)] * 50  # mean exactly between H0 and H1: never decided
    undecided = sequential_mean_test(iter(halfway), test, min_deals=5, max_deals=40)
    assert undecided.deals == 40 and not undecided.decided_early and undecided.decision == "H0"
    nearer = sequential_mean_test(iter(halfway), test, min_deals=5, max_deals=40, truncation="nearer")
    assert nearer.decision == "H1"  # LLR exactly 0: Wald's rule takes H1 at a tie of the likelihoods
