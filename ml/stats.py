"""Statistical tests of the gate: Wilson intervals, Wald's SPRT, exact McNemar, non-regression.

Pure functions of counts and outcomes (no games are played here; ``ml.gate`` plays them).
Rates are shares of games in [0, 1]; a draw is never a first place.

References:
    Wald, A. (1945), "Sequential Tests of Statistical Hypotheses".
    McNemar, Q. (1947), "Note on the sampling error of the difference between correlated
    proportions or percentages", Psychometrika 12(2).
    Wilson, E. B. (1927), "Probable inference, the law of succession, and statistical
    inference", JASA 22(158). Computed with ``scipy.stats.binomtest(...).proportion_ci``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.stats import binomtest


def wilson_interval(successes: int, trials: int, confidence: float = 0.95) -> tuple[float, float]:
    """Two-sided Wilson score interval of a binomial proportion.

    Args:
        successes: number of successes (games won).
        trials: number of trials (games); 0 gives ``(0.0, 1.0)``.
        confidence: confidence level, e.g. 0.95.

    Returns:
        ``(low, high)``, both in [0, 1].
    """
    if trials == 0:
        return 0.0, 1.0
    ci = binomtest(successes, trials).proportion_ci(confidence_level=confidence, method="wilson")
    return float(ci.low), float(ci.high)


@dataclass(frozen=True)
class SPRT:
    """Wald's sequential probability ratio test of a Bernoulli rate (first places in pods).

    H0: p = ``p0`` (parity, 1/pod size) against H1: p = ``p1`` (the target win rate), with
    error rates ``alpha`` (accepting a candidate at parity) and ``beta`` (rejecting one at the
    target). Each game adds ``log(p1/p0)`` (a win) or ``log((1-p1)/(1-p0))`` (no win) to the
    log-likelihood ratio; the test accepts H1 at ``log((1-beta)/alpha)`` and H0 at
    ``log(beta/(1-alpha))``. Truncated at ``max_games``: undecided means H0 (not accepted),
    which can only lower the false-accept rate.

    References:
        Wald, A. (1945), "Sequential Tests of Statistical Hypotheses", Ann. Math. Statist.
        16(2), eqs. for A and B in section 3.
    """

    p0: float
    p1: float
    alpha: float = 0.05
    beta: float = 0.05

    def __post_init__(self) -> None:
        if not 0 < self.p0 < self.p1 < 1:
            raise ValueError(f"SPRT needs 0 < p0 < p1 < 1, got p0={self.p0}, p1={self.p1}")
        if not (0 < self.alpha < 0.5 and 0 < self.beta < 0.5):
            raise ValueError(f"SPRT error rates must be in (0, 0.5), got alpha={self.alpha}, beta={self.beta}")

    @property
    def upper(self) -> float:
        """Accept-H1 bound A = log((1-beta)/alpha)."""
        return math.log((1 - self.beta) / self.alpha)

    @property
    def lower(self) -> float:
        """Accept-H0 bound B = log(beta/(1-alpha))."""
        return math.log(self.beta / (1 - self.alpha))

    def llr(self, wins: int, games: int) -> float:
        """Log-likelihood ratio of ``wins`` first places in ``games`` games."""
        return wins * math.log(self.p1 / self.p0) + (games - wins) * math.log((1 - self.p1) / (1 - self.p0))

    def decide(self, wins: int, games: int) -> str | None:
        """``"H1"``, ``"H0"`` or None (keep playing)."""
        llr = self.llr(wins, games)
        if llr >= self.upper:
            return "H1"
        if llr <= self.lower:
            return "H0"
        return None


def sequential_test(
    outcomes: Iterator[Sequence[bool | None]],
    test: SPRT,
    min_games: int,
    max_games: int,
    confidence: float = 0.95,
    on_deal: Callable[[int, dict[str, float]], None] | None = None,
) -> dict:
    """Run an SPRT over groups of games (one duplicate deal per group), stopping early.

    Args:
        outcomes: yields, per deal, whether the candidate took first place in each game of
            the deal (one game per seat of the candidate; None for a draw, which counts as
            no first place); consumed only as far as needed.
        test: the SPRT.
        min_games: never decide before this many games.
        max_games: stop here; undecided counts as H0.
        confidence: level of the reported Wilson interval.
        on_deal: called after each deal with the games so far and ``llr``, ``llr_upper``,
            ``llr_lower`` and ``win_rate``: the test's path (a learning-curve logger).

    Returns:
        ``decision`` ("H1"/"H0"), ``decided_early`` (bool), ``games``, ``wins``, ``win_rate``,
        ``win_rate_low``/``win_rate_high`` (Wilson), ``llr``, ``llr_upper``, ``llr_lower``.
    """
    wins = games = 0
    decision = None
    for deal in outcomes:
        wins += sum(1 for x in deal if x)  # a draw (None) is not a first place: conservative
        games += len(deal)
        if on_deal is not None:
            on_deal(
                games,
                {
                    "llr": test.llr(wins, games),
                    "llr_upper": test.upper,
                    "llr_lower": test.lower,
                    "win_rate": wins / max(games, 1),
                },
            )
        if games >= min_games:
            decision = test.decide(wins, games)
        if decision is not None or games >= max_games:
            break
    low, high = wilson_interval(wins, games, confidence)
    return {
        "decision": decision or "H0",
        "decided_early": decision is not None,
        "games": games,
        "wins": wins,
        "win_rate": wins / games if games else 0.0,
        "win_rate_low": low,
        "win_rate_high": high,
        "llr": test.llr(wins, games),
        "llr_upper": test.upper,
        "llr_lower": test.lower,
    }


def mcnemar_regression(correct_current: np.ndarray, correct_candidate: np.ndarray, margin: float, alpha: float = 0.05) -> dict:
    """Paired holdout comparison of two students on the same decisions.

    A regression needs both: the observed accuracy drop exceeds ``margin``, and the exact
    McNemar test (a binomial test on the discordant pairs) says the candidate is worse at
    level ``alpha`` (one-sided). A drop that the test cannot tell from noise is no regression.

    Args:
        correct_current: bool[N], the current student's greedy action equals the label.
        correct_candidate: bool[N], the same for the student trained with the batch.
        margin: accuracy drop tolerated (fraction).
        alpha: one-sided level.

    Returns:
        ``regression`` (bool), ``drop``, ``p_value``, ``only_current`` (b), ``only_candidate`` (c).

    References:
        McNemar, Q. (1947), Psychometrika 12(2); exact form: b ~ Binomial(b + c, 1/2) under H0.
    """
    b = int(np.sum(correct_current & ~correct_candidate))
    c = int(np.sum(~correct_current & correct_candidate))
    n = len(correct_current)
    drop = (b - c) / n if n else 0.0
    p_value = float(binomtest(b, b + c, 0.5, alternative="greater").pvalue) if b + c else 1.0
    return {
        "regression": bool(drop > margin and p_value < alpha),
        "drop": drop,
        "p_value": p_value,
        "only_current": b,
        "only_candidate": c,
    }


def student_non_regression(outcomes: Sequence[bool | None], pod_size: int, margin: float, confidence: float = 0.95) -> dict:
    """Clear-regression check of the candidate student against the current one.

    Draws are left out: two similar greedy students often stall to the turn cap, and a
    draw says nothing about which is stronger, while counting it as a loss would make an
    equal student look like a regression. The rate is the candidate's share of first
    places among decisive games (parity ``1 / pod_size``).

    Args:
        outcomes: per game, whether the candidate student took first place in a pod
            against ``pod_size - 1`` copies of the current student (None: a draw).
        pod_size: players per pod (parity is ``1 / pod_size``).
        margin: tolerated shortfall below parity (win-rate points).
        confidence: level of the Wilson interval.

    Returns:
        ``games`` (decisive), ``draws``, ``wins``, ``win_rate``, ``win_rate_low``/``_high``,
        ``parity``, ``margin`` and ``regression``: True only when the whole interval lies
        below ``parity - margin`` ("block only on a clear regression").
    """
    decisive = [x for x in outcomes if x is not None]
    wins, games = sum(decisive), len(decisive)
    low, high = wilson_interval(wins, games, confidence)
    parity = 1.0 / pod_size
    return {
        "games": games,
        "draws": len(outcomes) - games,
        "wins": wins,
        "win_rate": wins / games if games else 0.0,
        "win_rate_low": low,
        "win_rate_high": high,
        "parity": parity,
        "margin": margin,
        "regression": bool(high < parity - margin),
    }
