"""DVC stage `teacher`: teacher games, every decision logged as a sim batch.

Writes ``<out>/ml-decisions-sim-teacher-s<base.seed>.jsonl`` (all seats are the game's
teacher: the heuristic for the commander, MCTS for OpenSpiel games; ``ml.play.teacher``) and
``metrics/teacher.json``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ml.runtime.cli import exit_stage, stage_main, stage_setup, write_metrics


def _args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", type=Path, required=True, help="folder for the teacher batch")
    p.add_argument("--metrics", type=Path, required=True, help="metrics JSON to write")


@stage_main
def main(argv: list[str] | None = None) -> int:
    args, params = stage_setup("teacher", __doc__, argv, _args)
    from ml.game.registry import make_game
    from ml.play.runner import StagePlay
    from ml.play.teacher import write_teacher_batch
    from ml.runtime.compute import open_executor
    from ml.runtime.executor import ComputeError

    try:
        with open_executor(params.compute, params.base.torch_threads) as executor:
            how = StagePlay(params.stage_seed("teacher"), args.progress, executor, params.compute.chunk_games)
            metrics = write_teacher_batch(
                args.out, make_game(params.game, params.teacher), params.teacher, f"teacher-s{params.base.seed}", how
            )
    except ComputeError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    write_metrics(args.metrics, dict(metrics), args, "teacher", episodes=metrics["teacher/games"])
    return 0


if __name__ == "__main__":
    exit_stage(main())
