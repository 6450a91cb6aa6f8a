"""Teacher data: games where every seat is the game's teacher, every decision logged.

The teacher is the heuristic player for the commander and MCTS for OpenSpiel games
(``ml.game.registry.GameSpec.make_player``). All seats' decisions of ``games`` games go to
one sim batch ``ml-decisions-sim-<batch_id>.jsonl`` (``ml.records.BatchWriter``: the file
appears under its final name when the batch is complete; one game is held in memory).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import torch

from ml.game.registry import GameSpec
from ml.progress import ProgressBar
from ml.records import BatchWriter
from ml.rollout import Controller, game_seeds, play_games

logger = logging.getLogger(__name__)


def write_teacher_batch(
    out_dir: Path,
    game: GameSpec,
    *,
    batch_id: str,
    games: int,
    pod_size: int,
    max_turns: int,
    seed: int,
    progress: bool = False,
) -> dict[str, Any]:
    """Play ``games`` teacher-only games and write all their decisions as one sim batch.

    Args:
        out_dir: folder of the batch (created when missing).
        game: the game (``ml.game.registry.make_game``); commander records are encoded with
            its ``RecordEncoder``, OpenSpiel records carry their own observation.
        batch_id: the batch file's id (``teacher-s<base seed>``; see ``ml.records.batch_filename``).
        games: games to play (>= 1).
        pod_size: players per game.
        max_turns: turn cap in rounds (commander only; a game at the cap is a draw).
        seed: seeds the game seeds and the players (``Params.stage_seed("teacher")``).
        progress: show a progress bar.

    Returns:
        ``teacher/…`` metrics: ``games``, ``decisions``, ``draw_rate`` (share of games),
        ``decisions_per_s`` (decisions per second of wall time), ``game`` and ``kind`` (the
        teacher's name).

    Raises:
        ValueError: a bad batch id.
        ml.records.RecordError: a produced record that does not fit the schema (a bug).
    """
    encoder = None if game.is_openspiel else game.encoder()
    seatings = [["heuristic"] * pod_size for _ in range(games)]
    started = time.perf_counter()
    with BatchWriter(out_dir, "sim", batch_id) as writer:
        runner = play_games(
            seatings, game_seeds(seed, games), {"heuristic": Controller("heuristic")}, pod_size=pod_size,
            max_turns=max_turns, num_envs=1, encoder=encoder, generator=torch.Generator().manual_seed(seed),
            log_seats=lambda seats: list(range(len(seats))), game=game,
        )  # fmt: skip
        draws = 0
        for result in ProgressBar(runner, total=games, desc="teacher", unit="game", disable=not progress):
            writer.write_game(result.records, result.outcome)
            draws += int(result.winner is None)
    elapsed = time.perf_counter() - started
    return {
        "teacher/games": writer.games,
        "teacher/decisions": writer.decisions,
        "teacher/draw_rate": draws / games,
        "teacher/decisions_per_s": writer.decisions / elapsed,
        "teacher/game": game.name,
        "teacher/kind": game.teacher_name,
    }
