"""Merge: the data the next generation starts from, after the gate's verdict.

The output folder holds five folders, each complete (never an update in place):
``pool`` (accepted PPO batches: the current pool, plus the candidate when accepted),
``rejected`` (rejected batches, kept for audit, never trained on), ``frozen`` (opponent
checkpoints: plus this attempt's PPO agent as ``gen<G>.pt`` when accepted), ``students``
(each accepted generation's student, ``gen<G>.pt``, rated in the tournaments) and
``next_student`` (``student.pt``: the gate's candidate student when accepted, which the next
generation's train stage takes instead of training again when its data and params match,
``ml.learn.supervised.build_and_train``; else the current one, carried). ``loop.py`` promotes them
to ``data/<name>`` before the next attempt (a DVC pipeline cannot feed its own input).

Files are hard-linked, not copied (a copy where the file system has no hard links), so a
merge costs the same whatever the size of the pool: batch files and checkpoints are written
once, atomically under a new name, and never changed in place by any stage or the loop.

A folder is built in ``<name>.tmp`` beside it and swapped in (remove, rename). A step that
fails raises ``ml.base.io.WriteError`` naming the folder, the step and its path (``cannot write
data/pool (removing data/pool/x.jsonl): Operation not permitted``) and removes the ``.tmp``
it made; one a kill left behind is removed by the next run before it builds its own.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from ml.base.io import TMP_SUFFIX, JSONObject, WriteError, file_md5, remove_tree, shown, writing
from ml.data.batch_files import scan_batches

FOLDERS = ("pool", "rejected", "frozen", "students", "next_student")
"""The merged folders, in the order they are copied (``dvc.yaml`` stage ``merge``)."""
APPEND_ONLY = ("pool", "rejected", "frozen", "students")
"""Folders the merge only adds to (it carries every current file forward): a file of one that
is missing from the merge output was put there by hand after the merge."""


def link_file(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
    """Hard-link ``src`` as ``dst`` (a new name; ``dst`` must not exist), or copy it (with its
    mtime) where hard links fail (another file system, no support).

    Raises:
        FileExistsError: ``dst`` exists.
        OSError: neither a link nor a copy could be made.
    """
    try:
        os.link(src, dst)
    except FileExistsError:
        raise
    except OSError:
        shutil.copy2(src, dst)


def _link_tree(src: Path | None, dst: Path, target: Path) -> None:
    """Link the files of ``src`` (not ``*.tmp``, not subfolders) into ``dst``; a missing ``src`` (or None) is empty.

    Raises:
        WriteError: ``dst`` or a link in it cannot be made, as part of writing ``target``.
    """
    with writing(target, f"creating {shown(dst)}"):
        dst.mkdir(parents=True, exist_ok=True)
    if src is not None and src.is_dir():
        for f in sorted(src.iterdir()):
            if f.is_file() and not f.name.endswith(TMP_SUFFIX):
                _link(f, dst / f.name, target)


def _link(src: Path, dst: Path, target: Path) -> None:
    """``link_file``; a failure is a WriteError of ``target`` naming ``dst``."""
    with writing(target, f"linking {shown(dst)}"):
        link_file(src, dst)


def _swap(tmp: Path, dst: Path, build: Callable[[], None]) -> None:
    """Build ``dst`` in ``tmp`` (``build``; a leftover ``tmp`` removed first), then remove ``dst`` and rename ``tmp`` to it.

    A kill leaves ``dst`` old, new or missing, and at most a ``tmp`` the next call removes; a
    failure removes ``tmp`` (best effort) and raises.

    Raises:
        WriteError: a step failed (the message names ``dst``, the step and its path).
    """
    remove_tree(tmp, dst)
    try:
        with writing(dst, f"creating {shown(tmp)}"):
            tmp.mkdir(parents=True)
        build()
        remove_tree(dst)
        with writing(dst, f"renaming {shown(tmp)} to {shown(dst)}"):
            tmp.rename(dst)
    except WriteError:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def merge_generation(
    accepted: bool,
    candidate_dir: Path,
    model: Path,
    student: Path,
    current: Mapping[str, Path],
    out: Path,
    generation: int,
    candidate_student: Path | None = None,
) -> JSONObject:
    """Write ``out/{pool,rejected,frozen,students,next_student}``: the current folders plus this attempt's files.

    Built in ``<out>.tmp`` and renamed to ``out`` (any older ``out`` is removed first; ``_swap``).

    Args:
        accepted: the gate's verdict (``gate/accepted``).
        candidate_dir: folder holding the attempt's one PPO batch.
        model: the attempt's PPO checkpoint (frozen as ``gen<generation:03d>.pt`` when accepted).
        student: the attempt's student checkpoint (kept as ``gen<generation:03d>.pt`` when accepted).
        current: the current folder of each name in :data:`FOLDERS` (``next_student`` may be
            left out: none yet).
        out: the output folder.
        generation: the attempt's generation.
        candidate_student: the gate's candidate student (trained with the batch): the next
            ``next_student/student.pt`` when accepted; None: no reuse (the folder is emptied).

    Returns:
        ``merge/…`` metrics: ``accepted`` and the counts (files) of ``pool_batches``,
        ``rejected_batches``, ``frozen_opponents`` and ``students`` after the merge.

    Raises:
        ValueError: ``candidate_dir`` does not hold exactly one PPO batch (nothing written).
        KeyError: ``current`` lacks one of :data:`FOLDERS` but ``next_student``.
        WriteError: a folder or link cannot be made, the old ``out`` removed or the new one
            renamed in (naming ``out``, the step and its path; the ``.tmp`` is removed).
    """
    (candidate,) = scan_batches(candidate_dir, sources=("ppo",))
    tmp = out.with_name(out.name + TMP_SUFFIX)

    def build() -> None:
        for name in FOLDERS:
            if name == "next_student":  # replaced when accepted, carried when rejected, emptied without a candidate student
                _link_tree(current.get(name) if not accepted and candidate_student is not None else None, tmp / name, out)
            else:
                _link_tree(current[name], tmp / name, out)
        if accepted:
            _link(candidate, tmp / "pool" / candidate.name, out)
            _link(model, tmp / "frozen" / f"gen{generation:03d}.pt", out)
            _link(student, tmp / "students" / f"gen{generation:03d}.pt", out)
            if candidate_student is not None:
                _link(candidate_student, tmp / "next_student" / "student.pt", out)
        else:
            _link(candidate, tmp / "rejected" / candidate.name, out)

    _swap(tmp, out, build)
    return {
        "merge/accepted": accepted,
        "merge/pool_batches": len(scan_batches(out / "pool", sources=("ppo",))),
        "merge/rejected_batches": len(scan_batches(out / "rejected", sources=("ppo",))),
        "merge/frozen_opponents": len(list((out / "frozen").glob("*.pt"))),
        "merge/students": len(list((out / "students").glob("*.pt"))),
    }


def same_file(a: Path, b: Path) -> bool:
    """Whether ``b`` holds ``a``'s bytes: the same file (a hard link: nothing read), or equal size and MD5."""
    if a.samefile(b):
        return True
    return a.stat().st_size == b.stat().st_size and file_md5(a) == file_md5(b)


