"""The guard on DVC-tracked data: a tracked file changed behind the loop's back stops it.

Files under ``data/`` are hard links to their DVC cache objects (``.dvc/config`` ``cache.type``;
docs/design-notes.md, "Flat cost per attempt"). A file written in place (as root its read-only
mode does not stop that) changes the object too, and every commit that records the file shares
that object: checking one of them out brings the edit back, and ``dvc checkout --force`` links
the edited object again. Left alone, the next attempt would ``dvc add`` the edited file into
its own commit and train or gate on it.

:func:`tracked_changes` compares every DVC-tracked file (the ``data/*.dvc`` pointers and the
cached ``dvc.lock`` outs) with its recorded hash through DVC's own index diff
(``dvc.repo.index.build_data_index`` and ``dvc_data.index.diff.diff``, what ``dvc data status
--granular`` runs): DVC's state db answers for each file whose inode, size and mtime did not
change, so only changed files are read. For a changed file it also checks the cache object
the record names: the same inode as the file (a hard link: the edit went into it), missing, or
hashing to another value (DVC's state db again) means the object no longer holds the recorded
bytes. :func:`refuse_changed_data` raises a :class:`~ml.driver.workspace.LoopError` naming each
such file, what it affects and the commands that restore it.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from git import Repo as GitRepo
from ruamel.yaml.error import YAMLError

from ml.config.yaml_file import safe_yaml
from ml.driver.promotion import PROMOTED, TRACKED_INPUTS, refuse_hand_made
from ml.driver.workspace import LoopError

CACHE_DIR = Path(".dvc/cache/files/md5")
"""Where DVC 3 keeps the objects of this repository's cache (``<md5[:2]>/<md5[2:]>``)."""
REBUILD_DIR = ".dvc/tmp/rebuild"
"""Prefix of the git worktree the printed rebuild commands check an attempt out in (git-ignored)."""
EDIT_RECIPE = 'README.md, "To edit a tracked data file"'


@dataclass(frozen=True)
class TrackedChange:
    """A DVC-tracked file that differs from its record.

    Attributes:
        path: the file, relative to the repository root (posix).
        how: ``edited``, ``added`` or ``deleted``.
        out: the tracked output it belongs to (``data/pool``).
        record: what records its hash: a pointer file (``data/pool.dvc``) or ``dvc.lock, stage merge``.
        md5: the recorded MD5 (None for an added file).
        object_lost: the cache object of ``md5`` no longer holds those bytes (edited through a
            hard link, or missing): ``dvc checkout`` cannot restore the file.
    """

    path: str
    how: str
    out: str
    record: str
    md5: str | None
    object_lost: bool

    @property
    def object_path(self) -> str:
        """The cache object of ``md5``, relative to the repository root."""
        assert self.md5, "an added file has no cache object"
        return str(CACHE_DIR / self.md5[:2] / self.md5[2:])


_UNCHANGED: dict[Path, tuple[tuple[str, int, int, int], ...]] = {}
"""Per repository root: the ``_stat_fingerprint`` at this process's last :func:`tracked_changes` that found none."""


def _stat_fingerprint(root: Path) -> tuple[tuple[str, int, int, int], ...]:
    """(path, inode, size, mtime in ns) of ``dvc.yaml``, ``dvc.lock`` and every file under ``data/``
    (the pointers among them), sorted: what DVC's state db keys a file's hash on, for all of them."""
    paths = [root / "dvc.yaml", root / "dvc.lock"]
    for folder, _, files in os.walk(root / "data"):
        paths += [Path(folder) / name for name in files]
    out = []
    for path in paths:
        try:
            st = path.lstat()
        except FileNotFoundError:
            continue
        out.append((path.relative_to(root).as_posix(), st.st_ino, st.st_size, st.st_mtime_ns))
    return tuple(sorted(out))


def tracked_changes(root: Path) -> list[TrackedChange]:
    """Every file of a cached DVC output under ``data/`` that differs from its recorded hash
    (an output with no hash recorded yet, a stage never run, is left out: no commit records it).

    Cost: DVC's index diff (its state db rehashes only files whose inode, size or mtime
    changed), plus a hash of each changed file's cache object (the state db again). When no
    file under ``data/`` and neither ``dvc.yaml`` nor ``dvc.lock`` changed inode, size or mtime
    since this process last found no change (``_stat_fingerprint``, the state db's own key),
    the answer is that one again, without DVC.

    Returns:
        The changes sorted by path; empty when every tracked file matches its record.
    """
    root = root.resolve()
    before = _stat_fingerprint(root)
    if _UNCHANGED.get(root) == before:
        return []
    changes = _tracked_changes(root)
    if not changes and _stat_fingerprint(root) == before:  # nothing written while DVC looked
        _UNCHANGED[root] = before
    return changes


