"""Tournaments: pods among the accepted students, the heuristic teacher and the random player.

Every pod holds the newest student, rotated through the seats; each game gives a full
ranking (and, in a two-player zero-sum game, the chips), which ``ml.judge.elo`` records and
``ml.judge.plackett_luce`` fits.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from ml.base.progress import ProgressBar
from ml.game.protocol import GameSpec
from ml.game.spec import Encoder
from ml.judge.elo import RANDOM, TEACHER, TournamentGame
from ml.model.policy import PolicyNet
from ml.play.controller import Controller
from ml.play.runner import Pods, play_games
from ml.play.seating import game_seeds, rotated_seatings
from ml.runtime.executor import LOCAL, Executor, chunk_ranges, chunk_seed


def tournament_seatings(
    newest: str, others: Sequence[str], games: int, pod_size: int, rng: np.random.Generator
) -> list[list[str]]:
    """Pods with ``newest`` rotated through the seats (``ml.play.seating.rotated_seatings``) and the
    other seats drawn uniformly from ``others`` (distinct where there are enough players,
    repeated otherwise)."""
    k = pod_size - 1

    def draw(g: int) -> list[str]:
        return [others[i] for i in rng.choice(len(others), size=k, replace=len(others) < k)]

    return rotated_seatings(games, pod_size, newest, draw)


@dataclass(frozen=True)
class TournamentPlay:
    """How a tournament is played.

    Attributes:
        games: games to play.
        num_envs: games played at once (batched).
        seed: seeds the seatings, the games and any sampling.
        chunk_games: games per chunk by game index (0: one chunk); chunk ``k`` samples with
            ``ml.runtime.executor.chunk_seed(seed, k)``.
    """

    games: int
    num_envs: int
    seed: int
    chunk_games: int = 0


@dataclass(frozen=True)
class _ChunkSetup:
    """What every chunk of one tournament reads (shared once: ``Executor.share``)."""

    controllers: Mapping[str, Controller]
    seatings: list[list[str]]
    seeds: list[int]
    play: TournamentPlay
    encoder: Encoder | None
    game: GameSpec


def play_tournament(
    students: Mapping[str, PolicyNet],
    newest: str,
    play: TournamentPlay,
    game: GameSpec,
    *,
    encoder: Encoder | None = None,
    executor: Executor = LOCAL,
    progress: bool | None = None,
) -> list[TournamentGame]:
    """Play ``play.games`` pods among students, the heuristic teacher and the random player.

    Students act greedily (arg-max over legal actions). Every pod holds ``newest``. The
    ``teacher`` player is the game's teacher (MCTS for OpenSpiel games), the anchor.

    Args:
        students: name -> PolicyNet of each accepted generation's student.
        newest: the student to rate now.
        play: games, batching, seed and chunking (:class:`TournamentPlay`).
        game: the game (``ml.game.protocol.GameSpec``): ``num_players`` seats per pod, the
            commander's ``max_turns`` cap.
        encoder: observation encoder (None: the game's own).
        executor: where the games are played (``ml.runtime.compute``: here or on a Ray cluster, same rankings).
        progress: show the progress bar (None: when stderr is a terminal).

    Returns:
        Per game, in game order, its :class:`TournamentGame`; ``returns`` only in a two-player
        zero-sum game (``GameSpec.zero_sum``).

    Raises:
        ml.runtime.executor.ComputeError: the Ray cluster was lost mid-stage.
    """
    controllers = {TEACHER: Controller(TEACHER), RANDOM: Controller(RANDOM)}
    controllers.update({name: Controller("net", net, greedy=True) for name, net in students.items()})
    others = [*sorted(set(controllers) - {newest, TEACHER, RANDOM}), TEACHER, RANDOM]  # the students, then the anchors
    seatings = tournament_seatings(newest, others, play.games, game.num_players, np.random.default_rng(play.seed))
    setup = executor.share(_ChunkSetup(controllers, seatings, game_seeds(play.seed, play.games), play, encoder, game))
    shown = sys.stderr.isatty() if progress is None else progress
    bar = ProgressBar(total=play.games, desc="rating", unit="game", disable=not shown)
    tasks = list(enumerate(chunk_ranges(play.games, play.chunk_games)))
    local = executor.backend == "local"
    if local:  # played in this process: the bar counts each game as it ends (one chunk is the whole tournament)
        chunks: Iterable[list[TournamentGame]] = (_tournament_chunk(t, setup.value, on_game=bar.update) for t in tasks)
    else:  # on a cluster: each chunk as it comes back
        chunks = executor.imap(_tournament_chunk, tasks, setup)
    rankings: list[TournamentGame] = []
    for chunk in chunks:
        rankings += chunk
        if not local:
            bar.update(len(chunk))
    bar.close()
    return rankings


def _tournament_chunk(
    task: tuple[int, range], setup: _ChunkSetup, on_game: Callable[[], object] | None = None
) -> list[TournamentGame]:
    """Play one chunk of a tournament: per game in index order, the entry of :func:`play_tournament`.

    ``on_game`` is called as each game ends (a progress bar's ``update``; it reads nothing).
    """
    k, indices = task
    game = setup.game
    results = []
    for result in play_games(
        Pods(setup.seatings, setup.seeds, indices), dict(setup.controllers), num_envs=setup.play.num_envs, encoder=setup.encoder,
        generator=torch.Generator().manual_seed(chunk_seed(setup.play.seed, k)), game=game,
    ):  # fmt: skip
        results.append(result)
        if on_game is not None:
            on_game()
    games: list[TournamentGame] = []
    for r in sorted(results, key=lambda r: r.index):
        played = TournamentGame(ranking=[r.seats[s] for s in r.ranking])
        if game.zero_sum:
            played["returns"] = [round(float(r.returns[s]) * game.reward_scale, 9) for s in r.ranking]
        games.append(played)
    return games