def hand_made_changes(merged: Path, data: Path, names: Iterable[str] = APPEND_ONLY) -> list[tuple[Path, str]]:
    """What was changed by hand in the append-only folders among ``names`` since the last merge.

    Between merges ``data/<name>`` holds links to (a subset of) ``merged/<name>``'s files: the
    previous merge's output is promoted, and the next merge carries every file forward. So a
    file of ``data/<name>`` that ``merged/<name>`` lacks was put there by hand (promotion would
    delete it, the merge would carry it into the record), and one whose bytes differ was edited
    by hand (promotion would revert it). Cost: a ``stat`` per linked file (``same_file``).

    Returns:
        ``(path, "added" | "edited")`` sorted by path; empty when ``merged`` does not exist
        (no merge yet: nothing is promoted).
    """
    if not merged.is_dir():
        return []
    out = []
    for name in names:
        src, dst = merged / name, data / name
        if name not in APPEND_ONLY or not dst.is_dir():
            continue
        for f in sorted(dst.iterdir()):
            twin = src / f.name
            if not twin.exists():
                out.append((f, "added"))
            elif f.is_file() and not same_file(twin, f):
                out.append((f, "edited"))
    return out


def promote_folders(
    merged: Path, data: Path, names: Iterable[str], before_swap: Callable[[str], None] = lambda name: None
) -> list[str]:
    """Make ``data/<name>`` hold what ``merged/<name>`` holds, for each name, by hard links.

    A folder whose files are all the same (``same_file``: for linked files a ``stat``, so the
    cost does not grow with the pool) is left alone; another is rebuilt in ``<name>.tmp``
    (hard links, ``link_file``) and swapped in (remove, rename; ``_swap``). A kill anywhere
    leaves each folder old, new or missing, and at most a ``<name>.tmp`` the next run removes;
    running it again completes it. A missing ``merged/<name>`` is an empty folder.

    Args:
        merged: the merge output (``data/merged``).
        data: the folder the names are promoted into (``data``).
        names: the folders (``ml.driver.promotion.PROMOTED``).
        before_swap: called with the name once its new folder is built, before the swap
            (the driver's seam).

    Returns:
        The names whose folder was replaced.

    Raises:
        WriteError: a folder cannot be written (``data/<name>`` immutable, read-only, a full
            disk): the message names it, the step and its path; its ``.tmp`` is removed, the
            folders before it are promoted, those after it are as they were, and it is as it
            was or partly removed (the next run rebuilds it from ``merged``).
    """
    replaced = []
    for name in names:
        src, dst = merged / name, data / name
        want = {f.name: f for f in src.iterdir()} if src.is_dir() else {}
        have = {f.name: f for f in dst.iterdir()} if dst.is_dir() else {}
        if dst.is_dir() and want.keys() == have.keys() and all(same_file(want[k], have[k]) for k in want):
            continue
        tmp = dst.with_name(dst.name + TMP_SUFFIX)

        def build(src: Path = src, tmp: Path = tmp, dst: Path = dst, name: str = name) -> None:
            _link_tree(src, tmp, dst)
            before_swap(name)

        _swap(tmp, dst, build)
        replaced.append(name)
    return replaced
