"""Teacher data from Forge: import real Forge decision files (``python loop.py import-forge``).

Forge files (``shared/docs/forge-decision-format.md``) reach the loop through one path,
``python loop.py import-forge PATH...`` (:func:`import_command`): every line is validated
with the record schema; each bad line is reported (``<file>:<line>: <field>: <problem>``)
and left out, every good line is copied byte for byte (CRLF kept) into ``data/forge/``
(``FORGE_DIR``), ``dvc add``-tracked like ``data/pool`` and read by the train and gate
stages as source ``forge``. No file is deleted or overwritten: sources are only read, a
taken name with other content gets a new one (``ml-decisions-<8 hex of SHA-256>[-tN].jsonl``).
A game (``game_id``) already in ``data/forge`` is never imported twice: its lines are left out
(a CRLF copy, a file that grew, another file repeating games) and a file all of whose games are
there is "already imported". ``--cards TABLE`` merges a user card table
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
from ml.io import TMP_SUFFIX, UTF8_BOM, DataFileError, atomic_write_bytes, atomic_write_text, iter_jsonl
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
        dest: the file in the Forge folder holding its good lines (None when refused, or when
            its games, already imported, lie in several files).
        decisions: good lines (decisions) imported; for an ``already imported`` file, its good lines.
        left_out: good lines left out because their game was already imported.
        bad: every bad line, as ``DataFileError``/``RecordError`` (file, line, field, problem).
        notes: anything else the user should know (a new name, games seen before).
    """

    source: Path
    status: Literal["imported", "already imported", "refused"]
    dest: Path | None = None
    decisions: int = 0
    left_out: int = 0
    bad: list[DataFileError] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def imported_to(self) -> Path:
        """``dest`` of a file that was imported (never None then)."""
        assert self.dest is not None, f"{self.source} was {self.status}: it has no dest"
        return self.dest


def _good_lines(path: Path, bad: list[DataFileError]) -> list[tuple[str, bytes]]:
    """The good lines of a Forge file as ``(game id, bytes as they are)``; bad lines go to ``bad``.

    A leading UTF-8 byte-order mark is not copied (``iter_jsonl`` skips it too).
    """
    keep: dict[int, str] = {}
    for line_no, obj in iter_jsonl(path, on_error=bad.append):
        try:
            keep[line_no] = validate_line(path, line_no, obj, "forge").game_id
        except RecordError as e:
            bad.append(e)
    with open(path, "rb") as f:
        lines = [(no, raw if raw.endswith(b"\n") else raw + b"\n") for no, raw in enumerate(f, start=1) if no in keep]
    return [(keep[no], raw[len(UTF8_BOM) :] if no == 1 and raw.startswith(UTF8_BOM) else raw) for no, raw in lines]


def _existing_games(forge_dir: Path) -> dict[str, Path]:
    """Game id -> the imported file holding it."""
    files = scan_batches(forge_dir, sources=(), include_forge=True) if forge_dir.is_dir() else []
    return {r.game_id: p for p in files for r in read_records(p, on_error=lambda e: None)}


