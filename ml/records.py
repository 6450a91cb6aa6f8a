"""The one decision-record schema: Forge's JSONL decision lines plus the PPO extension.

Format reference: ``shared/docs/forge-decision-format.md``. One record per decision point of
the acting player; keys are written in Forge's emission order followed by this project's
extras (``action_mask``, ``source``, ``model_version``, ``generation``, ``reward``,
``episode_return``, ``schema_version``). Real Forge lines carry none of the extras.

Files (forge-decision-format.md "Files"), by :func:`classify_file`: ``ml-decisions-sim-<id>.jsonl``
-> ``sim`` (teacher batches) and ``ml-decisions-ppo-<id>.jsonl`` -> ``ppo`` (self-play batches), both
written by :class:`BatchWriter`; ``ml-decisions-<8 hex>[-t<N>].jsonl`` -> ``forge`` (Forge's own files,
read only when asked for); anything else, ``*.tmp`` included -> None (ignored).

Two record kinds share the reading and writing path: :class:`DecisionRecord` (the commander
and Forge: seat views in ``players``) and :class:`OpenSpielRecord` (any OpenSpiel game: the
acting player's ``observation`` vector is stored in the record, so no game engine is needed
to read it). A line with an ``observation`` key is an OpenSpiel record.

Version History:
    1: first version (Forge keys + PPO extension + ``action_mask``). The OpenSpiel record kind
       was added without a bump: every existing file reads exactly as before.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ml.game.commander.actions import ACTION_INDEX, MACRO_ACTIONS, MAX_POD, NUM_ACTIONS
from ml.io import DataFileError, JsonlWriter, iter_jsonl

logger = logging.getLogger(__name__)

SCHEMA_VERSION = 1
"""Version of the record schema written by this code; bump on any change (see Version History)."""

Source = Literal["forge", "sim", "ppo"]
PPO_REQUIRED: tuple[str, ...] = ("model_version", "generation", "reward", "episode_return")
PPO_REQUIRED += ("action.macro_action", "action.action_idx", "schema_version")
"""Fields a ``source == "ppo"`` record must carry (forge-decision-format.md "PPO extension")."""

_UNION_TAG_RE = re.compile(r"^(?:int|str|float|bool|dict\[.*\]|list\[.*\]|\[key\])$")  # pydantic's union-member loc parts
_OUTCOME_RE = re.compile(r"^(?:draw|win_seat_(\d+))$")
_BATCH_ID_RE = re.compile(r"^[A-Za-z0-9_]+(?:-[A-Za-z0-9_]+)*$")
_FILE_RES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("sim", re.compile(r"^ml-decisions-sim-[A-Za-z0-9_-]+\.jsonl$")),
    ("ppo", re.compile(r"^ml-decisions-ppo-[A-Za-z0-9_-]+\.jsonl$")),
    ("forge", re.compile(r"^ml-decisions-[0-9a-fA-F]{8}(?:-t\d+)?\.jsonl$")),
)


class RecordError(DataFileError):
    """A decision record that does not fit the schema; message ``"<file>:<line>: <field>: <problem>"``.

    Attributes:
        errors: all pydantic error dicts for the record (the message reports the first).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        line: int | None,
        field: str | None,
        problem: str,
        errors: Sequence[dict[str, Any]] = (),
    ) -> None:
        super().__init__(path, line, field, problem)
        self.errors = list(errors)