def _tracked_changes(root: Path) -> list[TrackedChange]:
    from dvc.repo import Repo  # lazy: DVC is slow to import
    from dvc.repo.index import build_data_index
    from dvc_data.hashfile.hash import hash_file
    from dvc_data.index.diff import ADD, DELETE, MODIFY, diff

    kinds = {MODIFY: "edited", ADD: "added", DELETE: "deleted"}
    with Repo(str(root)) as repo:
        outs = {
            Path(out.fs_path).relative_to(root).as_posix(): (
                Path(out.stage.path).relative_to(root).as_posix()
                if out.stage.is_data_source
                else f"dvc.lock, stage {out.stage.name}"
            )
            for out in repo.index.outs
            if out.use_cache and out.hash_info and Path(out.fs_path).relative_to(root).parts[:1] == ("data",)
        }
        if not outs:
            return []
        index = repo.index.data["repo"]
        workspace = build_data_index(repo.index, repo.root_dir, repo.fs, compute_hash=True)
        changes = []
        for change in diff(index, workspace, hash_only=True):
            entry = change.old or change.new
            if change.typ not in kinds or entry is None or (entry.meta is not None and entry.meta.isdir):
                continue
            path = "/".join(change.key)
            out = next((o for o in outs if path == o or path.startswith(o + "/")), None)
            if out is None:
                continue
            md5 = change.old.hash_info.value if change.old is not None and change.old.hash_info else None
            lost = False
            if md5 is not None and change.typ == MODIFY:
                obj = root / CACHE_DIR / md5[:2] / md5[2:]
                lost = not obj.is_file() or os.path.samefile(obj, root / path)
                lost = lost or hash_file(str(obj), repo.fs, "md5", repo.state)[1].value != md5
            changes.append(TrackedChange(path, kinds[change.typ], out, outs[out], md5, lost))
    return sorted(changes, key=lambda c: c.path)


def refuse_foreign_data(root: Path, promotion_pending: bool) -> None:
    """The loop's one guard of its data before it writes: an input's pointer removed
    (:func:`refuse_removed_inputs`), files added to or edited in the promoted folders by hand
    (``ml.driver.promotion.refuse_hand_made``), then tracked data that differs from its record
    (:func:`refuse_changed_data`). loop.py runs it at start, ``Loop.promote`` before promoting,
    ``Loop.repro`` before every stage (once for the up-to-date stages a resume skips).

    Raises:
        LoopError: as the three checks; nothing is changed.
    """
    refuse_removed_inputs(root)
    refuse_hand_made(root)
    refuse_changed_data(root, promotion_pending)


def refuse_removed_inputs(root: Path) -> None:
    """Refuse a ``data/<name>.dvc`` pointer of ``TRACKED_INPUTS`` missing from the work tree that git
    knows: removed by a commit (``git rm``), or deleted while HEAD has it. ``Loop.ensure_data_dirs``
    makes the pointers a fresh clone lacks (no commit ever had them), and would make these again
    without a word. Costs one ``git log`` per missing pointer, none when all are there.

    Raises:
        LoopError: one line per such pointer, naming it, the commit that removed it and the
            command that restores it; nothing is changed.
    """
    missing = [f"data/{name}.dvc" for name in TRACKED_INPUTS if not (root / f"data/{name}.dvc").exists()]
    if not missing:
        return
    git = GitRepo(root)
    if not git.head.is_valid():  # no commit yet
        return
    lines = []
    for pointer in missing:
        needs = (
            f"but the loop needs it: it records {pointer.removesuffix('.dvc')}, which the pipeline reads, and the loop "
            "would make a new one without a word. Restore it:"
        )
        if _at_head(git, pointer):
            lines.append(
                f"{pointer} is deleted from the work tree, {needs} `git checkout HEAD -- {pointer}`, then run loop.py again."
            )
        elif last := git.git.log("-1", "--diff-filter=D", "--format=%h%x00%s", "--abbrev=7", "--", pointer):
            sha, subject = last.split("\0", 1)
            lines.append(
                f'{pointer} was removed by commit {sha} "{subject}", {needs} '
                f"`git checkout {sha}~1 -- {pointer} && git commit -m 'restore {pointer}' {pointer}`, then run loop.py again."
            )
    if lines:
        raise LoopError("\n".join(lines))


