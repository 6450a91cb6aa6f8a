"""Quality gate: may a candidate PPO batch join the training data?

The verdict rests on two checks, each on fresh data, plus logged data-quality figures:

(a) **Strength.** The PPO agent plays fresh pods (seeds never used by self-play or
    export) against ``pod_size - 1`` heuristic teachers, in seat-rotated duplicate deals
    (each deal replayed with the agent in every seat). An SPRT on its first-place rate,
    H0 parity (1/pod size) against H1 ``target_win_rate``, stops as soon as the outcome is
    decided (``SPRT``, ``sequential_test``); it must accept H1. One evaluation, never the
    best of many; the 95% Wilson interval is reported with it.
(b) **No imitation regression.** A student trained with the candidate batch and the
    current student (same seed, same data otherwise) are compared on the same
    teacher-holdout decisions by an exact McNemar test with a margin
    (``mcnemar_regression``).
(c) **Student non-regression.** The student trained with the batch plays the current
    student in seat-rotated pods; only a clear regression (the whole interval below
    parity minus a margin) rejects.
(d) **Data quality** (logged, not gating): entropy of the batch's macro-action
    distribution, and the distributions of ``reward`` and ``episode_return``.

References:
    Wald, A. (1945), "Sequential Tests of Statistical Hypotheses".
    McNemar, Q. (1947), "Note on the sampling error of the difference between correlated
    proportions or percentages", Psychometrika 12(2).
    Wilson, E. B. (1927), "Probable inference, the law of succession, and statistical
    inference", JASA 22(158). Computed with ``scipy.stats.binomtest(...).proportion_ci``.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from scipy.stats import binomtest

from ml.game.registry import GameSpec
from ml.records import iter_games, read_records
from ml.rollout import Controller, play_games


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
    outcomes: Iterator[list[bool]], test: SPRT, min_games: int, max_games: int, confidence: float = 0.95
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

    Returns:
        ``decision`` ("H1"/"H0"), ``decided_early`` (bool), ``games``, ``wins``, ``win_rate``,
        ``win_rate_low``/``win_rate_high`` (Wilson), ``llr``, ``llr_upper``, ``llr_lower``.
    """
    wins = games = 0
    decision = None
    for deal in outcomes:
        wins += sum(1 for x in deal if x)  # a draw (None) is not a first place: conservative
        games += len(deal)
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


def duplicate_deal_outcomes(
    candidate: Controller,
    opponent: Controller,
    *,
    pod_size: int,
    max_turns: int = 30,
    num_envs: int,
    seed: int,
    encoder: Any = None,
    deals_per_chunk: int = 16,
    game: GameSpec | None = None,
) -> Iterator[list[bool]]:
    """Seat-rotated duplicate deals: each deal (one game seed: same shuffled decks and seat
    order, or the same chance outcomes of an OpenSpiel game) is replayed ``pod_size`` times
    with the candidate in each seat and ``opponent`` in the others. Yields, per deal in order,
    the candidate's first places. Endless: the caller stops (chunks of ``deals_per_chunk``
    deals are played at once, batched). ``game`` (``ml.game.registry``) defaults to the
    commander of ``pod_size`` and ``max_turns``; its players must number ``pod_size``.
    """
    controllers = {"candidate": candidate, "opponent": opponent}
    gen = torch.Generator().manual_seed(seed)
    rng = np.random.default_rng(seed)
    while True:
        deal_seeds = [int(x) for x in rng.integers(0, 2**31 - 1, size=deals_per_chunk)]
        seeds = [s for s in deal_seeds for _ in range(pod_size)]
        seatings = [["candidate" if s == g % pod_size else "opponent" for s in range(pod_size)] for g in range(len(seeds))]
        results = sorted(
            play_games(
                seatings,
                seeds,
                controllers,
                pod_size=pod_size,
                max_turns=max_turns,
                num_envs=num_envs,
                encoder=encoder,
                generator=gen,
                game=game,
            ),
            key=lambda r: r.index,
        )
        for d in range(deals_per_chunk):
            deal = results[d * pod_size : (d + 1) * pod_size]
            yield [None if r.winner is None else r.winner == r.seats.index("candidate") for r in deal]


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


