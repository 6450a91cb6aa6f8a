"""Tests on mean return (chips), for two-player zero-sum games: the deal's mean return is the unit.

Zero-sum games (``ml.game.protocol.GameSpec.zero_sum``) are judged in their own currency: the
unit is a deal's mean return of the candidate over its seats, and :class:`ReturnSPRT` /
:func:`sequential_mean_test` test its mean (the gate's strength check), :func:`return_non_inferiority`
the candidate student against the current one; the first-place rate stays reported beside them.

References:
    Rushton, S. (1950), "On a sequential t-test", Biometrika 37(3/4): Wald's SPRT of a normal
    mean with the variance estimated as the test goes (:class:`ReturnSPRT`). Student (1908),
    "The probable error of a mean", Biometrika 6(1): the t interval of a mean
    (:meth:`ReturnTally.interval`, ``scipy.stats.t``).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from ml.judge.sequential import DealStep, Hypothesis, Margin, OnDeal, Truncation, WaldBounds, check_error_rates, walk_deals


@dataclass
class ReturnTally:
    """Running sums of the by-deal mean returns ``x_d`` (a deal's return averaged over its games).

    The deal is the unit: its mean return is one observation, whatever the spread of the
    games inside it (the seat-rotated duplicate already cancels much of the cards' luck).
    O(1) per deal (sums of ``x`` and ``x^2``), so a sequential test can ask after every deal.

    Attributes:
        deals: deals added. total: ``sum x_d`` (chips). squares: ``sum x_d^2``.
    """

    deals: int = 0
    total: float = 0.0
    squares: float = 0.0

    def add(self, mean_return: float) -> None:
        """Add one deal's mean return (chips)."""
        self.deals += 1
        self.total += mean_return
        self.squares += mean_return * mean_return

    @property
    def mean(self) -> float:
        """Mean over deals of the deal's mean return (chips; 0.0 before any deal)."""
        return self.total / self.deals if self.deals else 0.0

    @property
    def variance(self) -> float:
        """Sample variance (``ddof = 1``) of the deal means (chips^2; 0.0 with fewer than 2 deals)."""
        if self.deals < 2:
            return 0.0
        return max(self.squares - self.total * self.total / self.deals, 0.0) / (self.deals - 1)

    def interval(self, confidence: float = 0.95) -> tuple[float, float]:
        """Student-t interval of the mean by deal: ``mean +- t_{(1+c)/2, D-1} * s / sqrt(D)``.

        Returns ``(-inf, inf)`` with fewer than 2 deals (no spread to estimate).
        """
        if self.deals < 2:
            return -math.inf, math.inf
        from scipy.stats import t as student_t

        half = float(student_t.ppf(0.5 + confidence / 2, self.deals - 1)) * math.sqrt(self.variance / self.deals)
        return self.mean - half, self.mean + half


@dataclass(frozen=True)
class ReturnSPRT(WaldBounds):
    """Wald's SPRT of the mean of by-deal returns, normal model, variance estimated as it goes.

    H0: mean ``mu0`` against H1: mean ``mu1`` (chips per game, a deal's mean return), with
    error rates ``alpha`` (accepting H1 when H0 holds) and ``beta`` (accepting H0 when H1
    holds). For ``D`` deals with mean returns ``x_d`` drawn from ``N(mu, s^2)`` the
    log-likelihood ratio is ``(mu1 - mu0) / s^2 * (sum x_d - D (mu0 + mu1) / 2)`` (Wald 1945,
    section 5, the normal mean); ``s^2`` is the running sample variance of the deal means
    (:class:`ReturnTally`), the plug-in form of Rushton's (1950) sequential t-test, floored
    at ``var_floor`` so that a run of identical deals gives a finite ratio. Bounds as
    :class:`SPRT`: accept H1 at ``log((1-beta)/alpha)``, H0 at ``log(beta/(1-alpha))``.

    The normal model is an approximation for poker's returns (discrete chips, many
    ties at 0); its realised error rates are measured by simulation on such a distribution
    in ``tests/test_stats_returns.py`` (at H0 and at H1, 400 gates each).
    """

    mu0: float
    mu1: float
    alpha: float = 0.05
    beta: float = 0.05
    var_floor: float = 1e-6

    def __post_init__(self) -> None:
        if not self.mu0 < self.mu1:
            raise ValueError(f"ReturnSPRT needs mu0 < mu1, got mu0={self.mu0}, mu1={self.mu1}")
        check_error_rates(self.alpha, self.beta)

    def llr(self, tally: ReturnTally) -> float:
        """Log-likelihood ratio of the deals in ``tally`` (0.0 with fewer than 2 deals)."""
        if tally.deals < 2:
            return 0.0
        var = max(tally.variance, self.var_floor)
        return (self.mu1 - self.mu0) / var * (tally.total - tally.deals * (self.mu0 + self.mu1) / 2)


@dataclass(frozen=True)
class MeanTestResult:
    """What :func:`sequential_mean_test` found.

    Attributes:
        decision: the hypothesis accepted, or the one ``truncation`` settled on at ``max_deals``.
        decided_early: True when a Wald bound was crossed before ``max_deals``.
        deals: deals played. played: games played.
        mean_return: mean over deals of the deal's mean return (chips per game).
        return_low, return_high: its t interval by deal (chips per game; infinite with one deal).
        return_std: standard deviation of the deal means (chips per game).
        llr: the log-likelihood ratio (nats, :meth:`ReturnSPRT.llr`).
        llr_upper, llr_lower: the accept-H1 and accept-H0 bounds (nats).
    """

    decision: Hypothesis
    decided_early: bool
    deals: int
    played: int
    mean_return: float
    return_low: float
    return_high: float
    return_std: float
    llr: float
    llr_upper: float
    llr_lower: float


@dataclass(frozen=True)
class ReturnNonInferiority(MeanTestResult, Margin):
    """What :func:`return_non_inferiority` found (the :class:`MeanTestResult`, the ``ml.judge.sequential.Margin``
    in chips per game, and this).

    Attributes:
        par: mean return of an equal candidate (chips per game).
    """

    par: float


def sequential_mean_test(
    deals: Iterator[Sequence[float]],
    test: ReturnSPRT,
    min_deals: int,
    max_deals: int,
    confidence: float = 0.95,
    on_deal: OnDeal | None = None,
    *,
    truncation: Truncation = "H0",
) -> MeanTestResult:
    """Run a :class:`ReturnSPRT` over duplicate deals, the deal's mean return as the unit, stopping early.

    Args:
        deals: yields, per deal, the candidate's return (chips) in each game of the deal;
            consumed only as far as needed.
        test: the SPRT (``mu0`` the H0 mean, ``mu1`` the H1 mean, chips per game).
        min_deals: never decide before this many deals (>= 2: the variance needs two).
        max_deals: stop after this many deals; undecided is settled by ``truncation``.
        confidence: level of the reported t interval by deal.
        on_deal: called after each deal with the games played so far and ``llr``,
            ``llr_upper``, ``llr_lower`` and ``mean_return``: the test's path.
        truncation: undecided at ``max_deals``: ``"H0"`` counts as H0 (can only lower the
            false-accept rate); ``"nearer"`` takes the hypothesis the likelihood favours.

    Returns:
        The decision and the figures of the deals played (:class:`MeanTestResult`).

    Raises:
        ValueError: ``min_deals`` < 2, ``min_deals`` > ``max_deals``, or an unknown ``truncation``.
    """
    if truncation not in ("H0", "nearer"):
        raise ValueError(f"truncation must be 'H0' or 'nearer', got {truncation!r}")
    if not 2 <= min_deals <= max_deals:
        raise ValueError(f"need 2 <= min_deals <= max_deals, got {min_deals} and {max_deals}")
    tally = ReturnTally()
    counts = {"played": 0}

    def step(deal: Sequence[float]) -> DealStep:
        counts["played"] += len(deal)
        tally.add(float(np.mean(deal)) if len(deal) else 0.0)
        ready, exhausted = tally.deals >= min_deals, tally.deals >= max_deals
        return DealStep(counts["played"], test.llr(tally), {"mean_return": tally.mean}, ready, exhausted)

    decision, decided_early, llr = walk_deals(deals, step, test, on_deal, truncation)
    played = counts["played"]
    low, high = tally.interval(confidence)
    return MeanTestResult(
        decision=decision, decided_early=decided_early, deals=tally.deals, played=played, mean_return=tally.mean,
        return_low=low, return_high=high, return_std=math.sqrt(tally.variance), llr=llr, llr_upper=test.upper,
        llr_lower=test.lower,
    )  # fmt: skip


def return_non_inferiority(
    deals: Iterator[Sequence[float]], par: float, margin: float, *, alpha: float = 0.05, beta: float = 0.05,
    min_deals: int = 100, max_deals: int = 1000, confidence: float = 0.95,
) -> ReturnNonInferiority:  # fmt: skip
    """Sequential non-inferiority test of a candidate's mean return against the current player.

    The return analogue of :func:`student_non_inferiority` for zero-sum games: the candidate
    plays the current student in seat-rotated duplicate deals; its mean return is ``par``
    (0 in a zero-sum game) when the two are equal. The test is :func:`sequential_mean_test`
    of H0 "worse by the margin", ``par - margin``, against H1 "not worse", ``par``, Wald's
    rule at truncation; the candidate is rejected (``regression``) when H0 is accepted.
    ``alpha`` is the rate of accepting a candidate worse by exactly the margin, ``beta`` that
    of rejecting an equal one (measured in ``tests/test_stats_returns.py``).

    Args:
        deals: per deal, the candidate's return (chips) in each game.
        par: mean return of an equal candidate (``GameSpec.par_return``).
        margin: the fall back (chips per game, > 0) that must be rejected.
        alpha, beta: error rates as above.
        min_deals, max_deals: fewest deals before a decision, most deals played.
        confidence: level of the reported interval.

    Returns:
        The :class:`MeanTestResult` with ``par``, ``margin`` and ``regression`` (a :class:`ReturnNonInferiority`).

    Raises:
        ValueError: ``margin`` <= 0, or as :class:`ReturnSPRT` and :func:`sequential_mean_test`.
    """
    if margin <= 0:
        raise ValueError(f"return margin must be > 0 chips, got {margin}")
    test = ReturnSPRT(par - margin, par, alpha, beta)
    result = sequential_mean_test(deals, test, min_deals, max_deals, confidence, truncation="nearer")
    return ReturnNonInferiority(**vars(result), par=par, margin=margin, regression=result.decision == "H0")
