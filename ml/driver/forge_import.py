"""Teacher data from Forge: import real Forge decision files (``python loop.py import-forge``).

Forge files (``shared/docs/forge-decision-format.md``) reach the loop through one path,
``python loop.py import-forge PATH...`` (:func:`import_command`): every line is validated
with the record schema; each bad line is reported (``<file>:<line>: <field>: <problem>``)
and left out, every good line is copied byte for byte (CRLF kept) into ``data/forge/``
(``FORGE_DIR``), ``dvc add``-tracked like ``data/pool`` and read by the train and gate
stages as source ``forge``. No file is deleted or overwritten: sources are only read, a
taken name with other content gets a new one (``ml-decisions-<8 hex of SHA-256>[-tN].jsonl``),
identical content is "already imported". ``--cards TABLE`` merges a user card table
(``name: kind``) into ``data/forge/cards.yaml``: it extends the built-in pool for labels only
(the labels themselves: ``ml.game.commander.forge``).

``data/teacher`` is the teacher stage's output, which DVC rewrites: :func:`foreign_teacher_files`
lists what was put there by hand, and ``loop.py`` refuses to run until it is imported and moved out.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from ml.game.commander.cards import load_card_pool
from ml.game.commander.forge import CARD_TABLE, load_card_table, merge_card_tables
from ml.io import TMP_SUFFIX, DataFileError, atomic_write_bytes, atomic_write_text, iter_jsonl
from ml.params import load_params
from ml.records import RecordError, classify_file, read_records, scan_batches, validate_line

FORGE_DIR = "data/forge"
"""Imported Forge files (repo-relative; ``dvc add``-tracked, read by the train and gate stages)."""
TEACHER_DIR = "data/teacher"
"""The teacher stage's output (``dvc.yaml``): DVC deletes what it did not write."""


# --------------------------------------------------------------------------- the teacher folder


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


# --------------------------------------------------------------------------- importing files


@dataclass
class FileReport:
    """What the import did with one source file.

    Attributes:
        source: the file given.
        status: ``imported``, ``already imported`` or ``refused``.
        dest: the file in the Forge folder holding its good lines (None when refused).
        decisions: good lines (decisions) kept.
        bad: every bad line, as ``DataFileError``/``RecordError`` (file, line, field, problem).
        notes: anything else the user should know (a new name, games seen before).
    """

    source: Path
    status: Literal["imported", "already imported", "refused"]
    dest: Path | None = None
    decisions: int = 0
    bad: list[DataFileError] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def imported_to(self) -> Path:
        """``dest`` of a file that was imported or already was (never None then)."""
        assert self.dest is not None, f"{self.source} was {self.status}: it has no dest"
        return self.dest


def _good_lines(path: Path, bad: list[DataFileError]) -> tuple[bytes, int, set[str]]:
    """The good lines of a Forge file (bytes as they are), their count and game ids; bad lines go to ``bad``."""
    keep: dict[int, str] = {}
    for line_no, obj in iter_jsonl(path, on_error=bad.append):
        try:
            keep[line_no] = validate_line(path, line_no, obj, "forge").game_id
        except RecordError as e:
            bad.append(e)
    with open(path, "rb") as f:
        lines = [raw if raw.endswith(b"\n") else raw + b"\n" for no, raw in enumerate(f, start=1) if no in keep]
    return b"".join(lines), len(lines), set(keep.values())


def _existing(forge_dir: Path) -> tuple[dict[str, Path], set[str]]:
    """SHA-256 -> file of the imported files, and the game ids they hold."""
    files = scan_batches(forge_dir, sources=(), include_forge=True) if forge_dir.is_dir() else []
    games = {r.game_id for p in files for r in read_records(p, on_error=lambda e: None)}
    return {hashlib.sha256(p.read_bytes()).hexdigest(): p for p in files}, games


def import_files(paths: Sequence[Path], forge_dir: Path) -> list[FileReport]:
    """Validate Forge files and copy their good lines into ``forge_dir``; never overwrites.

    Args:
        paths: the Forge files (JSONL in the Forge decision format, any name).
        forge_dir: the destination folder (created when missing).

    Returns:
        One report per path, in order. A file with no good line, or that is missing, is
        ``refused``; one whose name is taken by other content is imported under
        ``ml-decisions-<8 hex of its SHA-256>[-tN].jsonl`` (refused when that name is taken too).
    """
    by_hash, known_games = _existing(forge_dir)
    reports = []
    for path in map(Path, paths):
        if not path.is_file():
            reports.append(FileReport(path, "refused", notes=["no such file"]))
            continue
        rep = FileReport(path, "refused")
        reports.append(rep)
        content, rep.decisions, games = _good_lines(path, rep.bad)
        if not rep.decisions:
            rep.notes.append("no good line")
            continue
        digest = hashlib.sha256(content).hexdigest()
        if digest in by_hash:
            rep.status, rep.dest = "already imported", by_hash[digest]
            continue
        forge_name = classify_file(path) == "forge"
        dest = forge_dir / (path.name if forge_name else f"ml-decisions-{digest[:8]}.jsonl")
        if dest.exists():  # keep the worker suffix -tN of a Forge name
            worker = re.search(r"-t\d+(?=\.jsonl$)", path.name) if forge_name else None
            dest = forge_dir / f"ml-decisions-{digest[:8]}{worker.group() if worker else ''}.jsonl"
            if dest.exists():
                rep.notes.append(f"{dest} exists with other content; never overwritten")
                continue
        if dest.name != path.name:
            rep.notes.append(
                f"imported as {dest.name} ({path.name} " + ("is taken)" if forge_name else "is not a Forge file name)")
            )
        if seen := games & known_games:
            rep.notes.append(f"{len(seen)} of its {len(games)} games are already in {forge_dir} (a file that grew?)")
        atomic_write_bytes(dest, content)
        rep.status, rep.dest = "imported", dest
        by_hash[digest] = dest
        known_games |= games
    return reports


