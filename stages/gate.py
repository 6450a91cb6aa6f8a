"""DVC stage `gate`: may this attempt's PPO batch join the training data?

(a) an SPRT on the PPO agent's first-place rate in fresh seat-rotated duplicate deals
against heuristic teachers; (b) an exact McNemar test with a margin between the student
trained with the batch and the current student on the teacher holdout; (c) the candidate
student against the current student in pods (block only on a clear regression); (d)
data-quality figures of the batch (``ml.judge.gate.run_gate``). In a two-player zero-sum game (a)
and (c) test the mean return in chips, and ``gate.decide_by: nash_conv`` lets the students'
exact NashConv decide (``ml.judge.gate``). Writes the student trained with
the batch (with its training record: the next generation's train stage takes it as is when
it would train on the same data, ``ml.learn.supervised.build_and_train``) and the verdict with
every figure to ``metrics/gate.json``. The candidate is trained with the current student's
training seed (its checkpoint's ``train_seed``), so the holdout comparison is paired.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ml.runtime.cli import exit_stage, stage_main, stage_setup, write_metrics


def _args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", type=Path, required=True, help="PPO checkpoint")
    p.add_argument("--student", type=Path, required=True, help="current student checkpoint (trained without the batch)")
    p.add_argument("--teacher", type=Path, required=True, help="folder of teacher batches (holds the holdout)")
    p.add_argument("--forge", type=Path, help="folder of imported Forge files (teacher data, data/forge)")
    p.add_argument("--pool", type=Path, required=True, help="folder of accepted PPO batches")
    p.add_argument("--candidate", type=Path, required=True, help="folder holding the candidate batch")
    p.add_argument("--out-student", type=Path, required=True, help="checkpoint of the student trained with the batch")
    p.add_argument("--plots", type=Path, help="DVCLive folder of the learning curves (none: not logged)")
    p.add_argument("--metrics", type=Path, required=True, help="metrics JSON to write (the verdict)")


@stage_main
def main(argv: list[str] | None = None) -> int:
    args, params = stage_setup("gate", __doc__, argv, _args)
    from ml.base.io import DataFileError
    from ml.data.encoded_cache import CacheConfigError, default_cache_dir
    from ml.game.registry import make_game
    from ml.judge.gate import GateError, GateInputs, run_gate
    from ml.learn.curves import open_curves
    from ml.model.policy import load_policy, save_policy
    from ml.runtime.compute import open_executor
    from ml.runtime.executor import ComputeError

    curves = open_curves(args.plots)
    try:
        inputs = GateInputs(
            args.model, args.student, args.candidate, teacher_dir=args.teacher, forge_dir=args.forge, pool_dir=args.pool,
            cache_dir=default_cache_dir(), num_envs=params.selfplay.num_envs, seed=params.stage_seed("gate"),
            train_seed=load_policy(args.student)[1].get("train_seed", params.stage_seed("train")),
            device=params.base.torch_device,
        )  # fmt: skip
        with open_executor(params.compute, params.base.torch_threads) as executor:
            candidate_student, report = run_gate(
                inputs, params.gate, params.train, make_game(params.game, params.teacher), progress=args.progress,
                on_deal=curves.log if curves else None, executor=executor,
            )  # fmt: skip
    except (GateError, ComputeError, DataFileError, CacheConfigError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    save_policy(
        candidate_student,
        args.out_student,
        {"role": "candidate_student", "generation": params.run.generation, **report.candidate_record},
    )
    if curves:
        curves.close()
    write_metrics(args.metrics, report.metrics(), args, "gate", episodes=report.episodes)  # both checks' pods
    return 0


if __name__ == "__main__":
    exit_stage(main())
