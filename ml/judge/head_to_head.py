"""Two policies measured against each other and against the same opponents, paired by deal.

* **Mixed pods** (``mixed_deals``): each deal (one game seed) is played with the seats split
  between A and B (``n // 2`` seats for A, the rest for B, in every rotation; for an odd pod
  also the mirrored split), so each policy holds every seat equally often on the same cards.
  A's share of the first places between them and, in a zero-sum game, its mean return per seat
  and game (chips) are estimated by deal.
* **Against the same opponents** (``paired_against``): A and B each in seat-rotated duplicate
  deals (``ml.judge.deals.duplicate_deals``) against the same opponent on the *same* deals (one
  seed): the per-deal difference of their first-place rates (and chips) gives the interval of
  the difference, the pairing removing the deals' luck from it.

References:
    Agarwal et al. 2021, "Deep Reinforcement Learning at the Edge of the Statistical Precipice"
    (paired evaluation on the same episodes); the intervals are Student-t by deal
    (``ml.judge.mean_return.ReturnTally``) and Wilson on the Rao-Scott effective sample size
    (``ml.judge.stats.DealTally``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import islice

import numpy as np
import torch

from ml.game.protocol import GameSpec
from ml.judge.deals import deal_tasks, duplicate_deals
from ml.judge.mean_return import ReturnTally
from ml.judge.stats import DealTally
from ml.play.controller import Controller
from ml.play.runner import Pods, play_games
from ml.runtime.executor import LOCAL, Executor


def mixed_seatings(pod_size: int) -> list[list[str]]:
    """The seatings of one mixed deal: ``"a"`` in ``pod_size // 2`` seats (at least one) and ``"b"``
    in the others, every rotation; for an odd ``pod_size`` the mirrored split's rotations too.

    Each of A and B holds each seat equally often over a deal (2 players: ``ab``, ``ba``;
    4 players: ``aabb``, ``abba``, ``bbaa``, ``baab``).

    Raises:
        ValueError: ``pod_size`` < 2.
    """
    if pod_size < 2:
        raise ValueError(f"a mixed pod needs at least 2 seats, got {pod_size}")
    half = pod_size // 2
    patterns = [["a"] * half + ["b"] * (pod_size - half)]
    if pod_size % 2:
        patterns.append(["b"] * half + ["a"] * (pod_size - half))
    return [p[-r:] + p[:-r] if r else list(p) for p in patterns for r in range(pod_size)]


@dataclass(frozen=True)
class MixedDeal:
    """One mixed deal's outcome.

    Attributes:
        a_firsts, b_firsts: games whose first place went to a seat of A, of B.
        games: games played (draws: ``games - a_firsts - b_firsts``).
        a_return: A's mean return per seat and game (the game's own units, ``GameSpec.reward_scale``).
    """

    a_firsts: int
    b_firsts: int
    games: int
    a_return: float


_MixedSetup = tuple[dict[str, Controller], int, GameSpec]


def _mixed_chunk(task: tuple[list[int], int], setup: _MixedSetup) -> list[MixedDeal]:
    """Play one chunk of mixed deals (``mixed_deals``)."""
    deal_seeds, torch_seed = task
    controllers, num_envs, game = setup
    per_deal = mixed_seatings(game.num_players)
    seatings = [s for _ in deal_seeds for s in per_deal]
    seeds = [d for d in deal_seeds for _ in per_deal]
    results = sorted(
        play_games(Pods(seatings, seeds), controllers, game=game, num_envs=num_envs,
                   generator=torch.Generator().manual_seed(torch_seed)),
        key=lambda r: r.index,
    )  # fmt: skip
    out = []
    k = len(per_deal)
    for d in range(len(deal_seeds)):
        games = results[d * k : (d + 1) * k]
        firsts = [r.seats[r.winner] for r in games if r.winner is not None]
        a_seats = [float(r.returns[s]) for r in games for s, who in enumerate(r.seats) if who == "a"]
        out.append(
            MixedDeal(firsts.count("a"), firsts.count("b"), len(games), round(game.reward_scale * float(np.mean(a_seats)), 9))
        )
    return out


def mixed_deals(
    a: Controller,
    b: Controller,
    *,
    game: GameSpec,
    num_envs: int,
    seed: int,
    deals_per_chunk: int = 8,
    executor: Executor = LOCAL,
) -> Iterator[MixedDeal]:
    """Endless mixed deals of A against B (``mixed_seatings``), deal seeds drawn from ``seed``
    (numpy), chunk ``k`` sampling with ``chunk_seed(seed, k)``: the same seed, the same deals.

    Raises:
        ml.runtime.executor.ComputeError: the Ray cluster was lost mid-stage.
    """
    shared = executor.share(({"a": a, "b": b}, num_envs, game))
    for chunk in executor.imap(_mixed_chunk, deal_tasks(seed, deals_per_chunk), shared):
        yield from chunk


@dataclass
class Interval:
    """A mean by deal with its 95% interval (``low``/``high``; None with fewer than 2 deals)."""

    mean: float
    low: float | None
    high: float | None

    @classmethod
    def of(cls, tally: ReturnTally, confidence: float) -> Interval:
        """The mean of ``tally`` and its Student-t interval by deal."""
        if tally.deals < 2:
            return cls(tally.mean, None, None)
        low, high = tally.interval(confidence)
        return cls(tally.mean, low, high)


@dataclass
class HeadToHead:
    """What ``head_to_head`` measured (deals and games played; A's side of every figure).

    Attributes:
        deals, games: mixed deals and games played.
        a_first_share: A's share of the first places between A and B, ``low``/``high`` its
            interval by deal (Wilson, Rao-Scott), ``draws`` the games neither won.
        a_return: A's mean return per seat and game in the mixed pods (chips in a zero-sum game).
    """

    deals: int
    games: int
    a_first_share: float
    low: float
    high: float
    draws: int
    a_return: Interval


@dataclass(frozen=True)
class Play:
    """How the deals of a comparison are played.

    Attributes:
        game: the game. num_envs: games in flight at once. seed: seeds the deals and the sampling
        (the same seed: the same deals). confidence: of the intervals. executor: where the chunks run.
    """

    game: GameSpec
    num_envs: int
    seed: int
    confidence: float = 0.95
    executor: Executor = LOCAL


def head_to_head(a: Controller, b: Controller, deals: int, play: Play) -> HeadToHead:
    """A against B in ``deals`` mixed deals (``mixed_deals``), both greedy or not as their controllers say.

    Raises:
        ValueError: ``deals`` < 1.
    """
    if deals < 1:
        raise ValueError(f"deals must be >= 1, got {deals}")
    firsts, chips, games, draws = DealTally(), ReturnTally(), 0, 0
    played = mixed_deals(a, b, game=play.game, num_envs=play.num_envs, seed=play.seed, executor=play.executor)
    for deal in islice(played, deals):
        if deal.a_firsts + deal.b_firsts:
            firsts.add(deal.a_firsts, deal.a_firsts + deal.b_firsts)
        chips.add(deal.a_return)
        games += deal.games
        draws += deal.games - deal.a_firsts - deal.b_firsts
    low, high = firsts.interval(play.confidence) if firsts.trials else (0.0, 1.0)
    share = firsts.rate if firsts.trials else 0.5
    return HeadToHead(deals, games, share, low, high, draws, Interval.of(chips, play.confidence))


@dataclass
class Paired:
    """A and B against the same opponent on the same deals.

    Attributes:
        deals: deals played (each ``game.num_players`` games per policy).
        a_rate, b_rate: each one's first-place rate (share of its games).
        difference: ``a_rate - b_rate`` by deal, with its interval.
        a_return, b_return: each one's mean return per game (chips in a zero-sum game).
        return_difference: ``a_return - b_return`` by deal, with its interval.
    """

    deals: int
    a_rate: Interval
    b_rate: Interval
    difference: Interval
    a_return: Interval = field(default_factory=lambda: Interval(0.0, None, None))
    b_return: Interval = field(default_factory=lambda: Interval(0.0, None, None))
    return_difference: Interval = field(default_factory=lambda: Interval(0.0, None, None))


def paired_against(a: Controller, b: Controller, opponent: Controller, deals: int, play: Play) -> Paired:
    """A and B each against ``game.num_players - 1`` copies of ``opponent`` on the same ``deals`` deals.

    Raises:
        ValueError: ``deals`` < 1.
    """
    if deals < 1:
        raise ValueError(f"deals must be >= 1, got {deals}")
    tallies = {k: ReturnTally() for k in ("a", "b", "diff", "ra", "rb", "rdiff")}
    a_deals, b_deals = (
        islice(
            duplicate_deals(x, opponent, game=play.game, num_envs=play.num_envs, seed=play.seed, executor=play.executor), deals
        )
        for x in (a, b)
    )
    for da, db in zip(a_deals, b_deals, strict=True):
        rate_a, rate_b = (sum(1 for x in d.firsts if x) / len(d.firsts) for d in (da, db))
        ret_a, ret_b = float(np.mean(da.returns)), float(np.mean(db.returns))
        for key, value in (("a", rate_a), ("b", rate_b), ("diff", rate_a - rate_b), ("ra", ret_a), ("rb", ret_b),
                           ("rdiff", ret_a - ret_b)):  # fmt: skip
            tallies[key].add(value)
    iv = {k: Interval.of(t, play.confidence) for k, t in tallies.items()}
    return Paired(deals, iv["a"], iv["b"], iv["diff"], iv["ra"], iv["rb"], iv["rdiff"])
