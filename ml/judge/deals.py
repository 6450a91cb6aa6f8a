"""Seat-rotated duplicate deals: how every pod evaluation is played (gate, eval, bot report).

A deal is one game seed (the same shuffled decks and seat order, or the same chance outcomes
of an OpenSpiel game) replayed ``GameSpec.num_players`` times with the candidate in each seat:
the deal, not the game, is the unit of the intervals (``ml.judge.stats.DealTally``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from itertools import count, islice

import numpy as np
import torch

from ml.base.progress import ProgressBar
from ml.game.protocol import GameSpec
from ml.game.spec import Encoder
from ml.judge.mean_return import ReturnTally
from ml.judge.sequential import FirstPlaceFigures
from ml.judge.stats import DealTally
from ml.play.controller import Controller
from ml.play.runner import Pods, play_games
from ml.play.seating import rotated_seatings
from ml.runtime.executor import LOCAL, Executor, chunk_seed


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


_Setup = tuple[dict[str, Controller], int, Encoder | None, GameSpec]
"""What every chunk of :func:`duplicate_deals` shares: the controllers by role, games at once, encoder, game."""


def _deal_chunk(task: tuple[list[int], int], setup: _Setup) -> list[Deal]:
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
    encoder: Encoder | None = None,
    deals_per_chunk: int = 16,
    executor: Executor = LOCAL,
) -> Iterator[Deal]:
    """Seat-rotated duplicate deals: each deal (one game seed: same shuffled decks and seat
    order, or the same chance outcomes of an OpenSpiel game) is replayed ``game.num_players`` times
    with the candidate in each seat and ``opponent`` in the others. Yields, per deal in order,
    the candidate's first places and returns (:class:`Deal`). Endless: the caller stops (chunks
    of ``deals_per_chunk`` deals are played at once, batched, chunk ``k`` sampling with
    ``ml.runtime.executor.chunk_seed(seed, k)``; the executor plays chunks ahead, here or on a Ray
    cluster, with the same outcomes).

    Args:
        candidate: the controller measured.
        opponent: the controller of every other seat.
        game: the game (``ml.game.protocol.GameSpec``): ``num_players`` seats per game (games
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
        ml.runtime.executor.ComputeError: the Ray cluster was lost mid-stage.
    """
    setup: _Setup = ({"candidate": candidate, "opponent": opponent}, num_envs, encoder, game)
    shared = executor.share(setup)
    for chunk in executor.imap(_deal_chunk, deal_tasks(seed, deals_per_chunk), shared):
        yield from chunk


def deal_tasks(seed: int, deals_per_chunk: int) -> Iterator[tuple[list[int], int]]:
    """Endless chunks of deals: chunk ``k`` is ``deals_per_chunk`` deal seeds drawn from ``seed``
    (numpy) and its sampling seed ``ml.runtime.executor.chunk_seed(seed, k)``; the same seed, the same deals."""
    rng = np.random.default_rng(seed)
    for k in count():
        yield [int(x) for x in rng.integers(0, 2**31 - 1, size=deals_per_chunk)], chunk_seed(seed, k)


def duplicate_deal_outcomes(
    candidate: Controller,
    opponent: Controller,
    *,
    game: GameSpec,
    num_envs: int,
    seed: int,
    deals_per_chunk: int = 16,
    executor: Executor = LOCAL,
) -> Iterator[list[bool | None]]:
    """The first places of :func:`duplicate_deals` (the same arguments, a new encoder): per deal, a
    ``list[bool | None]`` of length ``game.num_players`` (True: the candidate's first place,
    False: another's, None: a draw)."""
    deals = duplicate_deals(
        candidate, opponent, game=game, num_envs=num_envs, seed=seed, deals_per_chunk=deals_per_chunk, executor=executor
    )
    return (deal.firsts for deal in deals)


@dataclass
class FirstPlaces:
    """First places counted beside a return test (:func:`returns_of`): the by-deal tally and the draws."""

    tally: DealTally = field(default_factory=DealTally)
    draws: int = 0

    def figures(self, confidence: float = 0.95) -> FirstPlaceFigures:
        """The first places counted so far, with their ``confidence`` interval by deal."""
        low, high = self.tally.interval(confidence)
        t = self.tally
        return FirstPlaceFigures(
            games=t.trials, wins=t.successes, draws=self.draws, win_rate=t.rate, win_rate_low=low, win_rate_high=high
        )


@dataclass(frozen=True)
class PodRate:
    """What :func:`pod_win_rate` measured: the candidate's first places, and its chips in a zero-sum game.

    Attributes:
        games: games played (whole deals). wins: first places of the candidate. draws: drawn
            games. deals: deals played.
        win_rate: ``wins / games``, a share in [0, 1]; ``low``/``high`` its 95% interval by deal
            (Wilson on the Rao-Scott effective sample size, ``ml.judge.stats.DealTally``).
        design_effect: Rao-Scott design effect ``d >= 1`` of the rate.
        zero_sum: the game is zero-sum (``GameSpec.zero_sum``): the return figures are measured.
        mean_return: mean return per game (chips, by deal; None unless ``zero_sum``).
        return_low, return_high: its 95% t interval by deal (``ml.judge.mean_return.ReturnTally``;
            None unless ``zero_sum``, and with one deal).
    """

    games: int
    wins: int
    draws: int
    deals: int
    win_rate: float
    low: float
    high: float
    design_effect: float
    zero_sum: bool = False
    mean_return: float | None = None
    return_low: float | None = None
    return_high: float | None = None

    def row(self) -> dict[str, int | float | None]:
        """The table row of ``loop.py eval`` and the bot report: every attribute but ``zero_sum``, the
        return figures only in a zero-sum game, in the order above."""
        row: dict[str, int | float | None] = {
            "games": self.games, "wins": self.wins, "draws": self.draws, "deals": self.deals,
            "win_rate": self.win_rate, "low": self.low, "high": self.high, "design_effect": self.design_effect,
        }  # fmt: skip
        if self.zero_sum:
            row.update(mean_return=self.mean_return, return_low=self.return_low, return_high=self.return_high)
        return row


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
    label: str | None = None,
    executor: Executor = LOCAL,
) -> PodRate:
    """First places of ``candidate`` in pods of ``game`` (``ml.game.protocol.GameSpec``) against
    ``game.num_players - 1`` copies of ``opponent``.

    Seat-rotated duplicate deals (``duplicate_deal_outcomes``): ``games`` is rounded
    down to whole deals of ``game.num_players`` games (at least one deal); a draw is no first
    place. ``executor`` (``ml.runtime.compute``) plays the deals, here or on a Ray cluster, with the same figures.
    A ``label`` shows a progress bar so labelled on stderr, cleared when the deals are done
    (None: no bar).

    Returns:
        The first places, and the chips of a zero-sum game (:class:`PodRate`).
    """
    deals = duplicate_deals(
        candidate, opponent, game=game, num_envs=num_envs, seed=seed, encoder=None, executor=executor,
    )  # fmt: skip
    n_deals = max(1, games // game.num_players)
    firsts, chips = FirstPlaces(), ReturnTally()
    bar = ProgressBar(islice(deals, n_deals), total=n_deals, desc=label or "", unit="deal", disable=label is None, leave=False)
    for returns in returns_of(bar, firsts):  # the bar is cleared when done: the caller prints its row of a table next
        chips.add(sum(returns) / len(returns))
    tally, draws = firsts.tally, firsts.draws
    low, high = tally.interval()
    rate = PodRate(
        games=tally.trials, wins=tally.successes, draws=draws, deals=tally.deals, win_rate=tally.rate, low=low, high=high,
        design_effect=tally.design_effect(),
    )  # fmt: skip
    if not game.zero_sum:
        return rate
    r_low, r_high = chips.interval() if chips.deals > 1 else (None, None)  # one deal: no spread
    return replace(rate, zero_sum=True, mean_return=chips.mean, return_low=r_low, return_high=r_high)
