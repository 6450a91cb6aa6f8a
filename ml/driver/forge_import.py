"""Teacher data from Forge: import real Forge decision files (``python loop.py import-forge``).

Forge files (``shared/docs/forge-decision-format.md``) reach the loop through one path,
``python loop.py import-forge PATH...`` (``ml.driver.forge_command.import_command``): every line is validated
with the record schema; each bad line (an empty one too) is reported
(``<file>:<line>: <field>: <problem>``) and left out, the good lines go into ``data/forge/``
(``ml.driver.teacher_folder.FORGE_DIR``), ``dvc add``-tracked like ``data/pool`` and read by the train and gate
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
The command around it (the card table, ``dvc add``, the commit, the ``forge`` weight) is
``ml.driver.forge_command``; the guard of ``data/teacher`` is ``ml.driver.teacher_folder``.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from ml.base.io import DataFileError, atomic_write_bytes, file_md5
from ml.data.batch_files import classify_file
from ml.driver.forge_games import (
    Game,
    HeldGame,
    free_game_id,
    held_games,
    match_game,
    read_games,
    rekeyed_line,
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