def refuse_changed_data(root: Path, promotion_pending: bool) -> None:
    """Refuse DVC-tracked data changed behind the loop's back, before the loop writes anything.

    Refused: any file whose cache object was changed with it (never legitimate: nothing in the
    loop writes a tracked file in place); any change to the ``data/*.dvc`` inputs
    (``TRACKED_INPUTS``), but for the promoted folders while ``promotion_pending`` (promotion
    rebuilds them from ``data/merged``; ``refuse_hand_made`` guards them against it); and a
    change to ``data/merged`` while ``promotion_pending`` (promotion reads it before the merge
    stage runs again). Other ``dvc.lock`` outs with an intact cache object are left to DVC:
    the stage that makes them runs again before any stage reads them (a killed stage leaves
    exactly that).

    Args:
        root: the repository root.
        promotion_pending: the next step promotes ``data/merged`` (no attempt in flight, or
            one not yet promoted: ``InFlight.promoted``).

    Raises:
        LoopError: naming each file, what the change affects and how to restore it; nothing is changed.
    """
    inputs = {f"data/{n}" for n in TRACKED_INPUTS if not (promotion_pending and n in PROMOTED)}
    if promotion_pending:
        inputs.add("data/merged")
    refused = [c for c in tracked_changes(root) if c.object_lost or c.out in inputs]
    if refused:
        raise LoopError(changed_data_message(root, refused))


def changed_data_message(root: Path, changes: list[TrackedChange]) -> str:
    """The refusal of :func:`refuse_changed_data`: each file, what it affects, the commands that restore it."""
    lines = ["DVC-tracked data changed behind the loop's back (nothing was run, written or committed):"]
    remote = _has_dvc_remote(root)
    lost: dict[str, list[TrackedChange]] = {}
    for c in changes:
        if c.object_lost:
            lost.setdefault(c.object_path, []).append(c)
    for obj, names in lost.items():
        lines += _lost_object_lines(root, obj, names, remote)
    intact = [c for c in changes if not c.object_lost]
    for c in intact:
        lines.append(f"  {c.how}: {c.path} (recorded in {c.record}; its cache object is intact)")
    if intact:
        outs = " ".join(sorted({c.out for c in intact}))
        lines.append(
            f"  restore: `dvc checkout --force {outs}` (it restores edited and deleted files and deletes added ones; "
            "move an added file you want to keep out of data/ first)"
        )
        kept = sorted(
            {(c.out, c.record) for c in intact if c.record.endswith(".dvc") and c.out[len("data/") :] not in PROMOTED}
        )
        for out, record in kept:  # inputs a person may change (data/forge, data/seed); batches join only through the gate
            lines.append(f"  or keep the change in {out}: `dvc add {out} && git commit -m '...' {record}`")
    lines.append(f"then run loop.py again. To change a tracked file on purpose: {EDIT_RECIPE}.")
    return "\n".join(lines)


def _lost_object_lines(root: Path, obj: str, names: list[TrackedChange], remote: bool) -> list[str]:
    """What a changed cache object affects and the commands that bring its bytes back."""
    md5 = names[0].md5
    assert md5 is not None, "a lost object has a recorded hash"
    where = ", ".join(f"{c.path} (recorded in {c.record})" for c in names)
    git = GitRepo(root)
    commits = _commits_recording(git, root, md5)
    shared = (
        f"the {len(commits)} commits that record it ({_commit_label(git, commits[0])} .. {_commit_label(git, commits[-1])}) share it"
        if len(commits) > 1
        else f"commit {_commit_label(git, commits[0])} records it"
        if commits
        else "no commit records it yet"
    )
    outs = " ".join(sorted({c.out for c in names}))
    lines = [
        f"  edited in place: {where}",
        f"    it is a hard link to its DVC cache object {obj}, so the edit changed that object too: {shared}, "
        "so checking them out brings the edit back, and `dvc checkout --force` links the edited object again.",
    ]
    if remote:
        lines += ["    restore it from the DVC remote:", f"      rm -f {obj}", f"      dvc pull --force {outs}"]
        return lines
    made = _producer(git, root, md5)
    staged = [c.record.removeprefix("dvc.lock, stage ") for c in names if c.record.startswith("dvc.lock, stage ")]
    if made is None and staged:  # made by a stage of the attempt in flight, not committed yet
        lines += [
            f"    stage {staged[0]} made it in the attempt in flight (no commit records it yet), and a stage run again on "
            "the same inputs makes the same bytes: remove the object and run the stage again, then resume (venv active):",
            f"      rm -f {obj}",
            f"      dvc repro --single-item --force {staged[0]}",
            "      python loop.py",
        ]
        return lines
    if made is None:
        lines += [
            "    no stage made it (it came in with a `dvc add`; `git log --format='%h %s' -- data/*.dvc` names the commit): "
            f"remove the object (`rm -f {obj}`), put the original file back (Forge files: `python loop.py import-forge PATH`), "
            f"then `dvc add {outs}` and commit the pointer.",
        ]
        return lines
    sha, stage, deps = made
    tree = f"{REBUILD_DIR}-{sha[:7]}"
    checkout = f"dvc checkout {' '.join(deps)} && " if deps else ""
    lines += [
        f"    its bytes are in no other file here; stage {stage} made it at {_commit_label(git, sha)}, and a stage run again "
        "on the same inputs and versions makes the same bytes: rebuild the object there, then check the files out again "
        "(venv active; `dvc data status` lists nothing after):",
        f"      rm -f {obj}",
        f"      git worktree add --detach {tree} {sha[:10]}",
        f"      (cd {tree} && dvc cache dir --local {root / '.dvc/cache'} && {checkout}dvc repro --single-item --force {stage})",
        f"      git worktree remove --force {tree}",
        f"      dvc checkout --force {outs}",
    ]
    return lines


