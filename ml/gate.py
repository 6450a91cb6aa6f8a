"""Quality gate: may a candidate PPO batch join the training data?

The verdict rests on two checks, each on fresh data, plus logged data-quality figures:

(a) **Strength.** The PPO agent plays ``eval_games`` fresh pods (seeds never used by
    self-play or export) against ``pod_size - 1`` heuristic teachers, seat-rotated. The
    lower end of the two-sided Wilson score interval of its win rate must exceed
    ``min_win_rate`` (parity in a 4-pod is 0.25). One evaluation, never the best of many.
(b) **No imitation regression.** A student trained with the candidate batch must not lose
    more than ``max_accuracy_drop`` accuracy on the teacher holdout against the student
    trained without it (same seed, same data otherwise).
(c) **Data quality** (logged, not gating): entropy of the batch's macro-action
    distribution, and the distributions of ``reward`` and ``episode_return``.

References:
    Wilson, E. B. (1927), "Probable inference, the law of succession, and statistical
    inference", JASA 22(158). Computed with ``scipy.stats.binomtest(...).proportion_ci``.
"""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

import numpy as np
import torch
from scipy.stats import binomtest

from ml.encoding import RecordEncoder
from ml.policy import PolicyNet
from ml.records import iter_games, read_records
from ml.rollout import Controller, game_seeds, play_games, rotated_seatings
from ml.progress import ProgressBar


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


def evaluate_vs_heuristics(
    net: PolicyNet,
    *,
    games: int,
    pod_size: int,
    max_turns: int,
    num_envs: int,
    seed: int,
    encoder: RecordEncoder,
    opponent: str = "heuristic",
    progress: bool = True,
) -> dict:
    """Win rate of ``net`` (sampling its policy) in pods against ``pod_size - 1`` scripted players.

    The agent sits in seat ``g % pod_size`` of game ``g``; game seeds come from ``seed``.

    Returns:
        dict with ``games``, ``wins``, ``draws`` and ``win_rate``.
    """
    controllers = {"agent": Controller("net", net), opponent: Controller(opponent)}
    seatings = rotated_seatings(games, pod_size, "agent", lambda g, s: opponent)
    gen = torch.Generator().manual_seed(seed)
    wins = draws = 0
    runner = play_games(
        seatings,
        game_seeds(seed, games),
        controllers,
        pod_size=pod_size,
        max_turns=max_turns,
        num_envs=num_envs,
        encoder=encoder,
        generator=gen,
    )
    for result in ProgressBar(runner, total=games, desc="eval", unit="game", disable=not progress):
        wins += int(result.winner == result.seats.index("agent"))
        draws += int(result.winner is None)
    return {"games": games, "wins": wins, "draws": draws, "win_rate": wins / games}


def batch_quality(batch: Path) -> dict:
    """Data-quality figures of a PPO batch file.

    Returns:
        ``games``, ``decisions``, ``action_entropy_bits`` (Shannon entropy of the macro
        action distribution, bits), ``action_counts``, and mean/std/min/max of ``reward``
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
            actions[rec.action.macro_action or rec.action.type] += 1
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


def verdict(
    win: dict,
    accuracy_current: float,
    accuracy_candidate: float,
    batch: dict,
    *,
    min_win_rate: float,
    max_accuracy_drop: float,
    confidence: float,
) -> dict:
    """Combine the checks into the gate's verdict and figures.

    Args:
        win: ``evaluate_vs_heuristics`` result of the PPO agent.
        accuracy_current: teacher-holdout accuracy of the student trained without the batch.
        accuracy_candidate: the same for the student trained with the batch.
        batch: ``batch_quality`` figures.
        min_win_rate, max_accuracy_drop, confidence: gate params.

    Returns:
        ``gate/…`` metrics including ``gate/accepted`` (bool) and ``gate/reasons`` (list of str).
    """
    low, high = wilson_interval(win["wins"], win["games"], confidence)
    drop = accuracy_current - accuracy_candidate
    reasons = []
    if not low > min_win_rate:
        reasons.append(f"win-rate lower bound {low:.3f} <= min_win_rate {min_win_rate:.3f}")
    if drop > max_accuracy_drop:
        reasons.append(f"holdout accuracy drop {drop:.4f} > max_accuracy_drop {max_accuracy_drop:.4f}")
    if batch["games"] == 0:
        reasons.append("the batch holds no games")
    return {
        "gate/accepted": not reasons,
        "gate/reasons": reasons,
        "gate/eval_games": win["games"],
        "gate/wins": win["wins"],
        "gate/draws": win["draws"],
        "gate/win_rate": win["win_rate"],
        "gate/win_rate_low": low,
        "gate/win_rate_high": high,
        "gate/holdout_accuracy_current": accuracy_current,
        "gate/holdout_accuracy_candidate": accuracy_candidate,
        "gate/holdout_accuracy_drop": drop,
        "gate/batch": batch,
    }
