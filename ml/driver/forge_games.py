"""Forge game identity: which games of a Forge file ``data/forge`` already holds (``loop.py import-forge``).

A game is the run of consecutive good lines with one ``game_id`` (a new game also starts where
the turn goes back); its identity is the SHA-256 of the canonical JSON of its records
(:func:`canonical_record`: key order, whitespace, line endings and a BOM do not count).
:func:`held_games` indexes what ``data/forge`` holds per game id, the lines of an id joined
across files (a grown game's rest lies in a later file under the same id); :func:`match_game`
tells a new game held, grown from a held beginning, or new; a new game under a taken id gets
:func:`free_game_id`'s ``<forge_game_id>~<8 hex>`` and its lines :func:`rekeyed_line`. The import
itself (reports, writing, the command) is ``ml.driver.forge_import``.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from ml.base.io import UTF8_BOM, DataFileError, JSONObject
from ml.base.jsonl import iter_jsonl
from ml.data.batch_files import scan_batches, validate_line
from ml.game.record import RecordError

ORIGINAL_ID = "forge_game_id"
"""The record key keeping the ``game_id`` Forge wrote on a re-keyed game (``DecisionRecord.forge_game_id``)."""
REKEY_SEP = "~"
"""A re-keyed game's id is ``<forge_game_id>~<8 hex of its identity>``."""


@dataclass(frozen=True)
class Game:
    """One game of a Forge file: a run of consecutive good lines with the same ``game_id``.

    Attributes:
        game_id: the ``game_id`` of its lines.
        forge_game_id: the id Forge wrote (``forge_game_id`` of a re-keyed line, else ``game_id``).
        identity: hex SHA-256 of its lines' canonical JSON (:func:`canonical_record`), each
            followed by ``\\n``, in file order: equal exactly when the records are.
        lines: its lines as they are in the file (line ending kept; a leading UTF-8 byte-order
            mark dropped; a last line without newline gets ``\\n``).
        line_digests: the SHA-256 digest (32 bytes) of each line's canonical JSON, in file order.
    """

    game_id: str
    forge_game_id: str
    identity: str
    lines: tuple[bytes, ...]
    line_digests: tuple[bytes, ...]


def canonical_record(obj: JSONObject) -> bytes:
    """A parsed record as canonical JSON (RFC 8785's idea: keys sorted, no whitespace; ASCII escapes).

    Line endings, a byte-order mark, key order and whitespace thus make no difference. A
    re-keyed record reads as the one Forge wrote: its ``forge_game_id`` becomes ``game_id``
    again. ``obj`` is taken as ``ml.data.batch_files.validate_line`` leaves it: ``source`` filled in
    (``forge``) when the line has none.
    """
    if ORIGINAL_ID in obj:
        obj = {k: v for k, v in obj.items() if k != ORIGINAL_ID} | {"game_id": obj[ORIGINAL_ID]}
    return json.dumps(obj, sort_keys=True, ensure_ascii=True, separators=(",", ":")).encode("ascii")


def read_games(path: Path, bad: list[DataFileError]) -> list[Game]:
    """The games of a Forge file, in file order; each bad line goes to ``bad`` and is left out.

    A game is a run of consecutive good lines with one ``game_id`` and non-decreasing ``turn``
    (Forge writes a game at a time); the same id again after another game, or a turn lower
    than the line before, starts a new game (two runs concatenated).
    """
    keep: dict[int, tuple[str, int, str, bytes]] = {}  # line -> (game_id, turn, forge_game_id, canonical JSON)
    for line_no, obj in iter_jsonl(path, on_error=bad.append):
        try:
            rec = validate_line(path, line_no, obj, "forge")
        except RecordError as e:
            bad.append(e)
            continue
        keep[line_no] = (rec.game_id, rec.turn, obj.get(ORIGINAL_ID) or rec.game_id, canonical_record(obj))
    runs: list[tuple[str, str, list[bytes], list[bytes]]] = []
    last_turn = 0
    with open(path, "rb") as f:
        for no, raw in enumerate(f, start=1):
            if no not in keep:
                continue
            if no == 1 and raw.startswith(UTF8_BOM):  # iter_jsonl skips it too
                raw = raw[len(UTF8_BOM) :]
            game_id, turn, forge_id, canonical = keep[no]
            if not runs or runs[-1][0] != game_id or turn < last_turn:
                runs.append((game_id, forge_id, [], []))
            last_turn = turn
            runs[-1][2].append(raw if raw.endswith(b"\n") else raw + b"\n")
            runs[-1][3].append(canonical + b"\n")
    return [
        Game(
            game_id,
            forge_id,
            hashlib.sha256(b"".join(canon)).hexdigest(),
            tuple(lines),
            tuple(hashlib.sha256(c).digest() for c in canon),
        )
        for game_id, forge_id, lines, canon in runs
    ]


