"""Merge: the data the next generation starts from, after the gate's verdict.

The output folder holds four folders, each a full copy (never an update in place):
``pool`` (accepted PPO batches: the current pool, plus the candidate when accepted),
``rejected`` (rejected batches, kept for audit, never trained on), ``frozen`` (opponent
checkpoints: plus this attempt's PPO agent as ``gen<G>.pt`` when accepted) and ``students``
(each accepted generation's student, ``gen<G>.pt``, rated in the tournaments). ``loop.py``
promotes them to ``data/<name>`` before the next attempt (a DVC pipeline cannot feed its
own input).
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ml.io import TMP_SUFFIX
from ml.records import scan_batches

FOLDERS = ("pool", "rejected", "frozen", "students")
"""The merged folders, in the order they are copied (``dvc.yaml`` stage ``merge``)."""


def _copy_tree(src: Path, dst: Path) -> None:
    """Copy the files of ``src`` (not ``*.tmp``, not subfolders) into ``dst``; a missing ``src`` is empty."""
    dst.mkdir(parents=True, exist_ok=True)
    if src.is_dir():
        for f in sorted(src.iterdir()):
            if f.is_file() and not f.name.endswith(TMP_SUFFIX):
                shutil.copy2(f, dst / f.name)


def merge_generation(
    accepted: bool,
    candidate_dir: Path,
    model: Path,
    student: Path,
    current: Mapping[str, Path],
    out: Path,
    generation: int,
) -> dict[str, Any]:
    """Write ``out/{pool,rejected,frozen,students}``: the current folders plus this attempt's files.

    Built in ``<out>.tmp`` and renamed to ``out`` (any older ``out`` is removed first).

    Args:
        accepted: the gate's verdict (``gate/accepted``).
        candidate_dir: folder holding the attempt's one PPO batch.
        model: the attempt's PPO checkpoint (frozen as ``gen<generation:03d>.pt`` when accepted).
        student: the attempt's student checkpoint (kept as ``gen<generation:03d>.pt`` when accepted).
        current: the current folder of each name in :data:`FOLDERS`.
        out: the output folder.
        generation: the attempt's generation.

    Returns:
        ``merge/…`` metrics: ``accepted`` and the counts (files) of ``pool_batches``,
        ``rejected_batches``, ``frozen_opponents`` and ``students`` after the merge.

    Raises:
        ValueError: ``candidate_dir`` does not hold exactly one PPO batch (nothing written).
        KeyError: ``current`` lacks one of :data:`FOLDERS`.
    """
    (candidate,) = scan_batches(candidate_dir, sources=("ppo",))
    tmp = out.with_name(out.name + TMP_SUFFIX)
    shutil.rmtree(tmp, ignore_errors=True)
    for name in FOLDERS:
        _copy_tree(current[name], tmp / name)
    if accepted:
        shutil.copy2(candidate, tmp / "pool" / candidate.name)
        shutil.copy2(model, tmp / "frozen" / f"gen{generation:03d}.pt")
        shutil.copy2(student, tmp / "students" / f"gen{generation:03d}.pt")
    else:
        shutil.copy2(candidate, tmp / "rejected" / candidate.name)
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return {
        "merge/accepted": accepted,
        "merge/pool_batches": len(scan_batches(out / "pool", sources=("ppo",))),
        "merge/rejected_batches": len(scan_batches(out / "rejected", sources=("ppo",))),
        "merge/frozen_opponents": len(list((out / "frozen").glob("*.pt"))),
        "merge/students": len(list((out / "students").glob("*.pt"))),
    }