def _at_head(git: GitRepo, path: str) -> bool:
    try:
        git.head.commit.tree[path]
    except KeyError:
        return False
    return True


def _has_dvc_remote(root: Path) -> bool:
    from dvc.repo import Repo

    with Repo(str(root)) as repo:
        return bool(repo.config.get("remote"))


def _commit_label(git: GitRepo, sha: str) -> str:
    subject = str(git.commit(sha).summary)
    return f'{sha[:7]} "{subject.split(" | ")[0]}"'


@cache
def _dir_md5s(root: Path, dir_md5: str) -> frozenset[str]:
    """The file MD5s a ``.dir`` object of the cache lists (empty when it is not there)."""
    path = root / CACHE_DIR / dir_md5[:2] / dir_md5[2:]
    try:
        return frozenset(e["md5"] for e in json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError, TypeError):
        return frozenset()


def _holds(root: Path, recorded: Any, md5: str) -> bool:
    """Whether a recorded hash (a file's, or a folder's ``.dir``) covers the file hash ``md5``."""
    if not isinstance(recorded, str):
        return False
    return recorded == md5 or (recorded.endswith(".dir") and md5 in _dir_md5s(root, recorded))


def _blob(git: GitRepo, sha: str, path: str) -> Any:
    try:
        return safe_yaml().load(git.commit(sha).tree[path].data_stream.read()) or {}
    except (KeyError, YAMLError):
        return {}


def _commits_recording(git: GitRepo, root: Path, md5: str) -> list[str]:
    """Commits (oldest first) whose ``dvc.lock`` or ``data/*.dvc`` record the file hash ``md5``."""
    found = []
    for commit in reversed(list(git.iter_commits("HEAD", paths=["dvc.lock", "data"]))):
        lock = _blob(git, commit.hexsha, "dvc.lock")
        recorded = [o.get("md5") for st in lock.get("stages", {}).values() for o in st.get("outs", [])]
        pointers = (
            [f"data/{b.name}" for b in commit.tree["data"].blobs if b.name.endswith(".dvc")] if "data" in commit.tree else []
        )
        for pointer in pointers:
            recorded += [o.get("md5") for o in _blob(git, commit.hexsha, pointer).get("outs", [])]
        if any(_holds(root, r, md5) for r in recorded):
            found.append(commit.hexsha)
    return found


def _producer(git: GitRepo, root: Path, md5: str) -> tuple[str, str, list[str]] | None:
    """The first commit, stage and cached data deps of the ``dvc.lock`` stage that made ``md5``:
    an out holds it and no dep does (merge, which carries files forward, has it among its deps)."""
    for sha in _commits_recording(git, root, md5):
        for stage, st in _blob(git, sha, "dvc.lock").get("stages", {}).items():
            deps = st.get("deps", [])
            if any(_holds(root, o.get("md5"), md5) for o in st.get("outs", [])) and not any(
                _holds(root, d.get("md5"), md5) for d in deps
            ):
                return sha, stage, [d["path"] for d in deps if str(d.get("path", "")).startswith("data/")]
    return None
