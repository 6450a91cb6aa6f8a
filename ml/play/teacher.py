"""Teacher data: games where every seat is the game's teacher, every decision logged.

The teacher is the heuristic player for the commander and, for OpenSpiel games, the player
``teacher.policy`` names: MCTS, uniform, information-set MCTS or CFR+'s average policy
(``ml.game.protocol.GameSpec.make_player``); all but MCTS write their distribution into each
record's ``policy``, and ``explore`` makes a share of their moves uniform in these games. All seats' decisions of ``games`` games go to
one sim batch ``ml-decisions-sim-<batch_id>.jsonl`` (``ml.data.batch_files.BatchWriter``: the file
appears under its final name when the batch is complete). The games are cut into chunks of
``compute.chunk_games`` (0: ``TEACHER_CHUNK``) by game index, played by the stage's executor
(``ml.runtime.compute``: here or on a Ray cluster) and written in game order; one chunk per slot is held
in memory. Every seat is scripted and each game plays alone, so the chunking, and playing a
chunk's games at once (one batched step for all of them), change nothing.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

import torch
from typing_extensions import NotRequired  # typing's from Python 3.11

from ml.base.progress import ProgressBar
from ml.data.batch_files import BatchWriter, game_lines
from ml.game.protocol import GameSpec
from ml.play.controller import Controller
from ml.play.runner import Keep, Pods, StagePlay, play_games
from ml.play.seating import game_seeds
from ml.runtime.executor import chunk_ranges, chunk_seed

if TYPE_CHECKING:
    from ml.config.sections import TeacherParams

logger = logging.getLogger(__name__)

TEACHER_CHUNK = 32
"""Games per chunk when ``compute.chunk_games`` is 0 (bounds the records held in memory)."""


TeacherMetrics = TypedDict(
    "TeacherMetrics",
    {
        "teacher/games": int,
        "teacher/decisions": int,
        "teacher/draw_rate": float,
        "teacher/decisions_per_s": float,
        "teacher/game": str,
        "teacher/kind": str,
        "teacher/env_version": NotRequired[str],
    },
)
"""``write_teacher_batch``'s metrics (see its Returns)."""


def _all_seats(seats: list[str]) -> list[int]:
    return list(range(len(seats)))


@dataclass(frozen=True)
class TeacherSetup:
    """What every chunk of the teacher games plays (shared once per stage; picklable, it crosses process and Ray boundaries).

    Attributes:
        game: the game (its teacher is every seat).
        pods: every game's seating and simulator seed.
        seed: the stage's seed; chunk ``k`` samples with ``chunk_seed(seed, k)``.
    """

    game: GameSpec
    pods: Pods
    seed: int
    path: Path


def _teacher_chunk(task: tuple[int, range], setup: TeacherSetup) -> list[tuple[str, list[str], bool]]:
    """Play one chunk of teacher games: per game in index order, its id, its validated lines of the
    batch at ``setup.path`` (``ml.data.batch_files.game_lines``: the chunk's worker validates and
    serialises, the stage only writes) and whether it was a draw."""
    k, games = task
    game = setup.game
    runner = play_games(
        replace(setup.pods, indices=games), {"teacher": Controller("teacher")}, num_envs=len(games),
        generator=torch.Generator().manual_seed(chunk_seed(setup.seed, k)), keep=Keep(log_seats=_all_seats), game=game,
    )  # fmt: skip
    played = sorted(runner, key=lambda r: r.index)  # each game plays alone: the chunk's games in flight at once
    return [(*game_lines(r.records, r.outcome, "sim", setup.path), r.winner is None) for r in played]


def write_teacher_batch(out_dir: Path, game: GameSpec, cfg: TeacherParams, batch_id: str, how: StagePlay) -> TeacherMetrics:
    """Play ``games`` teacher-only games and write all their decisions as one sim batch.

    Args:
        out_dir: folder of the batch (created when missing).
        game: the game (``ml.game.registry.make_game``): ``num_players`` seats per game, the
            commander's ``max_turns`` cap (a game at the cap is a draw); commander records are
            encoded with its ``RecordEncoder``, OpenSpiel records carry their own observation.
        cfg: the ``teacher`` params: ``games`` to play (>= 1) and ``explore``, the share of the
            teacher's moves drawn uniformly in these games (``cfr`` and ``ismcts`` teachers, whose
            records keep the teacher's distribution as ``policy``); the others are the game's
            (``ml.game.registry.make_game`` reads them).
        batch_id: the batch file's id (``teacher-s<base seed>``; see ``ml.data.batch_files.batch_filename``).
        how: ``seed`` seeds the game seeds and the players (``Params.stage_seed("teacher")``), a
            progress bar, the executor and ``chunk_games`` (0: ``TEACHER_CHUNK``); the result
            depends on neither of the last two.

    Returns:
        ``teacher/…`` metrics: ``games``, ``decisions``, ``draw_rate`` (share of games),
        ``decisions_per_s`` (decisions per second of wall time), ``game`` and ``kind`` (the
        teacher's name) and, for a PettingZoo game, ``env_version`` (``GameSpec.env_version``).

    Raises:
        ValueError: a bad batch id.
        ml.data.batch_files.RecordError: a produced record that does not fit the schema (a bug).
        ml.runtime.executor.ComputeError: the Ray cluster was lost mid-stage.
    """
    games, executor = cfg.games, how.executor
    if cfg.explore:
        game = game.with_teacher_explore(cfg.explore)
    seatings = [["teacher"] * game.num_players for _ in range(games)]
    game.warm_up()  # a cold compile is not play: outside the rate and the progress bar's ETA
    started = time.perf_counter()
    tasks = list(enumerate(chunk_ranges(games, how.chunk_games or TEACHER_CHUNK)))
    with BatchWriter(out_dir, "sim", batch_id) as writer:
        setup = executor.share(TeacherSetup(game, Pods(seatings, game_seeds(how.seed, games)), how.seed, writer.path))
        bar = ProgressBar(total=games, desc="teacher", unit="game", disable=not how.progress)
        draws = 0
        for chunk in executor.imap(_teacher_chunk, tasks, setup):
            for game_id, lines, draw in chunk:
                writer.write_lines(game_id, lines)
                draws += int(draw)
            bar.update(len(chunk))
        bar.close()
    elapsed = time.perf_counter() - started
    metrics: TeacherMetrics = {
        "teacher/games": writer.games,
        "teacher/decisions": writer.decisions,
        "teacher/draw_rate": draws / games,
        "teacher/decisions_per_s": writer.decisions / elapsed,
        "teacher/game": game.name,
        "teacher/kind": game.teacher_name,
    }
    if game.env_version:
        metrics["teacher/env_version"] = game.env_version
    return metrics
