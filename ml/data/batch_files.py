"""Decision files: naming, batch writing, reading and scanning (the schema is ``ml.game.record``).

Format reference: ``shared/docs/forge-decision-format.md``. Files (shared/docs/forge-decision-format.md
"Files"), by :func:`classify_file`: ``ml-decisions-sim-<id>.jsonl`` -> ``sim`` (teacher batches)
and ``ml-decisions-ppo-<id>.jsonl`` -> ``ppo`` (self-play batches), both written by
:class:`BatchWriter`; ``ml-decisions-<8 hex>[-t<N>].jsonl`` -> ``forge`` (Forge's own files, read
only when asked for); anything else, ``*.tmp`` included -> None (ignored).

Each line is validated as the record kind ``ml.game.registry.record_model`` gives: an
``OpenSpielRecord`` for a line with an ``observation``, else the commander's (Forge's)
``DecisionRecord``.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ml.base.io import DataFileError, JSONObject, JSONValue
from ml.base.jsonl import JsonlWriter, iter_jsonl
from ml.game.record import (
    READABLE_VERSIONS,
    SCHEMA_VERSION,
    FieldProblem,
    Record,
    RecordError,
    RecordModel,
)
from ml.game.registry import record_model
from ml.game.schema_errors import UNION_TAG_RE

logger = logging.getLogger(__name__)

_BATCH_ID_RE = re.compile(r"^[A-Za-z0-9_]+(?:-[A-Za-z0-9_]+)*$")
_FILE_RES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("sim", re.compile(r"^ml-decisions-sim-[A-Za-z0-9_-]+\.jsonl$")),
    ("ppo", re.compile(r"^ml-decisions-ppo-[A-Za-z0-9_-]+\.jsonl$")),
    ("forge", re.compile(r"^ml-decisions-[0-9a-fA-F]{8}(?:-t\d+)?\.jsonl$")),
)


# --------------------------------------------------------------------------- writing


def record_to_json(record: RecordModel | Mapping[str, JSONValue]) -> str:
    """Serialize a record as one compact JSON line (no newline), keys in Forge's order.

    None-valued optional fields are left out; non-ASCII is written raw. Unknown keys of a
    dict input are dropped.

    Args:
        record: a record, or a dict that is validated into one first.

    Returns:
        The JSON text of the line.

    Raises:
        pydantic.ValidationError: if a dict input does not fit the schema.
    """
    if not isinstance(record, RecordModel):
        record = record_model(record).model_validate(record)
    return record.model_dump_json(exclude_none=True)


def batch_filename(source: str, batch_id: str) -> str:
    """File name of one of our batches: ``ml-decisions-<source>-<batch_id>.jsonl``.

    Args:
        source: ``sim`` or ``ppo``.
        batch_id: letters, digits and ``_``, optionally joined by single ``-`` (e.g. ``gen003-att1-w0``).

    Raises:
        ValueError: for another source or an id that would not be recognized by :func:`classify_file`.
    """
    if source not in ("sim", "ppo"):
        raise ValueError(f"batch source must be 'sim' or 'ppo', got {source!r}")
    if not _BATCH_ID_RE.match(batch_id):
        raise ValueError(f"batch_id must match {_BATCH_ID_RE.pattern}, got {batch_id!r}")
    return f"ml-decisions-{source}-{batch_id}.jsonl"


def classify_file(path: str | os.PathLike[str]) -> str | None:
    """Class of a decision file by its name: ``"sim"``, ``"ppo"``, ``"forge"`` or None (ignore it)."""
    name = Path(path).name
    for cls, pattern in _FILE_RES:
        if pattern.match(name):
            return cls
    return None


def game_lines(
    records: Iterable[RecordModel | Mapping[str, JSONValue]], outcome: str, source: str, path: Path
) -> tuple[str, list[str]]:
    """One game's records as the validated JSON lines of a ``source`` batch (``BatchWriter.write_lines``).

    Every record gets ``game_outcome``, ``source`` and ``schema_version`` filled in and is validated.

    Args:
        records: the game's records in decision order, all with the same ``game_id``.
        outcome: ``draw`` or ``win_seat_<k>``; written on every record.
        source: ``sim`` or ``ppo``.
        path: the batch file, named in the errors.

    Returns:
        ``(game_id, lines)``: one compact JSON text per record (:func:`record_to_json`), no newline.

    Raises:
        RecordError: if a record does not fit the schema (field named, line omitted).
        ValueError: if the records are empty or mix game ids.
    """
    lines: list[str] = []
    game_id: str | None = None
    for i, rec in enumerate(records):
        data = rec.model_dump() if isinstance(rec, RecordModel) else dict(rec)
        data.update(game_outcome=outcome, source=source, schema_version=SCHEMA_VERSION)
        try:
            model = record_model(data).model_validate(data)
        except ValidationError as e:
            field, problem = _describe(e)
            raise RecordError(
                path, None, field, f"game {data.get('game_id')!r} record {i}: {problem}", e.errors(include_url=False)
            ) from None
        if game_id is None:
            game_id = model.game_id
        elif model.game_id != game_id:
            raise ValueError(f"{path}: write_game got records of games {game_id!r} and {model.game_id!r}")
        lines.append(record_to_json(model))
    if game_id is None:
        raise ValueError(f"{path}: write_game got no records")
    return game_id, lines


class BatchWriter:
    """Write one batch file of our own records, one game at a time, atomically.

    Built on :class:`ml.base.jsonl.JsonlWriter`: the batch appears under its final name only when
    the writer closes cleanly. Every record gets ``game_outcome``, ``source`` and
    ``schema_version`` filled in and is validated before any line of its game is written,
    so a bad record never leaves half a game. Only one game is held in memory.

    Args:
        directory: output directory (created if missing).
        source: ``sim`` or ``ppo``.
        batch_id: see :func:`batch_filename`.

    Attributes:
        path: the final batch file.
        games: games written so far.
        decisions: records written so far.

    Raises:
        ValueError: for a bad source or batch id.
    """

    def __init__(self, directory: str | os.PathLike[str], source: str, batch_id: str) -> None:
        self.path = Path(directory) / batch_filename(source, batch_id)
        self.source = source
        self.games = 0
        self.decisions = 0
        self._seen: set[str] = set()
        self._writer = JsonlWriter(self.path)

    def write_game(self, records: Iterable[RecordModel | Mapping[str, JSONValue]], outcome: str) -> None:
        """Validate and append one game's records (:func:`game_lines`, then :meth:`write_lines`).

        Args:
            records: the game's records in decision order, all with the same ``game_id``.
            outcome: ``draw`` or ``win_seat_<k>``; written on every record.

        Raises:
            RecordError: if a record does not fit the schema (field named, line omitted);
                nothing of this game is written.
            ValueError: if the records are empty, mix game ids, or repeat a game already
                written in this batch.
        """
        self.write_lines(*game_lines(records, outcome, self.source, self.path))

    def write_lines(self, game_id: str, lines: list[str]) -> None:
        """Append one game's lines, validated by :func:`game_lines` for this batch (a chunk's worker
        may have made them).

        Raises:
            ValueError: if ``game_id`` was already written in this batch.
        """
        if game_id in self._seen:
            raise ValueError(f"{self.path}: game {game_id!r} was already written to this batch")
        self._seen.add(game_id)
        for line in lines:
            self._writer.write_line(line)
        self.games += 1
        self.decisions += len(lines)

    def close(self) -> None:
        """Finish the batch: fsync and rename to the final name. Idempotent."""
        self._writer.close()

    def abort(self) -> None:
        """Discard the batch (removes the temporary file)."""
        self._writer.abort()

    def __enter__(self) -> BatchWriter:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self._writer.__exit__(exc_type, exc, tb)


# --------------------------------------------------------------------------- reading


def _field_path(error: Any) -> list[str]:
    """Dotted-path parts of a pydantic error's loc, without union-member tags like ``int``."""
    return [str(p) for p in error["loc"] if not (isinstance(p, str) and UNION_TAG_RE.match(p))]


