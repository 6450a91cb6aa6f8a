"""DVC stage `export`: the PPO agent's decisions from games it won, as one PPO batch.

Writes ``<out>/ml-decisions-ppo-<gen>-<attempt>.jsonl`` (Forge format plus the PPO
extension) and ``metrics/export.json``. Any older batch in ``<out>`` is removed first, so
the folder always holds exactly this attempt's candidate.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ml.runtime.cli import exit_stage, stage_main, stage_setup, write_metrics


def _args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", type=Path, required=True, help="PPO checkpoint")
    p.add_argument("--out", type=Path, required=True, help="folder for the candidate batch")
    p.add_argument("--metrics", type=Path, required=True, help="metrics JSON to write")


@stage_main
def main(argv: list[str] | None = None) -> int:
    args, params = stage_setup("export", __doc__, argv, _args)
    from ml.game.registry import make_game
    from ml.model.policy import load_policy
    from ml.play.export import export_batch
    from ml.play.runner import StagePlay
    from ml.runtime.compute import open_executor
    from ml.runtime.executor import ComputeError

    net, _ = load_policy(args.model)
    args.out.mkdir(parents=True, exist_ok=True)
    for old in args.out.glob("ml-decisions-*.jsonl"):
        old.unlink()
    try:
        with open_executor(params.compute, params.base.torch_threads) as executor:
            how = StagePlay(params.stage_seed("export"), args.progress, executor, params.compute.chunk_games)
            metrics = export_batch(
                net, args.out, params.export, params.run, make_game(params.game, params.teacher), how,
                num_envs=params.selfplay.num_envs,
            )  # fmt: skip
    except ComputeError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    write_metrics(args.metrics, dict(metrics), args, "export", episodes=metrics["export/games_played"])
    return 0


if __name__ == "__main__":
    exit_stage(main())
