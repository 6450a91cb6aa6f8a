"""The gate's statistics that need no sequence: intervals by deal (Wilson, Rao-Scott) and the exact McNemar test.

The sequential tests on first places (Wald's SPRT, non-inferiority) are ``ml.judge.sequential``,
those on mean return (zero-sum games) ``ml.judge.mean_return``; both build on the tallies here.
Pure functions of counts and outcomes (no games are played here; ``ml.judge.gate`` plays them).
Rates are shares of games in [0, 1]. Games come in seat-rotated duplicate deals (one deal
replayed with the candidate in every seat), and the games of a deal are not independent:
the deal is the unit. Every rate over deals gets its variance from the spread of the
per-deal counts (:class:`DealTally`): the Rao-Scott design effect rescales the counts to
an effective sample size, on which the Wilson interval and the SPRT are computed.

References:
    Wald, A. (1945), "Sequential Tests of Statistical Hypotheses".
    McNemar, Q. (1947), "Note on the sampling error of the difference between correlated
    proportions or percentages", Psychometrika 12(2).
    Wilson, E. B. (1927), "Probable inference, the law of succession, and statistical
    inference", JASA 22(158).
    Rao, J. N. K. and Scott, A. J. (1992), "A simple method for the analysis of clustered
    binary data", Biometrics 48(2): the design effect of a clustered proportion and the
    effective sample size ``n / d``. Kish, L. (1965), "Survey Sampling", section 5.4
    (design effect); Cochran, W. G. (1977), "Sampling Techniques", 3rd ed., section 6.4
    (variance of a ratio estimator, here successes per trial over deals of unequal size).

Through scipy: the exact McNemar test is ``scipy.stats.binomtest(b, b + c, 0.5,
alternative="greater").pvalue``; :func:`wilson_interval` (whole counts) is
``binomtest(k, n).proportion_ci(method="wilson")``. The intervals by deal use the closed form
of :func:`wilson_bounds` instead, because their sample size is the Rao-Scott effective one,
``n / d``, a fraction, and ``binomtest`` takes integers only (``TypeError: k must be an
integer``, scipy 1.17). On whole counts the two agree to 3.4e-16 (every k of n <= 200 and of
n in {500, 1000, 2000, 4000}, at confidence 0.8 to 0.99: ``tests/test_deals.py``), scipy with
no continuity correction and the same k = 0 and k = n ends. Speed (one call, k = 37, n = 120):
``proportion_ci`` 817 us, the closed form 99 us (mostly ``norm.ppf``), 8x; the gate asks
once per test, after its last deal.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

# scipy.stats is imported where it is used: it takes 1.5-3 s to import, and the driver imports this
# module (through ml.judge.verdict and ml.judge.elo) at every start without calling a test.


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
    from scipy.stats import binomtest

    ci = binomtest(successes, trials).proportion_ci(confidence_level=confidence, method="wilson")
    return float(ci.low), float(ci.high)


def wilson_bounds(rate: float, trials: float, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval of a proportion from a rate and a (possibly fractional) sample size.

    The closed form of Wilson (1927): centre ``(p + z^2/2n) / (1 + z^2/n)``, half-width
    ``z / (1 + z^2/n) * sqrt(p(1-p)/n + z^2/4n^2)`` with ``z`` the two-sided normal quantile
    (``scipy.stats.norm.ppf``). With whole counts it equals :func:`wilson_interval`; it also
    takes an effective sample size (:meth:`DealTally.interval`).

    Args:
        rate: observed proportion in [0, 1].
        trials: sample size (> 0; 0 gives ``(0.0, 1.0)``).
        confidence: confidence level, e.g. 0.95.

    Returns:
        ``(low, high)``, both in [0, 1].
    """
    if trials <= 0:
        return 0.0, 1.0
    from scipy.stats import norm

    z = float(norm.ppf(0.5 + confidence / 2))
    shrink = 1 + z * z / trials
    centre = (rate + z * z / (2 * trials)) / shrink
    half = z / shrink * math.sqrt(max(rate * (1 - rate), 0.0) / trials + z * z / (4 * trials * trials))
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass
class DealTally:
    """Running sums over duplicate deals: deal d gave ``w_d`` successes in ``n_d`` trials.

    The rate is the ratio estimator ``p = sum w_d / sum n_d``. Its variance treats the deal
    as the unit (Cochran 1977, eq. 6.13, with deals as the sampled clusters):
    ``v = D / (D - 1) * sum (w_d - p n_d)^2 / N^2`` over ``D`` deals and ``N = sum n_d``
    trials. The design effect (Kish 1965) is ``v`` over the binomial variance
    ``p (1 - p) / N``, and dividing the counts by it gives the effective sample size of
    Rao and Scott (1992), on which binomial methods (Wilson interval, Wald's SPRT) hold.
    The design effect is floored at 1: a deal design with less variance than independent
    games (the four games of a deal between equal players give exactly one first place)
    never makes an interval narrower than independent games would, nor a test faster.

    O(1) per deal (sums of ``w^2``, ``w n``, ``n^2``), so a sequential test can ask after
    every deal.

    Attributes:
        deals: deals added. trials: ``N``. successes: ``sum w_d``.
    """

    deals: int = 0
    trials: int = 0
    successes: int = 0
    _ww: float = 0.0
    _wn: float = 0.0
    _nn: float = 0.0

    def add(self, successes: int, trials: int) -> None:
        """Add one deal's ``successes`` out of ``trials`` (a deal with 0 trials still counts as a deal)."""
        self.deals += 1
        self.trials += trials
        self.successes += successes
        self._ww += successes * successes
        self._wn += successes * trials
        self._nn += trials * trials

    @property
    def rate(self) -> float:
        """``sum w_d / sum n_d`` (0.0 before any trial)."""
        return self.successes / self.trials if self.trials else 0.0

    def design_effect(self) -> float:
        """Rao-Scott design effect ``d >= 1`` of the rate (1.0 with fewer than 2 deals or p in {0, 1})."""
        p = self.rate
        binomial = self.trials * p * (1 - p)
        if self.deals < 2 or binomial <= 0:
            return 1.0
        between = self.deals / (self.deals - 1) * (self._ww - 2 * p * self._wn + p * p * self._nn)
        return max(1.0, between / binomial)

    def effective(self) -> tuple[float, float]:
        """``(successes / d, trials / d)``: the effective counts of Rao and Scott (1992)."""
        d = self.design_effect()
        return self.successes / d, self.trials / d

    def interval(self, confidence: float = 0.95) -> tuple[float, float]:
        """Wilson interval of the rate on the effective sample size ``N / d`` (:func:`wilson_bounds`)."""
        return wilson_bounds(self.rate, self.effective()[1], confidence)