class _FieldProblem(ValueError):
    """A model-validator error that knows which field it is about (pydantic only gives the model's loc)."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(problem)
        self.field = field


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore")  # unknown keys from newer writers are dropped, never fatal


class PlayerView(_Model):
    """One seat's public state at the decision point (``players[]`` of the record)."""

    seat: int = Field(ge=0, lt=MAX_POD)
    life: int
    cmdr_dmg: int | dict[str, int]
    """Commander damage taken: Forge's sum over sources, or one entry per source seat (newer writers)."""
    mana: int
    """Untapped mana sources."""
    cmdr_tax: int
    creatures: int
    lands: int
    """Forge's land count is a name heuristic and can include mana rocks."""
    hand: list[str] = []
    battlefield: list[str] = []
    graveyard: list[str] = []
    command_zone: list[str] = []
    library: int | None = None
    mana_sources: int | None = None
    eliminated: bool | None = None
    commander_name: str | None = None
    """This seat's commander (our extra; Forge names only the acting seat's, as ``commander``)."""
    tapped: list[str] | None = None
    """Tapped creatures on the battlefield (our extra; absent in Forge files: read as none tapped)."""
    sick: list[str] | None = None
    """Summoning-sick creatures (our extra; absent in Forge files: read as none sick)."""
    last_attacker: int | None = Field(None, ge=-1, lt=MAX_POD)
    """Seat that attacked this seat last, -1 for none (our extra; public: every seat saw the attack)."""

    @field_validator("cmdr_dmg", mode="before")
    @classmethod
    def _source_keys_are_seats(cls, v: Any) -> Any:
        if isinstance(v, dict):  # Python writers may key by int seat; JSON keys are str
            v = {str(k) if isinstance(k, int) and not isinstance(k, bool) else k: n for k, n in v.items()}
            bad = [k for k in v if not (isinstance(k, str) and k.isdecimal())]
            if bad:
                raise ValueError(f"per-source commander damage keys must be seat numbers, got {bad!r}")
        return v

    def cmdr_dmg_by_source(self) -> dict[int, int]:
        """Commander damage taken per source seat.

        Returns:
            ``{source_seat: damage}``. A plain int from Forge (all sources summed) maps to
            ``{-1: total}``: -1 means "unknown source" (rule 903.10a needs one source's 21,
            so a summed value only bounds it).
        """
        if isinstance(self.cmdr_dmg, int):
            return {-1: self.cmdr_dmg}
        return {int(k): v for k, v in self.cmdr_dmg.items()}


class Action(_Model):
    """The decision taken (``action`` of the record)."""

    type: str
    """Forge: ``cast``, ``cast_commander``, ``land``, ``attack``; our writers also ``pass``, ``hold``."""
    card: str = ""
    target: str = ""
    raw: str = ""
    """The engine's log line (Forge cuts it at 200 characters)."""
    macro_action: str | None = None
    action_idx: int | None = Field(default=None, ge=0, lt=NUM_ACTIONS)

    @model_validator(mode="after")
    def _macro_consistent(self) -> Action:
        if self.macro_action is not None:
            if self.macro_action not in ACTION_INDEX:
                raise _FieldProblem("macro_action", f"unknown macro action {self.macro_action!r}")
            idx = ACTION_INDEX[self.macro_action]
            if self.action_idx is not None and self.action_idx != idx:
                raise _FieldProblem(
                    "action_idx",
                    f"action_idx {self.action_idx} is {MACRO_ACTIONS[self.action_idx]!r}, "
                    f"but macro_action is {self.macro_action!r} (index {idx})",
                )
        return self


class DecisionRecord(_Model):
    """One decision line. Field order is the write order (Forge's, then the PPO extension)."""

    game_id: str
    turn: int = Field(ge=1)
    phase: str
    active_seat: int = Field(ge=0, lt=MAX_POD)
    game_outcome: str
    """``draw`` or ``win_seat_<k>`` (0-based seat): the whole game's result, on every record."""
    deck_name: str = ""
    commander: str = ""
    archetype: str = "midrange"
    players: list[PlayerView] = Field(min_length=2, max_length=MAX_POD)
    action: Action
    action_mask: list[int] | None = Field(default=None, min_length=NUM_ACTIONS, max_length=NUM_ACTIONS)
    """int[NUM_ACTIONS] of 0/1: legal macro actions at this decision."""
    source: Source | None = None
    model_version: str | None = None
    generation: int | None = Field(default=None, ge=0)
    reward: float | None = Field(default=None, allow_inf_nan=False)
    episode_return: float | None = Field(default=None, allow_inf_nan=False)
    schema_version: int | None = None

    @field_validator("game_outcome")
    @classmethod
    def _outcome_form(cls, v: str) -> str:
        m = _OUTCOME_RE.match(v)
        if m is None or (m.group(1) is not None and int(m.group(1)) >= MAX_POD):
            raise ValueError(f"game_outcome must be 'draw' or 'win_seat_<0..{MAX_POD - 1}>', got {v!r}")
        return v

    @field_validator("action_mask")
    @classmethod
    def _mask_bits(cls, v: list[int] | None) -> list[int] | None:
        if v is not None and any(b not in (0, 1) for b in v):
            raise ValueError("action_mask entries must be 0 or 1")
        return v

    @field_validator("schema_version")
    @classmethod
    def _known_version(cls, v: int | None) -> int | None:
        if v is not None and v != SCHEMA_VERSION:
            raise ValueError(f"unsupported schema_version {v} (this reader knows {SCHEMA_VERSION})")
        return v

    @model_validator(mode="after")
    def _ppo_complete(self) -> DecisionRecord:
        if self.source == "ppo":
            missing = [f for f in PPO_REQUIRED if _get_dotted(self, f) is None]
            if missing:
                raise _FieldProblem(missing[0], f"a ppo record requires {', '.join(missing)}")
        if (
            self.action_mask is not None
            and self.action.action_idx is not None
            and not self.action_mask[self.action.action_idx]
        ):
            raise _FieldProblem("action.action_idx", f"action_idx {self.action.action_idx} is masked out by action_mask")
        return self

    def winner(self) -> int | None:
        """Seat of the game's winner, or None for a draw."""
        m = _OUTCOME_RE.match(self.game_outcome)
        assert m is not None, "game_outcome was validated at construction"
        return None if m.group(1) is None else int(m.group(1))

    @property
    def players_count(self) -> int:
        """Seats in the game (``len(players)``)."""
        return len(self.players)


