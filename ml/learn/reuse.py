"""Train once: what a student is made from (its training fingerprint) and the checkpoint that can
stand in for training it again (``ml.learn.supervised.build_and_train``'s ``reuse``)."""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from ml.base.io import JSONObject, file_md5
from ml.data.dataset import ppo_files, teacher_files
from ml.data.encoded_cache import code_digest
from ml.model.policy import CheckpointError, PolicyNet, load_policy

if TYPE_CHECKING:
    from ml.config.sections import TrainParams
    from ml.game.protocol import GameSpec

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class TrainingData:
    """The folders a student is made from (``build_and_train``).

    Attributes:
        teacher_dir: folder of teacher batches (``ml-decisions-sim-*.jsonl``); a fixed share
            of its games is held out.
        pool_dirs: folders of accepted PPO batches (the gate adds the candidate's folder).
        forge_dir: folder of imported Forge files and their card table (``data/forge``),
            or None; a missing folder is no Forge data.
        cache_dir: folder of the encoded-batch cache (``ml.data.encoded_cache.EncodedCache``), or None.
        previous: the last accepted student's checkpoint, the warm start under ``train.warm_start``
            (the gate: the current student; the train stage: ``data/next_student``), or None; a
            missing file is none (the first generation).
    """

    teacher_dir: Path
    pool_dirs: tuple[Path, ...]
    forge_dir: Path | None = None
    cache_dir: Path | None = None
    previous: Path | None = None


TRAINING_FORMAT = 1
"""Version of ``training_fingerprint``'s inputs; bump it when what a student depends on changes."""

WARM_DATA_KEYS = ("holdout_fraction", "ppo_window", "min_reward_threshold", "hidden_sizes", "warm_start")
"""The ``train`` keys a warm-started student's fingerprint holds: what selects its data and its shape.
The optimisation knobs (epochs, rates, mixture weights) shape the next continuation, not the student
already made, so a retry that changes them keeps the accepted student (``training_fingerprint``)."""


def forge_folders(forge_dir: Path | None) -> list[Path]:
    """``[forge_dir]`` when it is a folder, else no folder."""
    return [forge_dir] if forge_dir is not None and forge_dir.is_dir() else []


def forge_extras(forge_dirs: list[Path], forge_paths: list[Path]) -> list[Path]:
    """The files of the Forge folders other than the decision files (the card table)."""
    return sorted(f for d in forge_dirs for f in d.iterdir() if f.is_file() and f not in forge_paths)


def training_fingerprint(cfg: TrainParams, game: GameSpec, data: TrainingData, device: str) -> str:
    """Hex MD5 of everything ``build_and_train`` makes a student from, but the seed.

    The files it reads (name and MD5 of each teacher batch, Forge file, card table and of
    the PPO batches of the window, in the order read), ``init_checkpoint``'s MD5, whether a
    last accepted student is there to warm-start from (``train.warm_start``; which one is left out:
    the train stage cannot know the student its reusable candidate started from, and it is the
    last accepted one by construction), the ``train`` params (under ``warm_start`` only
    :data:`WARM_DATA_KEYS`: a warm student made from the same data is taken whatever the
    optimisation knobs), the game, the device and torch thread count, torch and numpy versions and the
    code (``ml.data.encoded_cache.code_digest``, this module, ``ml.model.policy``). Two calls give the same
    value exactly when the student would be trained on the same data in the same way.

    Raises:
        NotADirectoryError: ``data.teacher_dir`` or a pool folder is missing.
    """
    forge_dirs = forge_folders(data.forge_dir)
    teacher, forge = teacher_files([data.teacher_dir], forge_dirs)
    groups = {
        "sim": teacher,
        "forge": forge,
        "forge_table": forge_extras(forge_dirs, forge),
        "ppo": ppo_files(list(data.pool_dirs), cfg.ppo_window),
    }
    ml_dir = Path(__file__).resolve().parents[1]
    doc = {
        "format": TRAINING_FORMAT,
        "train": cfg.model_dump(mode="json", include=set(WARM_DATA_KEYS) if cfg.warm_start else None),
        "game": game.fingerprint(),
        "device": str(device),
        "threads": torch.get_num_threads(),
        "versions": [torch.__version__, np.__version__],
        "code": [
            code_digest(),
            file_md5(ml_dir / "learn" / "supervised.py"),
            file_md5(Path(__file__)),
            file_md5(ml_dir / "model" / "policy.py"),
        ],
        "files": [[kind, p.name, file_md5(p)] for kind, paths in groups.items() for p in paths],
        "init": file_md5(Path(cfg.init_checkpoint)) if cfg.init_checkpoint else None,
        "warm": cfg.warm_start and data.previous is not None and data.previous.is_file(),
    }
    return hashlib.md5(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()


def reusable_student(path: Path | None, fingerprint: str) -> tuple[PolicyNet, JSONObject] | None:
    """The student checkpoint at ``path`` when it was trained as ``fingerprint`` says (its
    ``train_fingerprint`` metadata, ``build_and_train``'s ``record``), else None (also for a
    missing or unreadable file, said in the log)."""
    if path is None or not path.is_file():
        return None
    try:
        net, meta = load_policy(path)
    except CheckpointError as e:
        logger.warning("%s is no reusable student (%s): training", path, e)
        return None
    if meta.get("train_fingerprint") != fingerprint:
        logger.info("%s was trained on other data or params: training", path)
        return None
    return net, meta