def deal_interval(deals: Sequence[Sequence[bool | None]], confidence: float = 0.95) -> tuple[float, float]:
    """95% (``confidence``) interval of the candidate's first-place rate over duplicate deals.

    A draw (None) counts as a trial without a first place. The deal is the unit
    (:class:`DealTally`: Wilson on the Rao-Scott effective sample size).

    Args:
        deals: per deal, whether the candidate took first place in each of its games.
        confidence: confidence level.

    Returns:
        ``(low, high)`` in [0, 1]; ``(0.0, 1.0)`` without games.
    """
    tally = DealTally()
    for deal in deals:
        tally.add(sum(1 for x in deal if x), len(deal))
    return tally.interval(confidence)


@dataclass(frozen=True)
class McNemarResult:
    """What :func:`mcnemar_regression` found on the holdout decisions.

    Attributes:
        regression: True when the drop exceeds the margin and the test says the candidate is worse.
        drop: accuracy of the current student minus the candidate's, ``(b - c) / N`` (fraction of decisions).
        p_value: one-sided exact McNemar p-value (1.0 without discordant pairs).
        only_current: ``b``, decisions only the current student gets right.
        only_candidate: ``c``, decisions only the candidate gets right.
        accuracy_current, accuracy_candidate: each student's share of right decisions, in [0, 1].
    """

    regression: bool
    drop: float
    p_value: float
    only_current: int
    only_candidate: int
    accuracy_current: float
    accuracy_candidate: float


def mcnemar_regression(
    correct_current: np.ndarray, correct_candidate: np.ndarray, margin: float, alpha: float = 0.05
) -> McNemarResult:
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
        The verdict, the test's figures and both accuracies (:class:`McNemarResult`).

    References:
        McNemar, Q. (1947), Psychometrika 12(2); exact form: b ~ Binomial(b + c, 1/2) under H0.
    """
    b = int(np.sum(correct_current & ~correct_candidate))
    c = int(np.sum(~correct_current & correct_candidate))
    n = len(correct_current)
    drop = (b - c) / n if n else 0.0
    from scipy.stats import binomtest

    p_value = float(binomtest(b, b + c, 0.5, alternative="greater").pvalue) if b + c else 1.0
    return McNemarResult(
        regression=bool(drop > margin and p_value < alpha), drop=drop, p_value=p_value, only_current=b, only_candidate=c,
        accuracy_current=float(correct_current.mean()), accuracy_candidate=float(correct_candidate.mean()),
    )  # fmt: skip
