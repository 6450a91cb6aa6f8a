"""The teacher stage's output folder, ``data/teacher``, guarded against files put there by hand.

``data/teacher`` is the teacher stage's output, which DVC rewrites: :func:`foreign_teacher_files`
lists what the stage did not write (Forge files first of all), and ``loop.py`` refuses to run
until they are imported (``python loop.py import-forge``, ``ml.driver.forge_command``) and
moved out (:func:`foreign_files_message` says how).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ml.base.io import TMP_SUFFIX
from ml.data.batch_files import classify_file

FORGE_DIR = "data/forge"
"""Imported Forge files (repo-relative; ``dvc add``-tracked, read by the train and gate stages)."""
TEACHER_DIR = "data/teacher"
"""The teacher stage's output (``dvc.yaml``): DVC deletes what it did not write."""


def foreign_teacher_files(teacher_dir: str | Path) -> list[Path]:
    """Files in the teacher stage's output folder that the teacher stage did not write.

    The teacher stage writes only ``ml-decisions-sim-*.jsonl`` (and their ``*.tmp`` while it
    runs); anything else there, Forge files first of all, would be deleted by ``dvc repro``.

    Returns:
        Sorted paths (empty when the folder does not exist).
    """
    teacher_dir = Path(teacher_dir)
    if not teacher_dir.is_dir():
        return []
    return sorted(p for p in teacher_dir.iterdir() if classify_file(p) != "sim" and not p.name.endswith(TMP_SUFFIX))


def foreign_files_message(files: Sequence[Path], root: Path) -> str:
    """Why ``loop.py`` refuses to run with :func:`foreign_teacher_files`, and what to do."""
    rel = [str(p.relative_to(root)) if p.is_relative_to(root) else str(p) for p in files]
    return (
        f"{TEACHER_DIR} holds {len(rel)} file(s) the teacher stage did not write:\n  " + "\n  ".join(rel) + "\n"
        f"{TEACHER_DIR} is the teacher stage's output and `dvc repro` would delete them (nothing was changed).\n"
        f"To train on Forge files, import them (good lines are copied to {FORGE_DIR}, DVC-tracked; bad lines are listed):\n"
        f"  python loop.py import-forge {' '.join(rel)}\n"
        f"then move the originals out of {TEACHER_DIR} (and `git rm --cached` them if you committed them)."
    )
