"""Sequential tests on first places, the deal as the unit: Wald's SPRT and non-inferiority.

The gate's strength check (a) is :func:`sequential_test` with an :class:`SPRT` of H0 parity
(1 / pod size) against H1 the target win rate; its student check (c) is
:func:`student_non_inferiority`. Each deal's first places join a ``ml.judge.stats.DealTally``,
whose Rao-Scott effective counts the LLR is computed on (``ml.judge.stats`` has the
intervals, the design effect and their references). The tests on mean return (zero-sum
games) are ``ml.judge.mean_return``.

References:
    Wald, A. (1945), "Sequential Tests of Statistical Hypotheses", Ann. Math. Statist. 16(2).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, TypeVar

from ml.judge.stats import DealTally

Hypothesis = Literal["H0", "H1"]
"""A sequential test's decision: ``"H1"`` (the alternative accepted) or ``"H0"``."""

Truncation = Literal["H0", "nearer"]
"""What an undecided test settles on at its budget: ``"H0"``, or the hypothesis the likelihood favours."""

OnDeal = Callable[[int, dict[str, float]], None]
"""``(games played, {"llr", "llr_upper", "llr_lower", and the test's running figure})``: a test's path."""

D = TypeVar("D")


class WaldBounds:
    """Wald's (1945, section 3) stopping bounds of an SPRT with error rates ``alpha`` and ``beta``."""

    alpha: float
    beta: float

    @property
    def upper(self) -> float:
        """Accept-H1 bound A = log((1-beta)/alpha)."""
        return math.log((1 - self.beta) / self.alpha)

    @property
    def lower(self) -> float:
        """Accept-H0 bound B = log(beta/(1-alpha))."""
        return math.log(self.beta / (1 - self.alpha))

    def decide(self, llr: float) -> Hypothesis | None:
        """``"H1"`` at or above :attr:`upper`, ``"H0"`` at or below :attr:`lower`, else None (keep playing)."""
        return "H1" if llr >= self.upper else "H0" if llr <= self.lower else None


def check_error_rates(alpha: float, beta: float) -> None:
    if not (0 < alpha < 0.5 and 0 < beta < 0.5):
        raise ValueError(f"SPRT error rates must be in (0, 0.5), got alpha={alpha}, beta={beta}")


@dataclass(frozen=True)
class SPRT(WaldBounds):
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
        check_error_rates(self.alpha, self.beta)

    def llr(self, wins: float, games: float) -> float:
        """Log-likelihood ratio of ``wins`` first places in ``games`` games (effective counts may be fractional)."""
        return wins * math.log(self.p1 / self.p0) + (games - wins) * math.log((1 - self.p1) / (1 - self.p0))


@dataclass(frozen=True)
class DealStep:
    """A sequential test after one more deal (what :func:`walk_deals` asks of it).

    Attributes:
        played: games played so far, the deal's included.
        llr: the log-likelihood ratio now (nats).
        figure: the test's running figure for the path (``{"win_rate": ...}``).
        ready: enough trials to decide.
        exhausted: the budget is spent: stop after this deal.
    """

    played: int
    llr: float
    figure: dict[str, float]
    ready: bool
    exhausted: bool


def walk_deals(
    deals: Iterable[D], step: Callable[[D], DealStep], bounds: WaldBounds, on_deal: OnDeal | None, truncation: Truncation
) -> tuple[Hypothesis, bool, float]:
    """Add deals with ``step`` until a Wald bound is crossed (once ``ready``) or the budget is spent.

    Returns:
        ``(decision, decided_early, llr)``: the hypothesis accepted, or the one ``truncation`` settles on
        (``"nearer"``: H1 when the LLR is >= 0, Wald's rule for a truncated test, Wald 1947,
        "Sequential Analysis", ch. 3); whether a bound was crossed; the last LLR (0.0 without deals).
    """
    decision: Hypothesis | None = None
    llr = 0.0
    for deal in deals:
        now = step(deal)
        llr = now.llr
        if on_deal is not None:
            on_deal(now.played, {"llr": llr, "llr_upper": bounds.upper, "llr_lower": bounds.lower, **now.figure})
        if now.ready:
            decision = bounds.decide(llr)
        if decision is not None or now.exhausted:
            break
    if decision is not None:
        return decision, True, llr
    return ("H1" if truncation == "nearer" and llr >= 0 else "H0"), False, llr


