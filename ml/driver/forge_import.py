"""Teacher data from Forge: import real Forge decision files (``python loop.py import-forge``).

Forge files (``shared/docs/forge-decision-format.md``) reach the loop through one path,
``python loop.py import-forge PATH...`` (:func:`import_command`): every line is validated
with the record schema; each bad line (an empty one too) is reported
(``<file>:<line>: <field>: <problem>``) and left out, the good lines go into ``data/forge/``
(``FORGE_DIR``), ``dvc add``-tracked like ``data/pool`` and read by the train and gate
stages as source ``forge``. No file is deleted or overwritten: sources are only read, a
taken name with other content gets a new one (``ml-decisions-<8 hex of SHA-256>[-tN].jsonl``).

A game is the same game only when its records are: its identity is the SHA-256 of its
lines' canonical JSON (:func:`read_games`; line endings, a byte-order mark, key order and
whitespace make no difference), never its ``game_id`` alone, which Forge derives from the
game index and seed (``game-<index>-<seed>``), so two runs with one seed, or a 2-player and
a 4-player run, share ids. A game ``data/forge`` holds is never imported twice (a CRLF copy,
a file that grew by whole games, another file repeating games, the beginning of a held game;
a file with nothing else is "already imported", with the count held). A game of which
``data/forge`` holds the beginning under its id (a file imported while Forge was still
writing it) is the same game grown: only the rest is imported, under the held id
(:func:`match_game`; the held lines of an id are joined across files, :func:`held_games`). A different game under an id another game holds (in
``data/forge``, in a file taken before it in the same import, or earlier in the same file)
is imported and kept apart: re-keyed to ``<game_id>~<8 hex of its identity>``, the id Forge wrote kept
in the record as ``forge_game_id`` (``DecisionRecord``), so the train and gate stages, which
tell games apart by ``game_id``, see two games. The lines of a re-keyed game are rewritten
(compact JSON, :func:`rekeyed_line`); every other good line is copied byte for byte (CRLF
kept). The files are taken by decreasing number of good lines, then MD5, so the result does
not depend on the order of the arguments, and a file given with its beginning is imported whole. ``--cards TABLE`` merges a user card table
(``name: kind``) into ``data/forge/cards.yaml``: it extends the built-in pool for labels only
(the labels themselves: ``ml.game.commander.forge``).

``data/teacher`` is the teacher stage's output, which DVC rewrites: :func:`foreign_teacher_files`
lists what was put there by hand, and ``loop.py`` refuses to run until it is imported and moved out.
"""

from __future__ import annotations

import hashlib
import io
import re
from collections import Counter
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Protocol