def _describe(err: ValidationError) -> tuple[str, str]:
    """First error of a ValidationError as ``(dotted field path, message)``; notes how many more.

    For a union (``cmdr_dmg``) the deepest member error is reported (``cmdr_dmg.1``, not ``cmdr_dmg``).
    """
    errors = err.errors(include_url=False)
    head = _field_path(errors[0])
    same_field = [e for e in errors if _field_path(e)[: len(head)] == head]
    first = max(same_field, key=lambda e: len(e["loc"]))
    loc = _field_path(first)
    ctx_err = first.get("ctx", {}).get("error")
    if isinstance(ctx_err, FieldProblem):
        loc.append(ctx_err.field)
    msg = str(ctx_err) if isinstance(ctx_err, ValueError) else first["msg"]
    if first["type"].endswith(("_type", "_parsing")):
        msg += f", got {first['input']!r}"
    more = len({tuple(_field_path(e)) for e in errors}) - 1
    if more > 0:
        msg += f" (and {more} more errors)"
    return ".".join(loc) or "<record>", msg


def read_records(
    path: str | os.PathLike[str],
    *,
    source: str | None = None,
    on_error: Callable[[DataFileError], None] | None = None,
    span: tuple[int, int, int] | None = None,
) -> Iterator[Record]:
    """Stream and validate the records of one decision file.

    Records without a ``source`` get the file's class filled in (``source`` if given, else
    :func:`classify_file`). A truncated last line is skipped with a warning (see
    :func:`ml.base.jsonl.iter_jsonl`). Values must have their JSON types exactly (no ``"40"`` for 40).

    Args:
        path: the JSONL file.
        source: class to assume for the file instead of the one its name gives.
        on_error: if given, each bad line (``RecordError`` for a schema problem,
            ``DataFileError`` for a line that is not JSON, a truncated last line included) is
            passed to it and skipped, and the good lines are still yielded; if None, the
            first bad line raises.
        span: only these lines (``ml.base.jsonl.iter_jsonl``'s ``span``); None: the whole file.

    Yields:
        Validated records in file order: ``OpenSpielRecord`` for lines with an ``observation``,
        else ``DecisionRecord``.

    Raises:
        RecordError: without ``on_error``, for a record that does not fit the schema, or whose
            ``source`` contradicts the file's class; the message names file, line and field.
        DataFileError: without ``on_error``, for a line that is not JSON.
        ValueError: for an unknown ``source``.
        FileNotFoundError: if the file does not exist.
    """
    path = Path(path)
    if source not in (None, "forge", "sim", "ppo"):
        raise ValueError(f"source must be 'forge', 'sim' or 'ppo', got {source!r}")
    file_class = source if source is not None else classify_file(path)
    for line_no, obj in iter_jsonl(path, on_error=on_error, span=span):
        try:
            record = validate_line(path, line_no, obj, file_class)
        except RecordError as e:
            if on_error is None:
                raise
            on_error(e)
            continue
        yield record