def format_report(reports: Sequence[FileReport], root: Path) -> str:
    """The import report: each bad line (``file:line: field: problem``), then one line per file."""
    out = [str(e) for rep in reports for e in rep.bad]
    for rep in reports:
        dest = f" -> {rep.dest.relative_to(root) if rep.dest.is_relative_to(root) else rep.dest}" if rep.dest else ""
        bad = f", {len(rep.bad)} bad line(s) left out" if rep.bad else ""
        notes = f" ({'; '.join(rep.notes)})" if rep.notes else ""
        out.append(f"{rep.status}: {rep.source}{dest}: {rep.decisions} decisions{bad}{notes}")
    return "\n".join(out)


# --------------------------------------------------------------------------- the loop.py command


def import_command(loop: Any, paths: Sequence[Path], cards: Path | None, weight: float) -> int:
    """``python loop.py import-forge PATH... [--cards TABLE] [--weight W]``.

    Validates and copies the files (:func:`import_files`), merges the card table, ``dvc add``s
    ``data/forge`` and commits ``data/forge.dvc``; when ``train.source_weights`` has no
    ``forge`` weight yet, sets it to ``weight`` in ``params.yaml`` and commits that too.

    Args:
        loop: the ``ml.driver.orchestrator.Loop`` of the repository (``path``, ``run``, ``dvc``,
            ``git``, ``commit_paths``, ``set_params``, ``load_state``, ``echo``).
        paths: Forge files to import.
        cards: a card table to merge into ``data/forge/cards.yaml``, or None.
        weight: the ``forge`` mixture weight to set when there is none (>= 0).

    Returns:
        0 when every file was imported (or already was), bad lines left out and listed;
        2 when a file or the card table was refused (the rest is still imported).
    """
    state, params = loop.load_state(), load_params(loop.path("params.yaml"))
    if state.in_flight is not None:
        loop.echo(f"import-forge: attempt {state.in_flight.attempt_id} is in flight; let it finish (run loop.py) first")
        return 2
    if params.game.name != "commander":
        loop.echo(f"import-forge: Forge files are commander records; this run plays {params.game.name}")
        return 2
    forge_dir = loop.path(FORGE_DIR)
    tracked = [f"{FORGE_DIR}.dvc", f"{Path(FORGE_DIR).parent}/.gitignore"]
    # journalled: a kill while copying is completed (dvc add, commit) by the next loop.py start;
    # dvc add also records a hand edit of data/forge (e.g. its card table); nothing changed: no commit
    try:
        with loop.committing(f"import-forge: {len(paths)} Forge file(s)", tracked, dvc_add=(FORGE_DIR,)) as commit:
            forge_dir.mkdir(parents=True, exist_ok=True)
            table_changed = _merge_cards(forge_dir, cards)  # checks the whole table before it writes
            reports = import_files(paths, forge_dir)
            done = [r for r in reports if r.status == "imported"]
            head = f"import-forge: {len(done)} Forge file(s), {sum(r.decisions for r in done)} decisions"
            body = [f"{r.source.name} -> {r.imported_to.name}: {r.decisions} decisions, {len(r.bad)} bad lines" for r in done]
            parts = [head + (", card table" if table_changed else ""), *(["\n".join(body)] if body else [])]
            commit["message"] = "\n\n".join(parts)
    except DataFileError as e:  # a bad card table: nothing written, nothing committed
        loop.echo(f"import-forge: {e} (nothing imported)")
        return 2
    loop.echo(format_report(reports, loop.root))
    _set_weight(loop, params.train.source_weights, weight)
    return 2 if any(r.status == "refused" for r in reports) else 0


def _merge_cards(forge_dir: Path, cards: Path | None) -> bool:
    """Merge ``cards`` into the Forge folder's table; True when the table file changed."""
    if cards is None:
        return False
    pool = load_card_pool()
    current_path = forge_dir / CARD_TABLE
    current = load_card_table(current_path, pool)
    merged = merge_card_tables(current, load_card_table(cards, pool), cards, current_path)
    if merged == current and current_path.exists():
        return False
    text = "# Card table of the imported Forge data: card name -> kind (labels only; python loop.py import-forge --cards)\n"
    atomic_write_text(current_path, text + yaml.safe_dump(dict(sorted(merged.items())), allow_unicode=True, width=4096))
    return True


def _set_weight(loop: Any, source_weights: dict[str, float], weight: float) -> None:
    """Give the ``forge`` source its mixture weight once, so imported decisions are sampled."""
    if not (loop.path(FORGE_DIR).is_dir() and scan_batches(loop.path(FORGE_DIR), sources=(), include_forge=True)):
        return
    if "forge" in source_weights:
        if source_weights["forge"] == 0:
            loop.echo("note: train.source_weights.forge is 0: the imported decisions are not trained on")
        return
    if loop.git("status", "--porcelain", "--", "params.yaml").strip():
        loop.echo(f"note: set train.source_weights.forge (e.g. {weight}) in params.yaml yourself: it has uncommitted changes")
        return
    new = {**source_weights, "forge": weight}
    loop.set_params({"train": {"source_weights": new}}, f"params: train.source_weights.forge = {weight} (import-forge)")
    loop.echo(f"train.source_weights.forge = {weight} written to params.yaml and committed (mixture ratios: {new})")
