"""DVC stage `train`: the supervised student, by imitation of teacher and accepted PPO data.

Reads the teacher batches, the imported Forge files (``--forge``, ``python loop.py
import-forge``; labels with their card table, bad lines reported and left out) and the pool
of accepted PPO batches, holds out a fixed share of teacher games, trains on the source
mixture (``ml.learn.supervised.build_and_train``) and writes the student checkpoint and
``metrics/train.json`` (holdout accuracy, realised source shares of the training set; for
kuhn_poker and leduc_poker the exact NashConv of the student, the teacher and the uniform
policy, ``ml.judge.nashconv``).

Trains once per data: when ``--reuse`` holds the gate's candidate student of the last accepted
attempt and it was trained on exactly this stage's data and params (its recorded training
fingerprint, ``ml.learn.reuse.training_fingerprint``), that student is the result (metrics
and learning curve as recorded, ``train/reused`` true); otherwise the stage trains (under
``train.warm_start`` from that last accepted student's weights).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ml.runtime.cli import exit_stage, stage_main, stage_setup, write_metrics


def _args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--teacher", type=Path, required=True, help="folder of teacher batches")
    p.add_argument("--forge", type=Path, help="folder of imported Forge files and their card table (data/forge)")
    p.add_argument("--pool", type=Path, required=True, help="folder of accepted PPO batches")
    p.add_argument("--reuse", type=Path, help="folder of the last accepted candidate student (student.pt; data/next_student)")
    p.add_argument("--out", type=Path, required=True, help="student checkpoint to write")
    p.add_argument("--plots", type=Path, help="DVCLive folder of the learning curves (none: not logged)")
    p.add_argument("--metrics", type=Path, required=True, help="metrics JSON to write")


@stage_main
def main(argv: list[str] | None = None) -> int:
    args, params = stage_setup("train", __doc__, argv, _args)
    from ml.base.io import DataFileError
    from ml.data.encoded_cache import default_cache_dir
    from ml.game.registry import make_game
    from ml.judge.nashconv import nash_conv_metrics
    from ml.learn.curves import open_curves
    from ml.learn.reuse import TrainingData
    from ml.learn.settings import RunSettings
    from ml.learn.supervised import build_and_train
    from ml.model.policy import CheckpointError, save_policy
    from ml.runtime.compute import open_executor
    from ml.runtime.executor import ComputeError

    curves = open_curves(args.plots)
    generation = params.run.generation
    try:
        cache_dir = default_cache_dir()
        game = make_game(params.game, params.teacher)
        last = args.reuse / "student.pt" if args.reuse else None  # the last accepted student
        with open_executor(params.compute, params.base.torch_threads) as executor:  # parses large files in pieces
            net, metrics, _ = build_and_train(
                params.train,
                game,
                TrainingData(args.teacher, (args.pool,), args.forge, cache_dir, previous=last),
                RunSettings(params.stage_seed("train"), params.base.torch_device, args.progress, executor),
                on_epoch=curves.log if curves else None,
                reuse=last,
            )
        metrics.update(nash_conv_metrics(net, game, args.teacher))  # {} but for small two-player zero-sum games
    except ComputeError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except (DataFileError, CheckpointError, ValueError) as e:  # a bad record, checkpoint or mixture: one line
        print(f"error: {e}", file=sys.stderr)
        return 2
    meta = {"role": "student", "generation": generation, "model_version": f"student-gen-{generation:03d}"}
    save_policy(net, args.out, {**meta, "train_seed": metrics["train/seed"]})  # the gate pairs its candidate with it
    if curves:
        curves.close()
    write_metrics(args.metrics, metrics, args, "train", episodes=0)  # learns from recorded games, plays none
    return 0


if __name__ == "__main__":
    exit_stage(main())