def validate_line(path: Path, line_no: int, obj: JSONObject, file_class: str | None) -> Record:
    """One parsed JSONL line (``ml.base.jsonl.iter_jsonl``) as a record of a ``file_class`` file.

    ``obj`` gets ``source`` filled in from ``file_class`` when it has none (as :func:`read_records`).

    Args:
        path, line_no: where the line is (for the error message).
        obj: the parsed JSON object.
        file_class: ``forge``, ``sim``, ``ppo`` or None (no source check).

    Returns:
        The validated record (``OpenSpielRecord`` when it has an ``observation``, else ``DecisionRecord``).

    Raises:
        RecordError: the line does not fit the schema, has an unknown ``schema_version``, or a
            ``source`` other than ``file_class``; the message names file, line and field.
    """
    version = obj.get("schema_version")
    if version is not None and version not in READABLE_VERSIONS:  # report this before any shape error it explains
        known = ", ".join(map(str, READABLE_VERSIONS))
        raise RecordError(
            path, line_no, "schema_version", f"unsupported schema_version {version!r} (this reader knows {known})"
        )
    if file_class is not None:
        rec_source = obj.setdefault("source", file_class)
        if rec_source != file_class:
            raise RecordError(path, line_no, "source", f"record source {rec_source!r} in a {file_class!r} file")
    if file_class == "forge" and "observation" in obj:
        raise RecordError(path, line_no, "observation", "an OpenSpiel record in a Forge file (Forge writes commander records)")
    try:
        return record_model(obj).model_validate(obj, strict=True)
    except ValidationError as e:
        field, problem = _describe(e)
        raise RecordError(path, line_no, field, problem, e.errors(include_url=False)) from None


def scan_batches(
    directory: str | os.PathLike[str], sources: Sequence[str] = ("sim", "ppo"), include_forge: bool = False
) -> list[Path]:
    """Decision files of the given classes in ``directory`` (not recursive), sorted by name.

    Never a catch-all: external Forge files are included only when ``include_forge`` is
    true, and ``*.tmp`` and other names are always ignored.

    Args:
        directory: the directory to list.
        sources: which of our batch classes to include (``sim``, ``ppo``).
        include_forge: also include Forge's own ``ml-decisions-<8 hex>[-t<N>].jsonl`` files.

    Returns:
        Sorted paths.

    Raises:
        ValueError: if ``sources`` names anything but ``sim``/``ppo``.
        NotADirectoryError: if ``directory`` is not an existing directory.
    """
    unknown = set(sources) - {"sim", "ppo"}
    if unknown:
        raise ValueError(f"sources must be among 'sim', 'ppo' (use include_forge for Forge files), got {sorted(unknown)}")
    directory = Path(directory)
    if not directory.is_dir():
        raise NotADirectoryError(f"{directory}: not a directory")
    wanted = set(sources) | ({"forge"} if include_forge else set())
    return sorted(p for p in directory.glob("ml-decisions-*.jsonl") if p.is_file() and classify_file(p) in wanted)


def iter_games(records: Iterable[Record]) -> Iterator[list[Record]]:
    """Group consecutive records by ``game_id`` (files are written one game at a time).

    A game id seen again after another game is yielded as a new group with a logged
    warning (interleaved writers, or the same seed run twice).

    Yields:
        One list of records per game, in input order.
    """
    seen: set[str] = set()
    game: list[Record] = []
    for rec in records:
        if game and rec.game_id != game[0].game_id:
            yield game
            game = []
        if not game:
            if rec.game_id in seen:
                logger.warning("game %r appears again after other games; yielding it as a separate group", rec.game_id)
            seen.add(rec.game_id)
        game.append(rec)
    if game:
        yield game
