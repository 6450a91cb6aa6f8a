"""Plackett-Luce Elo ratings with confidence intervals: the fit.

Every game gives a full ranking of its seats (``GameState.ranking``: the winner, then
survivors of a turn-cap draw by life, then the eliminated, last out first). Ratings are the
maximum-likelihood Plackett-Luce log-strengths ``theta`` over the whole history of games,
refitted in one batch each time (so the result does not depend on the order in which games
were played), with

* one player anchored (``theta = 0``, Elo 1500; the heuristic teacher, ``ml.judge.elo``);
* a weak Gaussian prior linking consecutive generations,
  ``theta_g - theta_{g-1} ~ N(0, prior_sigma^2)``, which keeps a generation with few
  games near its neighbours without deciding the fit;
* 95% intervals from the inverse Hessian of the negative log-posterior (the observed
  Fisher information) at the optimum.

Elo is ``1500 + 400 / ln(10) * theta``: with that scale a gap of 400 Elo means 10:1 odds in
a head-to-head choice, as in Elo's logistic model. The tournaments are played by
``ml.judge.tournament``; their games and refits are recorded by ``ml.judge.elo``.

References:
    Plackett, R. L. (1975), "The Analysis of Permutations", JRSS C 24(2); Luce, R. D.
    (1959), "Individual Choice Behavior". Hunter, D. R. (2004), "MM algorithms for
    generalized Bradley-Terry models", Ann. Statist. 32(1), section 5 (the PL likelihood).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from typing_extensions import TypedDict  # pydantic reads TypedDicts from typing_extensions before Python 3.12

ELO_BASE = 1500.0
ELO_SCALE = 400.0 / math.log(10.0)
"""Elo points per unit of log-strength (400 Elo = a factor 10 in strength)."""
Z95 = 1.959963984540054
"""Two-sided 95% normal quantile."""


class EloRow(TypedDict):
    """One player of a refit (``Ratings.table``): Elo with its 95% interval, rounded to 0.1."""

    player: str
    elo: float
    low: float
    high: float
    games: int


class GainRow(TypedDict):
    """Elo of the newest generation ``new`` minus the one before, ``old``, with its 95% interval."""

    new: str
    old: str
    elo: float
    low: float
    high: float


@dataclass
class Ratings:
    """A Plackett-Luce fit.

    Attributes:
        players: player names, index-aligned with the arrays.
        theta: float64[P] log-strengths (anchor 0).
        cov: float64[P, P] covariance of ``theta`` (anchor row/column 0).
        games: int64[P] games each player took part in.
    """

    players: list[str]
    theta: np.ndarray
    cov: np.ndarray
    games: np.ndarray

    def elo(self, name: str) -> float:
        return ELO_BASE + ELO_SCALE * float(self.theta[self.players.index(name)])

    def elo_interval(self, name: str) -> tuple[float, float]:
        i = self.players.index(name)
        half = Z95 * ELO_SCALE * math.sqrt(max(self.cov[i, i], 0.0))
        return self.elo(name) - half, self.elo(name) + half

    def gain(self, new: str, old: str) -> tuple[float, float, float]:
        """Elo of ``new`` minus ``old`` with its 95% interval ``(gain, low, high)``."""
        i, j = self.players.index(new), self.players.index(old)
        var = self.cov[i, i] + self.cov[j, j] - 2 * self.cov[i, j]
        gain = ELO_SCALE * float(self.theta[i] - self.theta[j])
        half = Z95 * ELO_SCALE * math.sqrt(max(var, 0.0))
        return gain, gain - half, gain + half

    def table(self) -> list[EloRow]:
        """One row per player: name, elo, low, high, games; strongest first."""
        rows: list[EloRow] = []
        for name, g in zip(self.players, self.games, strict=True):
            low, high = self.elo_interval(name)
            rows.append(
                EloRow(player=name, elo=round(self.elo(name), 1), low=round(low, 1), high=round(high, 1), games=int(g))
            )
        return sorted(rows, key=lambda r: -r["elo"])


def _stages(rankings: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per choice stage k: (chosen int[G], choice set int[G, K-k]) of PL's sequential choices."""
    k = rankings.shape[1]
    return [(rankings[:, s], rankings[:, s:]) for s in range(k - 1)]