def rekeyed_line(raw: bytes, game_id: str, forge_game_id: str) -> bytes:
    """A good line rewritten under another ``game_id``, the id Forge wrote kept as ``forge_game_id``.

    Compact JSON in the line's key order, ``forge_game_id`` last (after Forge's keys, like every
    extra), non-ASCII raw (UTF-8) as Forge writes it; the line ending (LF or CRLF) is kept.
    """
    obj = json.loads(raw.decode("utf-8"), strict=False)
    new = {k: game_id if k == "game_id" else v for k, v in obj.items() if k != ORIGINAL_ID}
    new[ORIGINAL_ID] = forge_game_id
    text = json.dumps(new, ensure_ascii=False, separators=(",", ":"))
    # a lone surrogate (a "\ud800" escape in the source) can only sit inside a JSON string,
    # where backslashreplace writes it back as that same escape
    return text.encode("utf-8", "backslashreplace") + (b"\r\n" if raw.endswith(b"\r\n") else b"\n")


@dataclass
class HeldGame:
    """What the Forge folder holds of one game: every line under one ``game_id``, in all its files.

    A game imported while Forge was still writing it, then again grown, lies in two files under
    one id (its first lines in one, the rest in a later one), so the lines of an id are joined
    across files.

    Attributes:
        forge_game_id: the id Forge wrote (``forge_game_id`` of a re-keyed game, else its ``game_id``).
        lines: the SHA-256 digest of each line's canonical JSON (:attr:`Game.line_digests`) -> count.
        files: the files holding its lines.
    """

    forge_game_id: str
    lines: Counter[bytes] = field(default_factory=Counter)
    files: set[Path] = field(default_factory=set)


def held_games(forge_dir: Path) -> dict[str, HeldGame]:
    """The games the Forge folder holds, by ``game_id`` (an id Forge wrote, or a re-keyed one).

    Every line of an id counts, whichever file and run it is in (:class:`HeldGame`); bad lines
    (a file put there by hand) are left out. Empty when the folder does not exist.
    """
    held: dict[str, HeldGame] = {}
    for p in scan_batches(forge_dir, sources=(), include_forge=True) if forge_dir.is_dir() else []:
        for game in read_games(p, []):
            h = held.setdefault(game.game_id, HeldGame(game.forge_game_id))
            h.lines.update(game.line_digests)
            h.files.add(p)
    return held


Match = tuple[Literal["held", "grown", "new"], str | None, int]
"""How a game relates to the held games (:func:`match_game`): ``(kind, held id, lines held)``."""


def match_game(game: Game, held: dict[str, Counter[bytes]]) -> Match:
    """Whether ``game`` is a game held already, one held in part that grew, or a new game.

    Only held games of the same Forge id (``game.forge_game_id``) are candidates; ``held``
    maps each of their ids to its lines (digests -> count, :class:`HeldGame`).

    Returns:
        ``("held", id, len(game.lines))`` when every line of ``game`` is among the lines of
        ``id`` (the same game, or its beginning); else ``("grown", id, m)`` when the first
        ``m`` lines of ``game`` are exactly the ``m`` lines of ``id`` (the game of which the
        folder holds a beginning; the longest such beginning, then the first id in sort
        order); else ``("new", None, 0)``.
    """
    mine = Counter(game.line_digests)
    grown: tuple[int, str] | None = None
    for gid in sorted(held):
        lines = held[gid]
        if mine <= lines:
            return "held", gid, len(game.lines)
        m = lines.total()
        if 0 < m < len(game.lines) and Counter(game.line_digests[:m]) == lines and (grown is None or m > grown[0]):
            grown = (m, gid)
    return ("grown", grown[1], grown[0]) if grown else ("new", None, 0)


def free_game_id(game: Game, taken: set[str] | dict[str, HeldGame]) -> str:
    """``game``'s own id when no other game holds it, else ``<forge_game_id>~<8 hex of its identity>``
    (16, then 64 hex in the unlikely case that another game holds that too)."""
    candidates = [game.game_id] + [f"{game.forge_game_id}{REKEY_SEP}{game.identity[:n]}" for n in (8, 16, 64)]
    return next(c for c in candidates if c not in taken)  # a full-hash id is only ever this game's