@dataclass(frozen=True)
class FirstPlaceFigures:
    """First places of the candidate over duplicate deals, the deal as the unit.

    Attributes:
        games: trials (games; decisive games only where draws are excluded).
        wins: first places of the candidate.
        draws: drawn games (no first place for anyone).
        win_rate: ``wins / games``, a share in [0, 1] (0.0 without games).
        win_rate_low, win_rate_high: its interval by deal (Wilson on the Rao-Scott effective
            sample size, :meth:`DealTally.interval`), in [0, 1].
    """

    games: int
    wins: int
    draws: int
    win_rate: float
    win_rate_low: float
    win_rate_high: float


@dataclass(frozen=True)
class SequentialResult(FirstPlaceFigures):
    """What :func:`sequential_test` found (the :class:`FirstPlaceFigures` of its deals, and these).

    Attributes:
        decision: the hypothesis accepted, or the one ``truncation`` settled on at ``max_games``.
        decided_early: True when a Wald bound was crossed before ``max_games``.
        played: games played, draws included.
        deals: deals played.
        design_effect: Rao-Scott design effect ``d >= 1`` of the rate (:meth:`DealTally.design_effect`).
        llr: Wald's log-likelihood ratio on the effective counts (nats).
        llr_upper, llr_lower: the accept-H1 and accept-H0 bounds (nats, :class:`SPRT`).
    """

    decision: Hypothesis
    decided_early: bool
    played: int
    deals: int
    design_effect: float
    llr: float
    llr_upper: float
    llr_lower: float


@dataclass(frozen=True)
class Margin:
    """What a non-inferiority test adds to its sequential test's result.

    Attributes:
        margin: the fall back rejected (in the test's unit: a first-place share, chips per game).
        regression: True when H0 (worse by the margin) was accepted: the candidate is rejected.
    """

    margin: float
    regression: bool


@dataclass(frozen=True)
class NonInferiority(SequentialResult, Margin):
    """What :func:`student_non_inferiority` found (the :class:`SequentialResult`, ``games`` decisive
    games, the :class:`Margin` as a share below parity, and this).

    Attributes:
        parity: the first-place share of an equal candidate, ``1 / pod_size``.
    """

    parity: float


def sequential_test(
    outcomes: Iterator[Sequence[bool | None]],
    test: SPRT,
    min_games: int,
    max_games: int,
    confidence: float = 0.95,
    on_deal: OnDeal | None = None,
    *,
    draws: Literal["loss", "exclude"] = "loss",
    truncation: Truncation = "H0",
) -> SequentialResult:
    """Run an SPRT over duplicate deals, the deal as the unit, stopping early.

    After each deal, Wald's LLR (``test.llr``) is computed on the Rao-Scott effective counts
    ``(wins / d, trials / d)`` of :class:`DealTally`: games of a deal that rise and fall
    together count for less than independent games, and with ``d = 1`` it is Wald's SPRT.
    Measured (``tests/test_gate.py``, ``docs/statistics.md``): on a game model whose deals
    carry a random effect, Wald's SPRT on games overshoots its false-accept rate (0.11 for
    0.05 at an intra-deal correlation of 0.2), the SPRT by deal keeps it.

    Args:
        outcomes: yields, per deal, whether the candidate took first place in each game of
            the deal (one game per seat of the candidate; None for a draw); consumed only as
            far as needed.
        test: the SPRT (``p0`` the H0 rate, ``p1`` the H1 rate).
        min_games: never decide before this many trials (games; decisive games with
            ``draws="exclude"``).
        max_games: stop once this many games were played (draws included); undecided is
            settled by ``truncation``.
        confidence: level of the reported interval (Wilson on the effective counts).
        on_deal: called after each deal with the games played so far and ``llr``,
            ``llr_upper``, ``llr_lower`` and ``win_rate``: the test's path (a learning-curve logger).
        draws: ``"loss"``: a draw is a trial without a first place (can only make H1 harder);
            ``"exclude"``: draws are no trials (the rate is among decisive games).
        truncation: undecided at ``max_games``: ``"H0"`` counts as H0; ``"nearer"`` takes the
            hypothesis the likelihood favours (H1 when the LLR is >= 0), Wald's rule for a
            truncated test (Wald 1947, "Sequential Analysis", ch. 3).

    Returns:
        The decision and the figures of the deals played (:class:`SequentialResult`).

    Raises:
        ValueError: an unknown ``draws`` or ``truncation``.
    """
    if draws not in ("loss", "exclude") or truncation not in ("H0", "nearer"):
        raise ValueError(f"draws must be 'loss' or 'exclude', truncation 'H0' or 'nearer'; got {draws!r}, {truncation!r}")
    tally = DealTally()
    counts = {"played": 0, "drawn": 0}

    def step(deal: Sequence[bool | None]) -> DealStep:
        n_drawn = sum(1 for x in deal if x is None)
        counts["played"] += len(deal)
        counts["drawn"] += n_drawn
        tally.add(sum(1 for x in deal if x), len(deal) - (n_drawn if draws == "exclude" else 0))
        ready, exhausted = tally.trials >= min_games, counts["played"] >= max_games
        return DealStep(counts["played"], test.llr(*tally.effective()), {"win_rate": tally.rate}, ready, exhausted)

    decision, decided_early, llr = walk_deals(outcomes, step, test, on_deal, truncation)
    played, drawn = counts["played"], counts["drawn"]
    low, high = tally.interval(confidence)
    return SequentialResult(
        games=tally.trials, wins=tally.successes, draws=drawn, win_rate=tally.rate, win_rate_low=low,
        win_rate_high=high, decision=decision, decided_early=decided_early, played=played, deals=tally.deals,
        design_effect=tally.design_effect(), llr=llr, llr_upper=test.upper, llr_lower=test.lower,
    )  # fmt: skip


