"""The commander's decision record: Forge's JSONL decision line plus this project's extras.

Format reference: ``shared/docs/forge-decision-format.md``. The record's seat views
(``players``) and macro actions (``action.macro_action``, ``action_idx``) are the commander's,
so the model lives with the game; the reading and writing path is generic (``ml.records``),
and ``ml.game.registry.record_model`` picks this model for every line without an
``observation``. The common base, checks and version history are in ``ml.record_schema``.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator, model_validator

from ml.game.commander.actions import ACTION_INDEX, MACRO_ACTIONS, MAX_POD, NUM_ACTIONS
from ml.record_schema import (
    FieldProblem,
    RecordModel,
    Source,
    check_complete,
    check_mask_bits,
    check_outcome,
    check_policy,
    check_schema_version,
    outcome_winner,
)

PPO_REQUIRED: tuple[str, ...] = ("model_version", "generation", "reward", "episode_return")
PPO_REQUIRED += ("action.macro_action", "action.action_idx", "schema_version")
"""Fields a ``source == "ppo"`` record must carry (shared/docs/forge-decision-format.md "PPO extension")."""


def cmdr_damage_by_source(value: Any) -> dict[int, int]:
    """Commander damage taken (``PlayerView.cmdr_dmg``), by source seat.

    Returns:
        ``{source_seat: damage}``, without zero totals. A plain int from Forge (all sources
        summed) maps to ``{-1: total}``: -1 means "unknown source" (rule 903.10a needs one
        source's 21, so a summed value only bounds it).
    """
    if value is None:
        return {}
    if isinstance(value, int):
        return {-1: value} if value else {}
    return {int(k): int(v) for k, v in value.items()}


class PlayerView(RecordModel):
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
    hand: list[str] = Field(default_factory=list)
    battlefield: list[str] = Field(default_factory=list)
    graveyard: list[str] = Field(default_factory=list)
    command_zone: list[str] = Field(default_factory=list)
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


class Action(RecordModel):
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
                raise FieldProblem("macro_action", f"unknown macro action {self.macro_action!r}")
            idx = ACTION_INDEX[self.macro_action]
            if self.action_idx is not None and self.action_idx != idx:
                raise FieldProblem(
                    "action_idx",
                    f"action_idx {self.action_idx} is {MACRO_ACTIONS[self.action_idx]!r}, "
                    f"but macro_action is {self.macro_action!r} (index {idx})",
                )
        return self


class DecisionRecord(RecordModel):
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
    policy: list[float] | None = None
    """float[NUM_ACTIONS]: the acting policy's probabilities over the macro actions (PPO records, version 2)."""
    schema_version: int | None = None
    forge_game_id: str | None = None
    """The ``game_id`` Forge wrote, on a game that ``python loop.py import-forge`` gave a new
    ``game_id`` (``<forge_game_id>~<8 hex>``) because another game held that id (our extra;
    optional, so ``schema_version`` is unchanged: older readers ignore it)."""

    @field_validator("game_outcome")
    @classmethod
    def _outcome_form(cls, v: str) -> str:
        return check_outcome(v, MAX_POD)

    @field_validator("action_mask")
    @classmethod
    def _mask_bits(cls, v: list[int] | None) -> list[int] | None:
        return check_mask_bits(v)

    @field_validator("schema_version")
    @classmethod
    def _known_version(cls, v: int | None) -> int | None:
        return check_schema_version(v)

    @model_validator(mode="after")
    def _ppo_complete(self) -> DecisionRecord:
        if self.source == "ppo":
            check_complete(self, PPO_REQUIRED)
        check_policy(self.policy, self.action_mask, NUM_ACTIONS, self.schema_version)
        if (
            self.action_mask is not None
            and self.action.action_idx is not None
            and not self.action_mask[self.action.action_idx]
        ):
            raise FieldProblem("action.action_idx", f"action_idx {self.action.action_idx} is masked out by action_mask")
        return self

    def winner(self) -> int | None:
        """Seat of the game's winner, or None for a draw."""
        return outcome_winner(self.game_outcome)

    @property
    def players_count(self) -> int:
        """Seats in the game (``len(players)``)."""
        return len(self.players)