def _objective(
    free: np.ndarray, anchor: int, n: int, stages: list[tuple[np.ndarray, np.ndarray]], prior_pairs: np.ndarray, prior_prec: float
) -> tuple[float, np.ndarray, np.ndarray]:
    """Negative log posterior of the free ratings (anchor fixed at 0), its gradient and Hessian over the free ones."""
    theta = np.insert(free, anchor, 0.0)
    nll = 0.0
    grad = np.zeros(n)
    hess = np.zeros((n, n))
    for chosen, sets in stages:
        t = theta[sets]
        m = t.max(axis=1, keepdims=True)
        e = np.exp(t - m)
        z = e.sum(axis=1, keepdims=True)
        p = e / z
        nll += float(np.sum(np.log(z[:, 0]) + m[:, 0] - theta[chosen]))
        np.add.at(grad, chosen, -1.0)
        np.add.at(grad, sets, p)
        cols = sets.shape[1]
        for a in range(cols):
            np.add.at(hess, (sets[:, a], sets[:, a]), p[:, a])
            for b in range(cols):
                np.add.at(hess, (sets[:, a], sets[:, b]), -p[:, a] * p[:, b])
    if len(prior_pairs):
        d = theta[prior_pairs[:, 0]] - theta[prior_pairs[:, 1]]
        nll += 0.5 * prior_prec * float(d @ d)
        np.add.at(grad, prior_pairs[:, 0], prior_prec * d)
        np.add.at(grad, prior_pairs[:, 1], -prior_prec * d)
        for a, b in prior_pairs:
            hess[a, a] += prior_prec
            hess[b, b] += prior_prec
            hess[a, b] -= prior_prec
            hess[b, a] -= prior_prec
    keep = np.arange(n) != anchor
    return nll, grad[keep], hess[np.ix_(keep, keep)]


def fit_plackett_luce(
    rankings: Sequence[Sequence[str]], anchor: str, prior_chain: Sequence[str] = (), prior_sigma_elo: float = 400.0
) -> Ratings:
    """Maximum-a-posteriori Plackett-Luce ratings of players from full rankings.

    Args:
        rankings: per game, player names from first place to last (all games the same
            length; a player may appear twice in a game, e.g. two heuristic seats).
        anchor: player fixed at Elo 1500 (must appear in the data).
        prior_chain: players linked by the weak prior, in order (consecutive generations).
        prior_sigma_elo: standard deviation of the prior on consecutive differences (Elo).

    Returns:
        Ratings with covariance from the inverse Hessian at the optimum.

    Raises:
        ValueError: empty data, ragged rankings or an anchor that never played.
    """
    if not rankings:
        raise ValueError("no games to rate")
    players = sorted({p for r in rankings for p in r} | set(prior_chain))
    if anchor not in players:
        raise ValueError(f"anchor {anchor!r} never played")
    index = {p: i for i, p in enumerate(players)}
    lengths = {len(r) for r in rankings}
    if len(lengths) != 1:
        raise ValueError(f"all rankings must have the same length, got {sorted(lengths)}")
    arr = np.asarray([[index[p] for p in r] for r in rankings], dtype=np.int64)
    n, a = len(players), index[anchor]
    pairs = np.asarray(
        [(index[x], index[y]) for x, y in zip(prior_chain[1:], prior_chain[:-1], strict=False)], dtype=np.int64
    ).reshape(-1, 2)
    prec = (ELO_SCALE / prior_sigma_elo) ** 2
    stages = _stages(arr)
    from scipy.optimize import (
        minimize,  # here, not at the top: 1.2 s to import, and the driver imports this module at every start
    )

    res = minimize(
        lambda f: _objective(f, a, n, stages, pairs, prec)[:2],
        np.zeros(n - 1),
        jac=True,
        hess=lambda f: _objective(f, a, n, stages, pairs, prec)[2],
        method="trust-exact",
        options={"gtol": 1e-10},
    )
    free = res.x
    for _ in range(20):  # Newton polish: the objective is convex, so this converges quadratically
        _, g, h = _objective(free, a, n, stages, pairs, prec)
        if np.max(np.abs(g), initial=0.0) < 1e-12:
            break
        free = free - np.linalg.lstsq(h, g, rcond=None)[0]
    theta = np.insert(free, a, 0.0)
    h = _objective(free, a, n, stages, pairs, prec)[2]
    cov_free = np.linalg.pinv(h)
    cov = np.zeros((n, n))
    keep = np.arange(n) != a
    cov[np.ix_(keep, keep)] = cov_free
    games = np.zeros(n, dtype=np.int64)
    for row in arr:
        for i in set(row.tolist()):
            games[i] += 1
    return Ratings(players, theta, cov, games)