class MoveAction(_Model):
    """The move taken in an OpenSpiel game (``action`` of an :class:`OpenSpielRecord`)."""

    type: str = "move"
    raw: str = ""
    """``state.action_to_string(player, action)`` (at most 200 characters)."""
    action_idx: int = Field(ge=0)
    """The OpenSpiel action id, the label and the policy's output index."""


class OpenSpielRecord(_Model):
    """One decision of an OpenSpiel game; field order is the write order.

    The common keys mean what they mean in :class:`DecisionRecord`; ``turn`` counts the game's
    decisions (1-based) and ``phase`` is ``play``.
    """

    game_id: str
    turn: int = Field(ge=1)
    phase: str = "play"
    active_seat: int = Field(ge=0)
    game_outcome: str
    game: str
    """The game, ``openspiel:<short name>``."""
    num_players: int = Field(ge=1)
    observation: list[float]
    """float[obs_dim]: ``observation_tensor`` (else ``information_state_tensor``) of the acting player."""
    action: MoveAction
    action_mask: list[int] | None = None
    """int[num_distinct_actions] of 0/1: the legal moves."""
    source: Source | None = None
    model_version: str | None = None
    generation: int | None = Field(default=None, ge=0)
    reward: float | None = Field(default=None, allow_inf_nan=False)
    episode_return: float | None = Field(default=None, allow_inf_nan=False)
    schema_version: int | None = None

    @field_validator("game_outcome")
    @classmethod
    def _outcome_form(cls, v: str) -> str:
        return _check_outcome(v, None)

    @field_validator("action_mask")
    @classmethod
    def _mask_bits(cls, v: list[int] | None) -> list[int] | None:
        return DecisionRecord._mask_bits(v)

    @field_validator("schema_version")
    @classmethod
    def _known_version(cls, v: int | None) -> int | None:
        return DecisionRecord._known_version(v)

    @model_validator(mode="after")
    def _consistent(self) -> OpenSpielRecord:
        if self.active_seat >= self.num_players:
            raise _FieldProblem("active_seat", f"seat {self.active_seat} in a game of {self.num_players} players")
        winner = self.winner()
        if winner is not None and winner >= self.num_players:
            raise _FieldProblem("game_outcome", f"{self.game_outcome!r} in a game of {self.num_players} players")
        if self.source == "ppo":
            missing = [f for f in OPENSPIEL_PPO_REQUIRED if _get_dotted(self, f) is None]
            if missing:
                raise _FieldProblem(missing[0], f"a ppo record requires {', '.join(missing)}")
        if self.action_mask is not None:
            if self.action.action_idx >= len(self.action_mask):
                raise _FieldProblem(
                    "action.action_idx", f"action_idx {self.action.action_idx} >= {len(self.action_mask)} actions"
                )
            if not self.action_mask[self.action.action_idx]:
                raise _FieldProblem("action.action_idx", f"action_idx {self.action.action_idx} is masked out by action_mask")
        return self

    @property
    def players_count(self) -> int:
        """Seats in the game."""
        return self.num_players

    def winner(self) -> int | None:
        """Seat of the game's winner, or None for a draw."""
        m = _OUTCOME_RE.match(self.game_outcome)
        assert m is not None, "game_outcome was validated at construction"
        return None if m.group(1) is None else int(m.group(1))


