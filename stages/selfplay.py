"""DVC stage `selfplay`: PPO self-play started from the student.

Opponents are drawn per seat from the pool (heuristic teacher, frozen policies of earlier
accepted generations found in ``--frozen``, the current policy). Writes the PPO agent's
checkpoint and ``metrics/selfplay.json``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ml.runtime.cli import stage_main, stage_setup, write_metrics


def _args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--student", type=Path, required=True, help="student checkpoint to start from")
    p.add_argument("--frozen", type=Path, required=True, help="folder of frozen earlier-generation checkpoints (*.pt)")
    p.add_argument("--out", type=Path, required=True, help="PPO checkpoint to write")
    p.add_argument("--plots", type=Path, help="DVCLive folder of the learning curves (none: not logged)")
    p.add_argument("--metrics", type=Path, required=True, help="metrics JSON to write")


@stage_main
def main(argv: list[str] | None = None) -> int:
    args, params = stage_setup("selfplay", __doc__, argv, _args)
    from ml.game.registry import make_game
    from ml.learn.curves import open_curves
    from ml.learn.ppo import train_ppo
    from ml.learn.settings import RunSettings
    from ml.model.policy import load_policy, save_policy
    from ml.runtime.compute import open_executor
    from ml.runtime.executor import ComputeError

    curves = open_curves(args.plots)
    student, _ = load_policy(args.student)
    wanted = params.selfplay.frozen_names
    paths = sorted(args.frozen.glob("*.pt")) if args.frozen.is_dir() else []
    missing = sorted(set(wanted or []) - {p.stem for p in paths})
    if missing:
        print(f"error: {args.frozen}: selfplay.frozen_names names {missing}, not found", file=sys.stderr)
        return 2
    frozen = {f"frozen:{p.stem}": load_policy(p)[0] for p in paths if wanted is None or p.stem in wanted}
    run = RunSettings(params.stage_seed("selfplay"), params.base.torch_device, args.progress)
    try:
        with open_executor(params.compute, params.base.torch_threads) as executor:
            net, trained = train_ppo(
                student, frozen, params.selfplay, make_game(params.game, params.teacher), run,
                on_update=curves.log if curves else None, executor=executor,
            )  # fmt: skip
    except ComputeError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    metrics = {**trained, "selfplay/frozen_opponents": sorted(frozen)}
    save_policy(net, args.out, {"role": "ppo", "generation": params.run.generation, "model_version": params.run.model_version})
    if curves:
        curves.close()
    write_metrics(args.metrics, metrics, args, "selfplay", episodes=trained["selfplay/episodes"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