from ml.base.io import TMP_SUFFIX, DataFileError, atomic_write_bytes, atomic_write_text, file_md5
from ml.config.curriculum import Overrides
from ml.config.params import load_params
from ml.config.yaml_file import safe_yaml
from ml.data.batch_files import classify_file, scan_batches
from ml.driver.forge_games import (
    Game,
    HeldGame,
    free_game_id,
    held_games,
    match_game,
    read_games,
    rekeyed_line,
)
from ml.driver.state import LoopState
from ml.game.commander.cards import load_card_pool
from ml.game.commander.forge import CARD_TABLE, load_card_table, merge_card_tables

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
        dest: the file in the Forge folder that the import wrote (``imported``), or that holds
            all its games (``already imported``; None when they lie in several, named in ``notes``).
        decisions: decisions (good lines) written to ``dest`` by this import.
        held: decisions of its games that the Forge folder held already (same records:
            :func:`match_game`), each counted once; left out. A grown game's held beginning counts.
        repeated: decisions of a game repeated later in the same file (same records); left out.
        rekeyed: ``(game_id, new game_id)`` of each of its games imported under a new id
            because another game held the id.
        grown: ``(game_id, decisions imported, decisions held)`` of each game of which the
            Forge folder held a beginning: only the rest was imported, under the held id.
        bad: every bad line, as ``DataFileError``/``RecordError`` (file, line, field, problem).
        notes: anything else the user should know (a new name, games seen before).
    """

    source: Path
    status: Literal["imported", "already imported", "refused"]
    dest: Path | None = None
    decisions: int = 0
    held: int = 0
    repeated: int = 0
    rekeyed: list[tuple[str, str]] = field(default_factory=list)
    grown: list[tuple[str, int, int]] = field(default_factory=list)
    bad: list[DataFileError] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def imported_to(self) -> Path:
        """``dest`` of a file that was imported (never None then)."""
        assert self.dest is not None, f"{self.source} was {self.status}: it has no dest"
        return self.dest


def import_files(paths: Sequence[Path], forge_dir: Path) -> list[FileReport]:
    """Validate Forge files and copy their games into ``forge_dir``; never overwrites.

    A game (:func:`read_games`) is known by its records, not its ``game_id`` (Forge's
    ``game-<index>-<seed>`` repeats across runs with the same seed; :func:`match_game`): one
    whose lines the folder holds already under its Forge id is left out (``held``; a beginning
    of a held game too); one of which the folder holds the beginning (a file imported while
    Forge was still writing it) is the same game grown: only the rest is imported, under the
    held id; another game under an id the folder holds is imported under
    ``<id>~<8 hex of its identity>``, its lines rewritten (:func:`rekeyed_line`); every other
    line is copied byte for byte. The files are taken by decreasing number of good lines, then
    MD5, then path, not in the order given, so what ``forge_dir`` holds afterwards (names, ids
    and bytes) does not depend on the order of ``paths``, and a complete file given with its
    beginning is imported whole (as when it is imported alone).

    Args:
        paths: the Forge files (JSONL in the Forge decision format, any name).
        forge_dir: the destination folder (created when missing).

    Returns:
        One report per path, in the order given. A file with no good line, missing or a folder
        is ``refused``; one whose name is taken by other content is imported under
        ``ml-decisions-<8 hex of its SHA-256>[-tN].jsonl`` (refused when that name is taken too);
        one with no game the folder lacks is ``already imported``.
    """
    held = held_games(forge_dir)
    paths = [Path(p) for p in paths]
    reports = [
        FileReport(p, "refused")
        if p.is_file()
        else FileReport(p, "refused", notes=["is a directory" if p.is_dir() else "no such file"])
        for p in paths
    ]
    games = {id(r): read_games(r.source, r.bad) for r in reports if r.source.is_file()}
    order = sorted(
        (r for r in reports if id(r) in games),
        key=lambda r: (-sum(len(g.lines) for g in games[id(r)]), file_md5(r.source), str(r.source)),
    )
    for rep in order:
        _import_file(rep, games[id(rep)], forge_dir, held)
    return reports


def _classify(
    rep: FileReport, games: list[Game], held: dict[str, HeldGame]
) -> tuple[list[tuple[Game, str, int]], dict[str, HeldGame], set[Path], int]:
    """Sort the games of ``rep.source`` into held, repeated, grown and new (:func:`match_game`),
    counting in ``rep`` (``held``, ``repeated``, ``grown``); each game is matched against the
    folder's games and the games before it in the file.

    Returns:
        ``(out, pending, homes, held_games)``: each game to write as ``(game, the id it is
        imported under, lines of it held already: left out)``; the lines they add by id; the
        files holding the held games, and their number.
    """
    seen: set[str] = set()
    homes: set[Path] = set()
    held_n = 0
    pending: dict[str, HeldGame] = {}  # game id -> lines this file adds
    out: list[tuple[Game, str, int]] = []
    by_forge_id: dict[str, list[str]] = {}
    for held_id, h in held.items():
        by_forge_id.setdefault(h.forge_game_id, []).append(held_id)
    for game in games:
        if game.identity in seen:
            rep.repeated += len(game.lines)
            continue
        seen.add(game.identity)
        x = game.forge_game_id
        before = {held_id: held[held_id].lines for held_id in by_forge_id.get(x, [])}
        now = dict(before)
        for new_id, add in pending.items():
            if add.forge_game_id == x:
                now[new_id] = before.get(new_id, Counter()) + add.lines
        kind, gid, m = match_game(game, now)
        in_before = before.get(gid, Counter()) if gid is not None else Counter()
        if kind == "held" and gid is not None:
            if Counter(game.line_digests) <= in_before:
                rep.held += m
                held_n += 1
                homes |= held[gid].files
            else:  # (partly) a game earlier in this file
                rep.repeated += m
            continue
        if kind == "grown" and gid is not None:
            rep.held += in_before.total()
            rep.repeated += m - in_before.total()
            rep.grown.append((gid, len(game.lines) - m, m))
        else:
            gid = free_game_id(game, held.keys() | pending.keys())
        pending.setdefault(gid, HeldGame(x)).lines.update(game.line_digests[m:])
        out.append((game, gid, m))
    return out, pending, homes, held_n


def _import_file(rep: FileReport, games: list[Game], forge_dir: Path, held: dict[str, HeldGame]) -> None:
    """Import ``games``, read from ``rep.source`` (:func:`import_files`), filling in ``rep``;
    ``held`` is updated with what is written."""
    path = rep.source
    if not games:
        rep.notes.append("no good line")
        return
    out, pending, homes, held_games_n = _classify(rep, games, held)
    full_held = rep.held - sum(m for _, _, m in rep.grown)
    if full_held and out:
        rep.notes.append(f"{full_held} decisions of {held_games_n} games already imported, left out")
    if rep.repeated:
        rep.notes.append(f"{rep.repeated} decisions repeat a game earlier in the file, left out")
    if not out:  # a copy (CRLF, renamed, reordered keys) of imported games, or a beginning of them
        rep.status = "already imported"
        if len(homes) == 1:
            rep.dest = next(iter(homes))
        else:
            rep.notes.append("its games are in " + ", ".join(sorted(p.name for p in homes)))
        return
    for gid, new, m in rep.grown:
        rep.notes.append(f"game {gid} grew: {new} new decisions imported ({m} already held)")
    rep.rekeyed = [(g.game_id, gid) for g, gid, m in out if gid != g.game_id and not m]
    if rep.rekeyed:
        rep.notes.append(
            f"{len(rep.rekeyed)} games re-keyed (another game holds their game_id): "
            + ", ".join(f"{old} -> {new_id}" for old, new_id in rep.rekeyed)
        )
    lines = [raw if gid == g.game_id else rekeyed_line(raw, gid, g.forge_game_id) for g, gid, m in out for raw in g.lines[m:]]
    content = b"".join(lines)
    digest = hashlib.sha256(content).hexdigest()
    forge_name = classify_file(path) == "forge"
    dest = forge_dir / (path.name if forge_name else f"ml-decisions-{digest[:8]}.jsonl")
    if dest.exists():  # keep the worker suffix -tN of a Forge name
        worker = re.search(r"-t\d+(?=\.jsonl$)", path.name) if forge_name else None
        dest = forge_dir / f"ml-decisions-{digest[:8]}{worker.group() if worker else ''}.jsonl"
        if dest.exists():
            rep.notes.append(f"{dest} exists with other content; never overwritten")
            return
    if dest.name != path.name:
        rep.notes.append(
            f"imported as {dest.name} ({path.name} " + ("is taken)" if forge_name else "is not a Forge file name)")
        )
    atomic_write_bytes(dest, content)
    rep.status, rep.dest, rep.decisions = "imported", dest, len(lines)
    for gid, add in pending.items():
        h = held.setdefault(gid, HeldGame(add.forge_game_id))
        h.lines.update(add.lines)
        h.files.add(dest)


def format_report(reports: Sequence[FileReport], root: Path) -> str:
    """The import report: each bad line (``file:line: field: problem``), then one line per file.

    A file's line gives its decisions: those imported, or, ``already imported``, those the
    Forge folder holds of it.
    """
    out = [str(e) for rep in reports for e in rep.bad]
    for rep in reports:
        dest = f" -> {rep.dest.relative_to(root) if rep.dest.is_relative_to(root) else rep.dest}" if rep.dest else ""
        bad = f", {len(rep.bad)} bad line(s) left out" if rep.bad else ""
        notes = f" ({'; '.join(rep.notes)})" if rep.notes else ""
        count = rep.held if rep.status == "already imported" else rep.decisions
        out.append(f"{rep.status}: {rep.source}{dest}: {count} decisions{bad}{notes}")
    return "\n".join(out)


# --------------------------------------------------------------------------- the loop.py command


class ImportingRepo(Protocol):
    """What ``import-forge`` needs of the loop's repository (``ml.driver.orchestrator.Loop`` has it)."""

    root: Path
    echo: Callable[[str], None]

    def path(self, rel: Path | str) -> Path: ...
    def git(self, *args: str) -> str: ...
    def load_state(self) -> LoopState: ...
    def committing(
        self, message: str, paths: list[str], dvc_add: tuple[str, ...] = ()
    ) -> AbstractContextManager[dict[str, str]]: ...
    def set_params(self, overrides: Overrides, message: str) -> None: ...


def import_command(loop: ImportingRepo, paths: Sequence[Path], cards: Path | None, weight: float) -> int:
    """``python loop.py import-forge PATH... [--cards TABLE] [--weight W]``.

    Validates and copies the files (:func:`import_files`), merges the card table, ``dvc add``s
    ``data/forge`` and commits ``data/forge.dvc``; when ``train.source_weights`` has no
    ``forge`` weight yet, sets it to ``weight`` in ``params.yaml`` and commits that too.

    Args:
        loop: the repository (``ml.driver.orchestrator.Loop``: :class:`ImportingRepo`).
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
            + (f", {r.held} of imported games left out" if r.held else "")
            + (f", {len(r.rekeyed)} games re-keyed" if r.rekeyed else "")
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
    out = io.StringIO()
    safe_yaml().dump(dict(sorted(table.items())), out)
    text += out.getvalue()
    atomic_write_text(forge_dir / CARD_TABLE, text)


def _set_weight(loop: ImportingRepo, source_weights: dict[str, float], weight: float) -> None:
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
