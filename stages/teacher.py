"""DVC stage `teacher`: teacher games, every decision logged as a sim batch.

Writes ``<out>/ml-decisions-sim-<id>.jsonl`` (all seats are the game's teacher: the
heuristic for the commander, MCTS for OpenSpiel games) and ``metrics/teacher.json``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

from ml.cli import stage_setup, write_metrics
from ml.game.registry import make_game
from ml.records import BatchWriter
from ml.rollout import Controller, game_seeds, play_games
from ml.progress import ProgressBar


def _args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", type=Path, required=True, help="folder for the teacher batch")
    p.add_argument("--metrics", type=Path, required=True, help="metrics JSON to write")


def main(argv: list[str] | None = None) -> int:
    args, params = stage_setup("teacher", __doc__, argv, _args)
    seed, games, pod = params.stage_seed("teacher"), params.teacher.games, params.game.pod_size
    game = make_game(params.game, params.teacher)
    encoder = None if game.is_openspiel else game.encoder()
    seatings = [["heuristic"] * pod for _ in range(games)]
    started = time.perf_counter()
    with BatchWriter(args.out, "sim", f"teacher-s{params.base.seed}") as writer:
        runner = play_games(
            seatings, game_seeds(seed, games), {"heuristic": Controller("heuristic")}, pod_size=pod,
            max_turns=params.game.max_turns, num_envs=1, encoder=encoder, generator=torch.Generator().manual_seed(seed),
            log_seats=lambda seats: list(range(len(seats))), game=game,
        )  # fmt: skip
        draws = 0
        for result in ProgressBar(runner, total=games, desc="teacher", unit="game", disable=not args.progress):
            writer.write_game(result.records, result.outcome)
            draws += int(result.winner is None)
    elapsed = time.perf_counter() - started
    metrics = {
        "teacher/games": writer.games,
        "teacher/decisions": writer.decisions,
        "teacher/draw_rate": draws / games,
        "teacher/decisions_per_s": writer.decisions / elapsed,
        "teacher/game": game.name,
        "teacher/kind": game.teacher_name,
    }
    write_metrics(args.metrics, metrics, args, "teacher")
    return 0


if __name__ == "__main__":
    sys.exit(main())