def batch_quality(batch: Path) -> dict:
    """Data-quality figures of a PPO batch file.

    Returns:
        ``games``, ``decisions``, ``action_entropy_bits`` (Shannon entropy of the macro
        action distribution, bits; OpenSpiel games: of the moves by ``action.raw``), ``action_counts``, and mean/std/min/max of ``reward``
        (per decision) and ``episode_return`` (per game).
    """
    actions: Counter[str] = Counter()
    rewards: list[float] = []
    returns: list[float] = []
    games = 0
    for game in iter_games(read_records(batch)):
        games += 1
        returns.append(float(game[0].episode_return or 0.0))
        for rec in game:
            actions[getattr(rec.action, "macro_action", None) or rec.action.raw or rec.action.type] += 1
            rewards.append(float(rec.reward or 0.0))
    total = sum(actions.values())
    entropy = -sum(c / total * math.log2(c / total) for c in actions.values()) if total else 0.0

    def summary(xs: list[float]) -> dict:
        if not xs:
            return {"mean": None, "std": None, "min": None, "max": None}
        a = np.asarray(xs)
        return {"mean": float(a.mean()), "std": float(a.std()), "min": float(a.min()), "max": float(a.max())}

    return {
        "games": games,
        "decisions": total,
        "action_entropy_bits": entropy,
        "action_counts": dict(sorted(actions.items())),
        "reward": summary(rewards),
        "episode_return": summary(returns),
    }


def student_non_regression(outcomes: list[bool | None], pod_size: int, margin: float, confidence: float = 0.95) -> dict:
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


def verdict(strength: dict, holdout: dict, student: dict, batch: dict, gated: bool = True) -> dict:
    """Combine the checks into the gate's verdict and figures.

    Args:
        strength: ``sequential_test`` result of the PPO agent against heuristic teachers (a).
        holdout: ``mcnemar_regression`` result plus ``accuracy_current``/``accuracy_candidate`` (b).
        student: ``student_non_regression`` result (candidate student vs current student).
        batch: ``batch_quality`` figures (c, logged).
        gated: when False the figures are reported but the batch is accepted whatever they say
            (``gate/reasons`` then lists what would have rejected it).

    Returns:
        ``gate/…`` metrics including ``gate/accepted`` (bool), ``gate/reasons`` (list of
        str) and ``gate/failed`` (names of failed checks: strength, holdout, student, empty).
    """
    reasons, failed = [], []
    if strength["decision"] != "H1":
        failed.append("strength")
        how = "the SPRT accepted H0 (parity)" if strength["decided_early"] else "the SPRT reached max games undecided"
        reasons.append(
            f"strength: {how}, LLR {strength['llr']:.2f} after {strength['games']} games, win rate {strength['win_rate']:.3f}"
        )
    if holdout["regression"]:
        failed.append("holdout")
        reasons.append(f"holdout accuracy drop {holdout['drop']:.4f} is a regression (McNemar p = {holdout['p_value']:.3g})")
    if student["regression"]:
        failed.append("student")
        reasons.append(
            f"the student trained with the batch regressed: win rate {student['win_rate']:.3f} [{student['win_rate_low']:.3f}, {student['win_rate_high']:.3f}] vs parity {student['parity']:.3f}"
        )
    if batch["games"] == 0:
        failed.append("empty")
        reasons.append("the batch holds no games")
    return {
        "gate/accepted": not reasons or not gated,
        "gate/gated": gated,
        "gate/reasons": reasons,
        "gate/failed": failed,
        "gate/eval_games": strength["games"],
        "gate/wins": strength["wins"],
        "gate/win_rate": strength["win_rate"],
        "gate/win_rate_low": strength["win_rate_low"],
        "gate/win_rate_high": strength["win_rate_high"],
        "gate/sprt_llr": strength["llr"],
        "gate/sprt_decision": strength["decision"],
        "gate/sprt_decided_early": strength["decided_early"],
        "gate/sprt_bounds": [strength["llr_lower"], strength["llr_upper"]],
        "gate/holdout_accuracy_current": holdout["accuracy_current"],
        "gate/holdout_accuracy_candidate": holdout["accuracy_candidate"],
        "gate/holdout_accuracy_drop": holdout["drop"],
        "gate/holdout_mcnemar_p": holdout["p_value"],
        "gate/student_win_rate": student["win_rate"],
        "gate/student_win_rate_low": student["win_rate_low"],
        "gate/student_win_rate_high": student["win_rate_high"],
        "gate/student_games": student["games"],
        "gate/student_draws": student["draws"],
        "gate/batch": batch,
    }