Record = DecisionRecord | OpenSpielRecord
"""Either record kind; :func:`record_model` tells which one a JSON object is."""
OPENSPIEL_PPO_REQUIRED: tuple[str, ...] = ("model_version", "generation", "reward", "episode_return", "schema_version")


def _check_outcome(v: str, limit: int | None) -> str:
    m = _OUTCOME_RE.match(v)
    if m is None or (limit is not None and m.group(1) is not None and int(m.group(1)) >= limit):
        bound = f"0..{limit - 1}" if limit is not None else "k"
        raise ValueError(f"game_outcome must be 'draw' or 'win_seat_<{bound}>', got {v!r}")
    return v


def record_model(obj: Any) -> type[DecisionRecord] | type[OpenSpielRecord]:
    """The record kind of a JSON object or record: OpenSpiel when it has an ``observation``."""
    if isinstance(obj, (DecisionRecord, OpenSpielRecord)):
        return type(obj)
    return OpenSpielRecord if isinstance(obj, dict) and "observation" in obj else DecisionRecord


def _get_dotted(obj: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        obj = getattr(obj, part)
    return obj


# --------------------------------------------------------------------------- writing


def record_to_json(record: Record | dict[str, Any]) -> str:
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
    if not isinstance(record, (DecisionRecord, OpenSpielRecord)):
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


class BatchWriter:
    """Write one batch file of our own records, one game at a time, atomically.

    Built on :class:`ml.io.JsonlWriter`: the batch appears under its final name only when
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

    def write_game(self, records: Iterable[Record | dict[str, Any]], outcome: str) -> None:
        """Validate and append one game's records.

        Args:
            records: the game's records in decision order, all with the same ``game_id``.
            outcome: ``draw`` or ``win_seat_<k>``; written on every record.

        Raises:
            RecordError: if a record does not fit the schema (field named, line omitted);
                nothing of this game is written.
            ValueError: if the records are empty, mix game ids, or repeat a game already
                written in this batch.
        """
        lines: list[str] = []
        game_id: str | None = None
        for i, rec in enumerate(records):
            data = rec.model_dump() if isinstance(rec, (DecisionRecord, OpenSpielRecord)) else dict(rec)
            data.update(game_outcome=outcome, source=self.source, schema_version=SCHEMA_VERSION)
            try:
                model = record_model(data).model_validate(data)
            except ValidationError as e:
                field, problem = _describe(e)
                raise RecordError(
                    self.path, None, field, f"game {data.get('game_id')!r} record {i}: {problem}", e.errors(include_url=False)
                ) from None
            if game_id is None:
                game_id = model.game_id
            elif model.game_id != game_id:
                raise ValueError(f"{self.path}: write_game got records of games {game_id!r} and {model.game_id!r}")
            lines.append(record_to_json(model))
        if game_id is None:
            raise ValueError(f"{self.path}: write_game got no records")
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
    return [str(p) for p in error["loc"] if not (isinstance(p, str) and _UNION_TAG_RE.match(p))]


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
    if isinstance(ctx_err, _FieldProblem):
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
) -> Iterator[Record]:
    """Stream and validate the records of one decision file.

    Records without a ``source`` get the file's class filled in (``source`` if given, else
    :func:`classify_file`). A truncated last line is skipped with a warning (see
    :func:`ml.io.iter_jsonl`). Values must have their JSON types exactly (no ``"40"`` for 40).

    Args:
        path: the JSONL file.
        source: class to assume for the file instead of the one its name gives.
        on_error: if given, each bad line (``RecordError`` for a schema problem,
            ``DataFileError`` for a line that is not JSON, a truncated last line included) is
            passed to it and skipped, and the good lines are still yielded; if None, the
            first bad line raises.

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
    for line_no, obj in iter_jsonl(path, on_error=on_error):
        try:
            record = validate_line(path, line_no, obj, file_class)
        except RecordError as e:
            if on_error is None:
                raise
            on_error(e)
            continue
        yield record


def validate_line(path: Path, line_no: int, obj: dict[str, Any], file_class: str | None) -> Record:
    """One parsed JSONL line (``ml.io.iter_jsonl``) as a record of a ``file_class`` file.

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
    if version is not None and version != SCHEMA_VERSION:  # report this before any shape error it explains
        raise RecordError(
            path, line_no, "schema_version", f"unsupported schema_version {version!r} (this reader knows {SCHEMA_VERSION})"
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
