"""The decision-record schema shared by every game: base model, common checks, the OpenSpiel kind.

Format reference: ``shared/docs/forge-decision-format.md``. One record per decision point of
the acting player; keys are written in the writer's field order, then this project's extras
(``action_mask``, ``source``, ``model_version``, ``generation``, ``reward``,
``episode_return``, ``policy``, ``schema_version``; on a commander record, ``forge_game_id``
where ``import-forge`` re-keyed a Forge game). Real Forge lines carry none of the extras.

Two record kinds share the reading and writing path (``ml.data.batch_files``):

* the commander's (Forge's) ``DecisionRecord``: seat views in ``players``. It names the
  commander's macro actions and pod limits, so it lives with the game, in
  ``ml.game.commander.forge_record``;
* :class:`OpenSpielRecord` (any OpenSpiel game, and any PettingZoo env: ``game`` names
  ``pettingzoo:<module>:<factory>`` and ``env_version`` the env's version): the acting player's
  ``observation`` vector is stored in the record, so no game engine is needed to read it.

A line with an ``observation`` key is an OpenSpiel record; ``ml.game.registry.record_model``
tells the two apart (the one module that knows both games).

Version History:
    1: first version (Forge keys + PPO extension + ``action_mask``). The OpenSpiel record kind
       was added without a bump: every existing file reads exactly as before.
    2: ``policy`` (optional): the acting policy's probabilities over the actions at the
       decision (PPO records), for distillation. Version-1 files read as before. The
       commander's optional ``forge_game_id`` (``import-forge``) was added without a bump,
       and so was the optional ``env_version`` of PettingZoo games' records.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from typing import Annotated, ClassVar, Protocol, TypeAlias

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

from ml.base.io import DataFileError, JSONValue
from ml.config.sections import Source

SCHEMA_VERSION = 2
"""Version of the record schema written by this code; bump on any change (see Version History)."""
READABLE_VERSIONS = (1, 2)
"""Versions this reader reads: every one written so far (the changes only added optional keys)."""
POLICY_DECIMALS = 6
"""Decimals of the ``policy`` probabilities the writers round to (``ml.play.runner``, ``ml.game.env_game``)."""

POLICY_SUM_TOLERANCE = 1e-3
"""``policy`` must sum to 1 within this (the writer rounds each probability to 6 decimals)."""

OUTCOME_RE = re.compile(r"^(?:draw|win_seat_(\d+))$")
"""``game_outcome``: ``draw`` or ``win_seat_<k>`` (0-based seat)."""
TEXT_MAX_CHARS = 200
"""Longest text of a record (ids, names, log lines): Forge cuts ``action.raw`` at 200 characters
(shared/docs/forge-decision-format.md), and the longest card name ever printed has 141."""
Text = Annotated[str, Field(max_length=TEXT_MAX_CHARS, description="at most 200 characters, as Forge's log lines")]
"""A record's text field (``TEXT_MAX_CHARS``)."""
RecordLike: TypeAlias = "Mapping[str, JSONValue] | BaseModel | Record"
"""A decision record as a parsed JSON object or as a record model (``RecordModel``, read as :class:`Record`);
:func:`record_field` reads either."""


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
        errors: Sequence[Mapping[str, object]] = (),
    ) -> None:
        super().__init__(path, line, field, problem)
        self.errors = list(errors)


