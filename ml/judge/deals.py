"""Seat-rotated duplicate deals: how every pod evaluation is played (gate, eval, bot report).

A deal is one game seed (the same shuffled decks and seat order, or the same chance outcomes
of an OpenSpiel game) replayed ``GameSpec.num_players`` times with the candidate in each seat:
the deal, not the game, is the unit of the intervals (``ml.judge.stats.DealTally``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import count, islice
from typing import Any

import numpy as np
import torch

from ml.base.progress import ProgressBar
from ml.game.registry import GameSpec
from ml.judge.stats import DealTally, ReturnTally
from ml.play.rollout import Controller, Pods, play_games, rotated_seatings
from ml.runtime.compute import LOCAL, Executor, chunk_seed


@dataclass(frozen=True)
class Deal:
    """One seat-rotated duplicate deal, seen from the candidate.

    Attributes:
        firsts: per game (one per seat of the candidate), True for its first place, False for
            another's, None for a draw.
        returns: per game, the candidate's return in the game's own units (OpenSpiel: its
            utilities, chips in poker; ``GameSpec.reward_scale`` times the seat's rewards).
    """

    firsts: list[bool | None]
    returns: list[float]


def _deal_chunk(task: tuple[list[int], int], setup: tuple) -> list[Deal]:
    """Play one chunk of duplicate deals (``duplicate_deals``)."""
    deal_seeds, torch_seed = task
    controllers, num_envs, encoder, game = setup
    pod_size = game.num_players
    scale = game.reward_scale
    seeds = [s for s in deal_seeds for _ in range(pod_size)]
    seatings = rotated_seatings(len(seeds), pod_size, "candidate", lambda g: ["opponent"] * (pod_size - 1))
    results = sorted(
        play_games(
            Pods(seatings, seeds), controllers, game=game, num_envs=num_envs, encoder=encoder,
            generator=torch.Generator().manual_seed(torch_seed),
        ),
        key=lambda r: r.index,
    )  # fmt: skip
    deals = [results[d * pod_size : (d + 1) * pod_size] for d in range(len(deal_seeds))]
    return [
        Deal(
            [None if r.winner is None else r.winner == r.seats.index("candidate") for r in deal],
            [round(float(r.returns[r.seats.index("candidate")]) * scale, 9) for r in deal],  # 1/13 * 13 is 1
        )
        for deal in deals
    ]


def duplicate_deals(
    candidate: Controller,
    opponent: Controller,
    *,
    game: GameSpec,
    num_envs: int,
    seed: int,
    encoder: Any = None,
    deals_per_chunk: int = 16,
    executor: Executor = LOCAL,
) -> Iterator[Deal]:
    """Seat-rotated duplicate deals: each deal (one game seed: same shuffled decks and seat
    order, or the same chance outcomes of an OpenSpiel game) is replayed ``game.num_players`` times
    with the candidate in each seat and ``opponent`` in the others. Yields, per deal in order,
    the candidate's first places and returns (:class:`Deal`). Endless: the caller stops (chunks
    of ``deals_per_chunk`` deals are played at once, batched, chunk ``k`` sampling with
    ``ml.runtime.compute.chunk_seed(seed, k)``; the executor plays chunks ahead, here or on a Ray
    cluster, with the same outcomes).

    Args:
        candidate: the controller measured.
        opponent: the controller of every other seat.
        game: the game (``ml.game.registry.GameSpec``): ``num_players`` seats per game (games
            per deal), the commander's ``max_turns`` cap.
        num_envs: games played at once.
        seed: seeds the deal seeds and the action sampling.
        encoder: the commander's observation encoder (None: a new one).
        deals_per_chunk: deals played per batch of games.
        executor: where the chunks are played (``ml.runtime.compute.make_executor``); the controllers go
            to it once.

    Returns:
        An endless iterator of :class:`Deal`, ``game.num_players`` games each.

    Raises:
        ml.runtime.compute.ComputeError: the Ray cluster was lost mid-stage.
    """
    setup = executor.share(({"candidate": candidate, "opponent": opponent}, num_envs, encoder, game))

    def tasks() -> Iterator[tuple[list[int], int]]:
        rng = np.random.default_rng(seed)
        for k in count():
            yield [int(x) for x in rng.integers(0, 2**31 - 1, size=deals_per_chunk)], chunk_seed(seed, k)

    for chunk in executor.imap(_deal_chunk, tasks(), setup):
        yield from chunk


def duplicate_deal_outcomes(candidate: Controller, opponent: Controller, **kw: Any) -> Iterator[list[bool | None]]:
    """The first places of :func:`duplicate_deals` (same arguments): per deal, a
    ``list[bool | None]`` of length ``game.num_players`` (True: the candidate's first place,
    False: another's, None: a draw)."""
    return (deal.firsts for deal in duplicate_deals(candidate, opponent, **kw))


@dataclass
class FirstPlaces:
    """First places counted beside a return test (:func:`returns_of`): the by-deal tally and the draws."""

    tally: DealTally = field(default_factory=DealTally)
    draws: int = 0


def returns_of(deals: Iterator[Deal], firsts: FirstPlaces) -> Iterator[list[float]]:
    """The returns of ``deals``, per deal, adding each deal's first places to ``firsts`` on the way
    (so a return test reports the first-place rate of the same deals)."""
    for deal in deals:
        firsts.tally.add(sum(1 for x in deal.firsts if x), len(deal.firsts))
        firsts.draws += sum(1 for x in deal.firsts if x is None)
        yield deal.returns


def pod_win_rate(
    candidate: Controller,
    opponent: Controller,
    *,
    games: int,
    game: GameSpec,
    num_envs: int,
    seed: int,
    progress: bool = False,
    label: str = "",
    executor: Executor = LOCAL,
) -> dict:
    """First places of ``candidate`` in pods of ``game`` (``ml.game.registry.GameSpec``) against
    ``game.num_players - 1`` copies of ``opponent``.

    Seat-rotated duplicate deals (``duplicate_deal_outcomes``): ``games`` is rounded
    down to whole deals of ``game.num_players`` games (at least one deal); a draw is no first
    place. ``executor`` (``ml.runtime.compute``) plays the deals, here or on a Ray cluster, with the same figures.
    ``progress`` shows a bar labelled ``label`` on stderr that is cleared when the deals are done.

    Returns:
        ``games``, ``wins``, ``draws``, ``deals``, ``win_rate``, ``low``, ``high`` (95% interval
        by deal: Wilson on the Rao-Scott effective sample size, ``ml.judge.stats.DealTally``) and
        ``design_effect``; for a zero-sum game (``GameSpec.zero_sum``) also ``mean_return``
        with ``return_low``/``return_high`` (chips per game, 95% t interval by deal,
        ``ml.judge.stats.ReturnTally``; None with one deal).
    """
    deals = duplicate_deals(
        candidate, opponent, game=game, num_envs=num_envs, seed=seed, encoder=None, executor=executor,
    )  # fmt: skip
    n_deals = max(1, games // game.num_players)
    firsts, chips = FirstPlaces(), ReturnTally()
    bar = ProgressBar(islice(deals, n_deals), total=n_deals, desc=label, unit="deal", disable=not progress, leave=False)
    for returns in returns_of(bar, firsts):  # the bar is cleared when done: the caller prints its row of a table next
        chips.add(sum(returns) / len(returns))
    tally, draws = firsts.tally, firsts.draws
    low, high = tally.interval()
    out: dict[str, Any] = {
        "games": tally.trials, "wins": tally.successes, "draws": draws, "deals": tally.deals,
        "win_rate": tally.rate, "low": low, "high": high, "design_effect": tally.design_effect(),
    }  # fmt: skip
    if game.zero_sum:
        r_low, r_high = chips.interval() if chips.deals > 1 else (None, None)  # one deal: no spread
        out.update(mean_return=chips.mean, return_low=r_low, return_high=r_high)
    return out
