"""The opponent league of PPO self-play: prioritized fictitious self-play (PFSP) weights.

The league is every accepted generation's frozen policies (agents and students) handed to the
self-play stage. An opponent seat of kind ``league`` (``selfplay.opponent_mix``) is one member,
drawn with probability

    q_i = floor + (1 - M * floor) * f(p_i) / sum_j f(p_j),   f(p) = (1 - p)^k,

where ``p_i`` is the learner's measured score against member ``i`` (a Beta(1, 1) posterior mean
over its games against it: 1 a game it placed above the member, 0.5 a tie, 0 else), ``k`` is
``selfplay.pfsp_k`` and ``floor`` is ``selfplay.league_floor`` (each of the M members' least
share; ``M * floor >= 1`` draws uniformly). The estimates start from the prior at each stage and
are updated from every round's games, so the next round plays more of the members the learner
does not yet beat.

References:
    Vinyals et al. 2019, "Grandmaster level in StarCraft II using multi-agent reinforcement
    learning", Nature 575 (PFSP, f_hard(x) = (1 - x)^p).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

PRIOR = 1.0
"""Pseudo-games of each outcome in a member's score estimate (Beta(1, 1): an unseen member counts 0.5)."""


@dataclass
class Tally:
    """Games the learner played against each opponent controller and its score there.

    Attributes:
        games: controller key -> opponent seats faced (a 4-pod with two of them counts 2).
        score: controller key -> the learner's points against them (1 above, 0.5 tie, 0 below).
    """

    games: dict[str, int] = field(default_factory=dict)
    score: dict[str, float] = field(default_factory=dict)

    def add(self, key: str, points: float) -> None:
        """Count one opponent seat of controller ``key`` where the learner scored ``points``."""
        self.games[key] = self.games.get(key, 0) + 1
        self.score[key] = self.score.get(key, 0.0) + points

    def merge(self, others: Iterable[Tally]) -> None:
        """Add the counts of ``others`` (in their order, so sums are the same bits every run)."""
        for other in others:
            for key in sorted(other.games):
                self.games[key] = self.games.get(key, 0) + other.games[key]
                self.score[key] = self.score.get(key, 0.0) + other.score[key]

    def shares(self) -> dict[str, float]:
        """The share of all opponent seats each controller key held (the mix actually played)."""
        total = sum(self.games.values())
        return {k: self.games[k] / total for k in sorted(self.games)} if total else {}

    def win_rate(self, key: str) -> float:
        """The learner's posterior-mean score against ``key`` (``PRIOR`` pseudo-games of each outcome)."""
        return (self.score.get(key, 0.0) + PRIOR) / (self.games.get(key, 0) + 2 * PRIOR)


def pfsp_probabilities(win_rates: np.ndarray, k: float, floor: float) -> np.ndarray:
    """Draw probabilities of the league's members from the learner's win rate against each.

    Args:
        win_rates: float64[M], the learner's estimated score against each member, in [0, 1].
        k: PFSP exponent of ``f(p) = (1 - p)^k`` (0: uniform; AlphaStar's "hard" weighting: 2).
        floor: each member's least probability; ``M * floor >= 1`` gives the uniform draw.

    Returns:
        float64[M], non-negative, summing to 1 (empty for an empty league).

    Raises:
        ValueError: a win rate outside [0, 1], a negative ``k`` or ``floor``.

    References:
        Vinyals et al. 2019 (PFSP); the floor keeps old members in play (the league's "old
        players at a floor weight").
    """
    p = np.asarray(win_rates, np.float64)
    if len(p) == 0:
        return p
    if k < 0 or floor < 0:
        raise ValueError(f"pfsp_k ({k}) and league_floor ({floor}) must be >= 0")
    if np.any((p < 0) | (p > 1)) or not np.all(np.isfinite(p)):
        raise ValueError(f"win rates must lie in [0, 1], got {p.tolist()}")
    m = len(p)
    if m * floor >= 1:
        return np.full(m, 1.0 / m)
    f = (1.0 - p) ** k
    total = f.sum()
    share = f / total if total > 0 else np.full(m, 1.0 / m)  # the learner beats every member always: uniform
    return floor + (1.0 - m * floor) * share


def league_probabilities(members: list[str], tally: Tally, k: float, floor: float) -> tuple[float, ...]:
    """``pfsp_probabilities`` of ``members`` (in that order) from the results in ``tally``."""
    rates = np.asarray([tally.win_rate(m) for m in members], np.float64)
    return tuple(float(x) for x in pfsp_probabilities(rates, k, floor))


def learner_points(seat: int, other: int, ranking: list[int], returns: np.ndarray, winner: int | None) -> float:
    """The learner's points against one opponent seat of a finished game.

    Args:
        seat: the learner's seat; other: the opponent's.
        ranking: seats from first place to last (``GameResult.ranking``; empty: by return).
        returns: float[players] each seat's return.
        winner: the winning seat, None for a draw.

    Returns:
        0.5 when the game is drawn and both returns are equal, else 1.0 when the learner placed
        above ``other``, 0.0 when below.
    """
    if winner is None and returns[seat] == returns[other]:
        return 0.5
    if ranking:
        return 1.0 if ranking.index(seat) < ranking.index(other) else 0.0
    return 1.0 if returns[seat] > returns[other] else 0.0 if returns[seat] < returns[other] else 0.5