class FieldProblem(ValueError):
    """A model-validator error that knows which field it is about (pydantic only gives the model's loc)."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(problem)
        self.field = field


class RecordModel(BaseModel):
    """Base of every record kind and its parts."""

    model_config = ConfigDict(extra="ignore")  # unknown keys from newer writers are dropped, never fatal


class RecordAction(Protocol):
    """What is read of a record's ``action`` of either kind (``MoveAction`` or the commander's ``Action``)."""

    @property
    def type(self) -> str: ...

    @property
    def raw(self) -> str: ...


class Record(Protocol):
    """What the dataset builder and the gate read of a record of either kind."""

    game_id: str
    turn: int
    active_seat: int
    game_outcome: str
    source: Source | None
    reward: float | None
    episode_return: float | None
    policy: list[float] | None

    @property
    def action(self) -> RecordAction: ...

    def winner(self) -> int | None: ...

    @property
    def players_count(self) -> int: ...


def record_field(obj: object, key: str, default: JSONValue = None) -> JSONValue:
    """Field ``key`` of a record (or a part of one) given as a dict or as a pydantic model."""
    if isinstance(obj, Mapping):
        return obj.get(key, default)
    return getattr(obj, key, default)


def get_dotted(obj: object, dotted: str) -> JSONValue:
    """Attribute ``a.b.c`` of a model."""
    for part in dotted.split("."):
        obj = getattr(obj, part)
    return obj


def check_outcome(v: str, limit: int | None) -> str:
    """``v`` when it is ``draw`` or ``win_seat_<k>`` with ``k < limit`` (any k when None); else ValueError."""
    m = OUTCOME_RE.match(v)
    if m is None or (limit is not None and m.group(1) is not None and int(m.group(1)) >= limit):
        bound = f"0..{limit - 1}" if limit is not None else "k"
        raise ValueError(f"game_outcome must be 'draw' or 'win_seat_<{bound}>', got {v!r}")
    return v


def outcome_winner(outcome: str) -> int | None:
    """Seat of the winner of a validated ``game_outcome``, or None for a draw."""
    m = OUTCOME_RE.match(outcome)
    assert m is not None, "game_outcome was validated at construction"
    return None if m.group(1) is None else int(m.group(1))


def check_mask_bits(v: list[int] | None) -> list[int] | None:
    """``action_mask`` when every entry is 0 or 1; else ValueError."""
    if v is not None and any(b not in (0, 1) for b in v):
        raise ValueError("action_mask entries must be 0 or 1")
    return v


def check_schema_version(v: int | None) -> int | None:
    """``schema_version`` when it is absent or one this reader reads; else ValueError."""
    if v is not None and v not in READABLE_VERSIONS:
        raise ValueError(f"unsupported schema_version {v} (this reader knows {', '.join(map(str, READABLE_VERSIONS))})")
    return v


POLICY_SINCE_VERSION = 2
"""The first ``schema_version`` whose records may carry ``policy``."""


def check_policy(
    policy: list[float] | None, mask: list[int] | None, num_actions: int | None, schema_version: int | None = None
) -> None:
    """Raise FieldProblem unless ``policy`` is a distribution over the legal actions, in a record
    whose version has the field.

    Args:
        policy: float[num_actions] probabilities, or None (no check).
        mask: int[num_actions] legal actions of the record, or None.
        num_actions: the game's action count (None: the mask's length, if any).
        schema_version: the record's version (None: unversioned, as a Forge line; not checked).
    """
    if policy is None:
        return
    if schema_version is not None and schema_version < POLICY_SINCE_VERSION:
        raise FieldProblem(
            "policy", f"schema_version {schema_version} has no policy (added in version {POLICY_SINCE_VERSION})"
        )
    size = num_actions if num_actions is not None else (len(mask) if mask is not None else len(policy))
    if len(policy) != size:
        raise FieldProblem("policy", f"{len(policy)} probabilities, the game has {size} actions")
    if any(not 0.0 <= p <= 1.0 for p in policy):
        raise FieldProblem("policy", "probabilities must lie in [0, 1]")
    if abs(sum(policy) - 1.0) > POLICY_SUM_TOLERANCE:
        raise FieldProblem("policy", f"probabilities sum to {sum(policy):.6f}, not 1")
    if mask is not None and any(p > 0 and not m for p, m in zip(policy, mask, strict=False)):
        raise FieldProblem("policy", "a probability on an action that action_mask marks illegal")


def check_complete(record: BaseModel, required: Sequence[str]) -> None:
    """Raise FieldProblem (first missing field) when a ``source == "ppo"`` record lacks a ``required`` field."""
    missing = [f for f in required if get_dotted(record, f) is None]
    if missing:
        raise FieldProblem(missing[0], f"a ppo record requires {', '.join(missing)}")


class DecisionModel(RecordModel):
    """Base of the record kinds (``OpenSpielRecord``, the commander's ``DecisionRecord``): the checks of
    the fields every kind has. It declares no field, so a kind's fields keep its write order.

    Class attributes:
        outcome_seats: seats a ``game_outcome`` may name (None: any).
        ppo_required: fields a record of ``source == "ppo"`` must carry.
        policy_actions: the actions a ``policy`` spans (None: the mask's length).
    """

    outcome_seats: ClassVar[int | None] = None
    ppo_required: ClassVar[tuple[str, ...]] = ()
    policy_actions: ClassVar[int | None] = None

    @field_validator("game_outcome", check_fields=False)
    @classmethod
    def _outcome_form(cls, v: str) -> str:
        return check_outcome(v, cls.outcome_seats)

    @field_validator("action_mask", check_fields=False)
    @classmethod
    def _mask_bits(cls, v: list[int] | None) -> list[int] | None:
        return check_mask_bits(v)

    @field_validator("schema_version", check_fields=False)
    @classmethod
    def _known_version(cls, v: int | None) -> int | None:
        return check_schema_version(v)

    def _check_decision(self, source: Source | None, policy: list[float] | None, mask: list[int] | None,
                        action_idx: int | None, schema_version: int | None) -> None:  # fmt: skip
        """Raise FieldProblem for an incomplete ppo record, a policy that is no distribution over the
        legal actions, or an action the mask leaves out."""
        if source == "ppo":
            check_complete(self, self.ppo_required)
        check_policy(policy, mask, self.policy_actions, schema_version)
        if mask is None or action_idx is None:
            return
        if action_idx >= len(mask):
            raise FieldProblem("action.action_idx", f"action_idx {action_idx} >= {len(mask)} actions")
        if not mask[action_idx]:
            raise FieldProblem("action.action_idx", f"action_idx {action_idx} is masked out by action_mask")


class MoveAction(RecordModel):
    """The move taken in an OpenSpiel game (``action`` of an :class:`OpenSpielRecord`)."""

    type: str = "move"
    raw: str = ""
    """``state.action_to_string(player, action)`` (at most 200 characters)."""
    action_idx: int = Field(ge=0)
    """The OpenSpiel action id, the label and the policy's output index."""


OPENSPIEL_PPO_REQUIRED: tuple[str, ...] = ("model_version", "generation", "reward", "episode_return", "schema_version")
"""Fields an OpenSpiel record of ``source == "ppo"`` must carry."""


class OpenSpielRecord(DecisionModel):
    """One decision of an OpenSpiel game; field order is the write order.

    The common keys mean what they mean in the commander's ``DecisionRecord``; ``turn`` counts
    the game's decisions (1-based) and ``phase`` is ``play``.
    """

    game_id: str
    turn: int = Field(ge=1)
    phase: str = "play"
    active_seat: int = Field(ge=0)
    game_outcome: str
    game: str
    """The game, ``openspiel:<short name>`` or ``pettingzoo:<module>:<factory>``."""
    env_version: Text | None = None
    """A PettingZoo game's env version, ``<metadata name> <distribution>==<version>`` (``ml.game.pettingzoo.load.env_version``)."""
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
    policy: list[float] | None = None
    """float[num_distinct_actions]: the acting policy's probabilities (PPO records, version 2)."""
    schema_version: int | None = None

    ppo_required: ClassVar[tuple[str, ...]] = OPENSPIEL_PPO_REQUIRED

    @model_validator(mode="after")
    def _consistent(self) -> OpenSpielRecord:
        if self.active_seat >= self.num_players:
            raise FieldProblem("active_seat", f"seat {self.active_seat} in a game of {self.num_players} players")
        winner = self.winner()
        if winner is not None and winner >= self.num_players:
            raise FieldProblem("game_outcome", f"{self.game_outcome!r} in a game of {self.num_players} players")
        self._check_decision(self.source, self.policy, self.action_mask, self.action.action_idx, self.schema_version)
        return self

    @property
    def players_count(self) -> int:
        """Seats in the game."""
        return self.num_players

    def winner(self) -> int | None:
        """Seat of the game's winner, or None for a draw."""
        return outcome_winner(self.game_outcome)