def import_files(paths: Sequence[Path], forge_dir: Path) -> list[FileReport]:
    """Validate Forge files and copy their good lines into ``forge_dir``; never overwrites.

    Args:
        paths: the Forge files (JSONL in the Forge decision format, any name).
        forge_dir: the destination folder (created when missing).

    Returns:
        One report per path, in order. A file with no good line, or that is missing, is
        ``refused``; one whose name is taken by other content is imported under
        ``ml-decisions-<8 hex of its SHA-256>[-tN].jsonl`` (refused when that name is taken too).
        The lines of a game already in ``forge_dir`` (or in an earlier path) are left out
        (``left_out``); a file with no other good line is ``already imported``.
    """
    known_games = _existing_games(forge_dir)
    reports = []
    for path in map(Path, paths):
        if not path.is_file():
            reports.append(FileReport(path, "refused", notes=["no such file"]))
            continue
        rep = FileReport(path, "refused")
        reports.append(rep)
        good = _good_lines(path, rep.bad)
        if not good:
            rep.notes.append("no good line")
            continue
        new = [raw for game, raw in good if game not in known_games]
        if not new:  # a copy (CRLF, renamed) of imported games
            homes = {known_games[game] for game, _ in good}
            rep.status, rep.decisions, rep.dest = "already imported", len(good), homes.pop() if len(homes) == 1 else None
            continue
        rep.decisions, rep.left_out = len(new), len(good) - len(new)
        if rep.left_out:
            n_games = len({game for game, _ in good if game in known_games})
            rep.notes.append(f"{rep.left_out} decisions of {n_games} games already imported, left out")
        content = b"".join(new)
        digest = hashlib.sha256(content).hexdigest()
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
        atomic_write_bytes(dest, content)
        rep.status, rep.dest = "imported", dest
        known_games.update((game, dest) for game, _ in good if game not in known_games)
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
            ``git``, ``committing``, ``set_params``, ``load_state``, ``echo``).
        paths: Forge files to import.
        cards: a card table to merge into ``data/forge/cards.yaml``, or None.
        weight: the ``forge`` mixture weight to set when there is none (finite, >= 0: ``loop.py``'s ``forge_weight``).

    Returns:
        0 when every file was imported (or already was), bad lines left out and listed;
        2 when a file was refused (the rest is still imported), or the card table was
        (missing, a folder, bad: nothing is imported, written or committed).
    """
    state, params = loop.load_state(), load_params(loop.path("params.yaml"))
    if state.in_flight is not None:
        loop.echo(f"import-forge: attempt {state.in_flight.attempt_id} is in flight; let it finish (run loop.py) first")
        return 2
    if params.game.name != "commander":
        loop.echo(f"import-forge: Forge files are commander records; this run plays {params.game.name}")
        return 2
    forge_dir = loop.path(FORGE_DIR)
    try:  # the whole table is checked before anything is written
        table = _merged_cards(forge_dir, cards)
    except DataFileError as e:  # missing, a folder, bad: nothing written, nothing committed
        loop.echo(f"import-forge: {e} (nothing imported)")
        return 2
    tracked = [f"{FORGE_DIR}.dvc", f"{Path(FORGE_DIR).parent}/.gitignore"]
    # journalled: a kill while copying is completed (dvc add, commit) by the next loop.py start, with
    # this first message; dvc add also records a hand edit of data/forge; nothing changed: no commit
    with loop.committing(journal_message(paths, cards), tracked, dvc_add=(FORGE_DIR,)) as commit:
        forge_dir.mkdir(parents=True, exist_ok=True)
        if table is not None:
            _write_cards(forge_dir, table)
        reports = import_files(paths, forge_dir)
        done = [r for r in reports if r.status == "imported"]
        head = f"import-forge: {len(done)} Forge file(s), {sum(r.decisions for r in done)} decisions"
        body = [
            f"{r.source.name} -> {r.imported_to.name}: {r.decisions} decisions, {len(r.bad)} bad lines"
            + (f", {r.left_out} of imported games left out" if r.left_out else "")
            for r in done
        ]
        parts = [head + (", card table" if table is not None else ""), *(["\n".join(body)] if body else [])]
        commit["message"] = "\n\n".join(parts)
    loop.echo(format_report(reports, loop.root))
    _set_weight(loop, params.train.source_weights, weight)
    return 2 if any(r.status == "refused" for r in reports) else 0


def journal_message(paths: Sequence[Path], cards: Path | None) -> str:
    """The commit message journalled before copying: what is imported, as far as known then.

    It is used only when the import is interrupted (``committing`` replaces it with the counts
    otherwise), so it says where the decision counts are: in the report, which importing the
    same files again prints (they are then ``already imported``, with their counts).
    """
    names = [p.name for p in paths] + ([f"card table {cards.name}"] if cards is not None else [])
    return (
        f"import-forge: {len(paths)} Forge file(s){', card table' if cards is not None else ''} (interrupted, completed)\n\n"
        + "\n".join(names)
        + "\n\nDecision counts: see the report of `python loop.py import-forge` with the same files."
    )


def _merged_cards(forge_dir: Path, cards: Path | None) -> dict[str, str] | None:
    """The Forge folder's table merged with ``cards``; None when there is nothing to write.

    Raises:
        DataFileError: ``cards`` missing, a folder, or a bad table (see ``load_card_table``).
    """
    if cards is None:
        return None
    if not cards.exists():
        raise DataFileError(cards, None, None, "no such card table file")
    pool = load_card_pool()
    current_path = forge_dir / CARD_TABLE
    current = load_card_table(current_path, pool)
    merged = merge_card_tables(current, load_card_table(cards, pool), cards, current_path)
    return None if merged == current and (current_path.exists() or not merged) else merged


def _write_cards(forge_dir: Path, table: dict[str, str]) -> None:
    text = "# Card table of the imported Forge data: card name -> kind (labels only; python loop.py import-forge --cards)\n"
    text += yaml.safe_dump(dict(sorted(table.items())), allow_unicode=True, width=4096)
    atomic_write_text(forge_dir / CARD_TABLE, text)


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