class Stopped(Protocol):
    """How a sequential test ended: what :func:`stop_reason` reads of :class:`SequentialResult` or :class:`MeanTestResult`."""

    @property
    def decision(self) -> Hypothesis: ...
    @property
    def decided_early(self) -> bool: ...
    @property
    def played(self) -> int: ...


def stop_reason(result: Stopped, max_games: int) -> str:
    """Why a sequential test stopped where it did, for its progress bar's last line.

    Args:
        result: what :func:`sequential_test` or :func:`sequential_mean_test` returned.
        max_games: the test's game budget.

    Returns:
        ``decided early: SPRT accepted H1 after 120 of 1600 games`` or ``budget reached:
        1600 of 1600 games, undecided, counted as H0``.
    """
    if result.decided_early:
        return f"decided early: SPRT accepted {result.decision} after {result.played} of {max_games} games"
    return f"budget reached: {result.played} of {max_games} games, undecided, counted as {result.decision}"


def student_non_inferiority(
    outcomes: Iterator[Sequence[bool | None]],
    pod_size: int,
    margin: float,
    *,
    alpha: float = 0.05,
    beta: float = 0.05,
    min_games: int = 200,
    max_games: int = 2000,
    confidence: float = 0.95,
) -> NonInferiority:
    """Sequential non-inferiority test of the candidate student against the current one.

    The candidate sits in one seat against ``pod_size - 1`` copies of the current student,
    in seat-rotated duplicate deals. Its rate is its share of first places among decisive
    games: by symmetry exactly parity ``1 / pod_size`` when the two students are equal,
    whatever the draw rate (two similar greedy students often stall to the turn cap, and
    a draw says nothing about which is stronger). The test is the SPRT by deal
    (:func:`sequential_test`, draws left out) of H0 "worse by the margin",
    ``p = parity - margin``, against H1 "not worse", ``p = parity``; it stops as soon as one is
    accepted, and at ``max_games`` takes the one the likelihood favours. The candidate is
    rejected (``regression``) when H0 is accepted.

    Error rates (Wald's bounds, measured by simulation in ``tests/test_gate.py``):
    ``alpha`` = accepting a candidate worse by exactly the margin (false accept),
    ``beta`` = rejecting a candidate equal to the current student (false reject). A
    candidate worse by more than the margin is accepted less often, one in between is
    rejected with a probability between ``beta`` and ``1 - alpha``.

    Args:
        outcomes: per deal, whether the candidate took first place in each game (None: a draw).
        pod_size: players per pod (parity is ``1 / pod_size``).
        margin: the fall back (first-place share below parity, in (0, parity)) that must be rejected.
        alpha: false-accept rate at ``parity - margin``.
        beta: false-reject rate at parity.
        min_games: fewest decisive games before a decision.
        max_games: most games played (draws included).
        confidence: level of the reported interval (by deal).

    Returns:
        The :class:`SequentialResult` (``games`` counts decisive games) with ``parity``,
        ``margin`` and ``regression`` (True: the candidate is rejected), a :class:`NonInferiority`.

    Raises:
        ValueError: ``margin`` outside (0, parity), or error rates outside (0, 0.5).

    References:
        Wald (1945), as :class:`SPRT`; the non-inferiority hypotheses as in Wellek, S. (2010),
        "Testing Statistical Hypotheses of Equivalence and Noninferiority", 2nd ed., ch. 2.
    """
    parity = 1.0 / pod_size
    if not 0 < margin < parity:
        raise ValueError(f"student margin must be in (0, {parity:g}), got {margin}")
    test = SPRT(parity - margin, parity, alpha, beta)
    result = sequential_test(outcomes, test, min_games, max_games, confidence, draws="exclude", truncation="nearer")
    return NonInferiority(**vars(result), parity=parity, margin=margin, regression=result.decision == "H0")
