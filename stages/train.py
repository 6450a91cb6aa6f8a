"""DVC stage `train`: the supervised student, by imitation of teacher and accepted PPO data.

Reads the teacher batches, the imported Forge files (``--forge``, ``python loop.py
import-forge``; labels with their card table, bad lines reported and left out) and the pool
of accepted PPO batches, holds out a fixed share of teacher games, trains on the source mixture and writes the student checkpoint and
``metrics/train.json`` (holdout accuracy, realised source shares of the training set; for
kuhn_poker and leduc_poker the exact NashConv of the student, the teacher and the uniform
policy, ``ml.nashconv``).
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from ml.cli import stage_setup, write_metrics
from ml.dataset import DecisionSet, load_ppo, load_teacher
from ml.driver.forge_import import teacher_encoder
from ml.game.registry import make_game
from ml.params import Params
from ml.nashconv import nash_conv_metrics
from ml.policy import load_policy, save_policy
from ml.supervised import StudentConfig, train_student

logger = logging.getLogger(__name__)


def _args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--teacher", type=Path, required=True, help="folder of teacher batches")
    p.add_argument("--forge", type=Path, help="folder of imported Forge files and their card table (data/forge)")
    p.add_argument("--pool", type=Path, required=True, help="folder of accepted PPO batches")
    p.add_argument("--out", type=Path, required=True, help="student checkpoint to write")
    p.add_argument("--metrics", type=Path, required=True, help="metrics JSON to write")


def build_and_train(params: Params, teacher: Path, forge: Path | None, pools: list[Path], progress: bool):
    """Load data, train a student with the generation's training seed. Returns (net, metrics, holdout)."""
    encoder = teacher_encoder(make_game(params.game, params.teacher).encoder(), forge)
    forge_dirs = [forge] if forge is not None and forge.is_dir() else []
    train, holdout, stats = load_teacher([teacher], params.train.holdout_fraction, encoder, forge_dirs)
    if stats["forge_files"] and not params.train.source_weights.get("forge"):
        logger.warning("%s holds Forge decisions but train.source_weights gives forge no weight: not trained on", forge)
    ppo, ppo_stats = load_ppo(pools, encoder, params.train.min_reward_threshold, params.train.ppo_window)
    cfg = StudentConfig(**params.train.model_dump(include=set(StudentConfig.__dataclass_fields__)))
    init = load_policy(params.train.init_checkpoint)[0] if params.train.init_checkpoint else None
    net, metrics = train_student(
        DecisionSet.concat([train, ppo]), holdout, cfg, params.stage_seed("train"), progress, params.base.torch_device, init
    )
    metrics.update({f"train/{k}": v for k, v in {**stats, **ppo_stats}.items()})
    metrics["train/available_decisions"] = {"sim": 0, **train.source_counts(), "ppo": len(ppo)}
    return net, metrics, holdout


def main(argv: list[str] | None = None) -> int:
    args, params = stage_setup("train", __doc__, argv, _args)
    net, metrics, _ = build_and_train(params, args.teacher, args.forge, [args.pool], args.progress)
    metrics.update(nash_conv_metrics(net, make_game(params.game, params.teacher), args.teacher))  # kuhn/leduc only
    save_policy(
        net,
        args.out,
        {"role": "student", "generation": params.run.generation, "model_version": f"student-gen-{params.run.generation:03d}"},
    )
    write_metrics(args.metrics, metrics, args, "train")
    return 0


if __name__ == "__main__":
    sys.exit(main())
