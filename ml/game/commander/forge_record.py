"""The commander's decision record: Forge's JSONL decision line plus this project's extras.

Format reference: ``shared/docs/forge-decision-format.md``. The record's seat views
(``players``) and macro actions (``action.macro_action``, ``action_idx``) are the commander's,
so the model lives with the game; the reading and writing path is generic (``ml.data.batch_files``),
and ``ml.game.registry.record_model`` picks this model for every line without an
``observation``. The common base, checks and version history are in ``ml.game.record``.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar

from pydantic import Field, ValidatorFunctionWrapHandler, field_validator, model_validator

from ml.base.io import JSONValue
from ml.config.sections import Source
from ml.game.commander.actions import ACTION_INDEX, MACRO_ACTIONS, MAX_POD, NUM_ACTIONS
from ml.game.commander.cards import DECK_SIZE
from ml.game.commander.pod_rules import COMMANDER_DAMAGE_LETHAL, COMMANDER_TAX_STEP, STARTING_LIFE
from ml.game.record import (
    DecisionModel,
    FieldProblem,
    RecordModel,
    Text,
    outcome_winner,
)
from ml.game.schema_errors import name_ranges

# Bounds of the record's counts. Each is what a Commander game can reach, with room to spare for
# real Forge games (tokens, stolen cards); a value beyond one is a broken writer or a forged request.
# Real Forge files and the built-in pod's records lie far inside (measured on the 3,331 records of 20
# six-seat teacher games; tested on the Forge fixtures and a six-seat batch: ``tests/test_policy_api.py``).
DECK_CARDS = DECK_SIZE + 1
"""Cards a seat brings: its 99-card library and its commander (Commander rule 903.5a)."""
POD_CARDS = MAX_POD * DECK_CARDS
"""Every card of the largest pod (600): no zone but the battlefield holds more, whoever owns them."""
BATTLEFIELD_MAX = 1000
"""Permanents one seat controls: at most the pod's 600 cards (stolen ones included) plus tokens
(Forge makes them, the built-in pod does not); 1000 leaves 400 for tokens."""
MANA_MAX = BATTLEFIELD_MAX
"""Mana counts: Forge logs untapped mana *sources* (permanents, ``BATTLEFIELD_MAX``); the built-in pod's
mana is its lands plus ramp (at most 3 each), so at most 100 cards x 3 = 300."""
CMDR_TAX_MAX = MANA_MAX + COMMANDER_TAX_STEP
"""Commander tax: 2 per previous cast (rule 903.8); the last cast paid the tax less 2 out of at most
``MANA_MAX`` mana, so the tax now is at most ``MANA_MAX + 2``."""
LIFE_BOUND = 25 * STARTING_LIFE
"""Life lies in -1000..1000 (25 x the starting 40, rule 903.7): Forge's ``life`` does not count gains
(shared/docs/forge-decision-format.md), the built-in pod gains only by lifelink (at most 64 in 3,331
six-seat teacher records), and a seat out at 0 life keeps the life of its last blow, one combat's
damage below 0 (down to -22 there)."""
CMDR_DMG_MAX = (MAX_POD - 1) * (COMMANDER_DAMAGE_LETHAL - 1) + 100
"""Commander damage taken, one source or Forge's sum over sources (200): 21 from one commander
eliminates (rule 903.10a), so each of up to 5 opposing commanders has dealt at most 20 before the
last blow, which adds at most 100 (the built-in pool's strongest creature has power 9)."""
TURN_MAX = 200
"""Turns (rounds): the built-in pod ends by round 94 whatever ``max_turns`` is, as each seat draws once
a round from a library of 99 - 7 = 92 cards and loses when it cannot draw (rule 704.5b); Forge games with
cards that refill libraries get twice that."""
CmdrDamage = Annotated[int, Field(ge=0, le=CMDR_DMG_MAX)]

PPO_REQUIRED: tuple[str, ...] = ("model_version", "generation", "reward", "episode_return")
PPO_REQUIRED += ("action.macro_action", "action.action_idx", "schema_version")
"""Fields a ``source == "ppo"`` record must carry (shared/docs/forge-decision-format.md "PPO extension")."""


def cmdr_damage_by_source(value: JSONValue) -> dict[int, int]:
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

    seat: int = Field(ge=0, lt=MAX_POD, description="0-based seat of a pod of at most 6 (MAX_POD)")
    life: int = Field(
        ge=-LIFE_BOUND,
        le=LIFE_BOUND,
        description="starts at 40; gains and the last blow's overshoot stay far inside (LIFE_BOUND)",
    )
    cmdr_dmg: CmdrDamage | dict[str, CmdrDamage] = Field(
        description="21 from one commander eliminates: up to 5 sources at 20 plus one last blow (CMDR_DMG_MAX)"
    )
    """Commander damage taken: Forge's sum over sources, or one entry per source seat (newer writers)."""
    mana: int = Field(ge=0, le=MANA_MAX, description="Forge: untapped mana sources, at most the permanents (MANA_MAX)")
    """Untapped mana sources."""
    cmdr_tax: int = Field(
        ge=0, le=CMDR_TAX_MAX, description="2 per previous cast, the last one paid from at most MANA_MAX (CMDR_TAX_MAX)"
    )
    creatures: int = Field(
        ge=0, le=BATTLEFIELD_MAX, description="permanents on one battlefield: the pod's 600 cards and tokens (BATTLEFIELD_MAX)"
    )
    lands: int = Field(
        ge=0, le=BATTLEFIELD_MAX, description="permanents on one battlefield: the pod's 600 cards and tokens (BATTLEFIELD_MAX)"
    )
    """Forge's land count is a name heuristic and can include mana rocks."""
    hand: list[Text] = Field(
        default_factory=list,
        max_length=POD_CARDS,
        description="the end step discards to 7, draws within a turn to at most every card of the pod (POD_CARDS)",
    )
    battlefield: list[Text] = Field(
        default_factory=list, max_length=BATTLEFIELD_MAX, description="the pod's 600 cards and tokens (BATTLEFIELD_MAX)"
    )
    graveyard: list[Text] = Field(default_factory=list, max_length=POD_CARDS, description="cards of the pod (POD_CARDS)")
    command_zone: list[Text] = Field(default_factory=list, max_length=POD_CARDS, description="cards of the pod (POD_CARDS)")
    library: int | None = Field(None, ge=0, le=POD_CARDS, description="cards of the pod (POD_CARDS)")
    mana_sources: int | None = Field(None, ge=0, le=MANA_MAX, description="lands and rocks of one battlefield (MANA_MAX)")
    eliminated: bool | None = None
    commander_name: Text | None = None
    """This seat's commander (our extra; Forge names only the acting seat's, as ``commander``)."""
    tapped: list[Text] | None = Field(
        None, max_length=BATTLEFIELD_MAX, description="creatures of one battlefield (BATTLEFIELD_MAX)"
    )
    """Tapped creatures on the battlefield (our extra; absent in Forge files: read as none tapped)."""
    sick: list[Text] | None = Field(
        None, max_length=BATTLEFIELD_MAX, description="creatures of one battlefield (BATTLEFIELD_MAX)"
    )
    """Summoning-sick creatures (our extra; absent in Forge files: read as none sick)."""
    last_attacker: int | None = Field(None, ge=-1, lt=MAX_POD, description="a seat, or -1 for none")
    """Seat that attacked this seat last, -1 for none (our extra; public: every seat saw the attack)."""

    @field_validator("cmdr_dmg", mode="before")
    @classmethod
    def _source_keys_are_seats(cls, v: Any) -> Any:
        if isinstance(v, dict):  # Python writers may key by int seat; JSON keys are str
            v = {str(k) if isinstance(k, int) and not isinstance(k, bool) else k: n for k, n in v.items()}
            bad = [k for k in v if not (isinstance(k, str) and k.isdecimal() and int(k) < MAX_POD)]
            if bad:  # seats 0..5 once each: at most MAX_POD sources
                raise ValueError(f"per-source commander damage keys must be seat numbers 0..{MAX_POD - 1}, got {bad!r}")
        return v


class Action(RecordModel):
    """The decision taken (``action`` of the record)."""

    type: Text
    """Forge: ``cast``, ``cast_commander``, ``land``, ``attack``; our writers also ``pass``, ``hold``."""
    card: Text = ""
    target: Text = ""
    raw: Text = ""
    """The engine's log line (Forge cuts it at 200 characters)."""
    macro_action: Text | None = None
    action_idx: int | None = Field(default=None, ge=0, lt=NUM_ACTIONS, description="an index of MACRO_ACTIONS")

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


class DecisionRecord(DecisionModel):
    """One decision line. Field order is the write order (Forge's, then the PPO extension)."""

    game_id: Text
    turn: int = Field(ge=1, le=TURN_MAX, description="1-based; decking ends the built-in pod by round 94 (TURN_MAX)")
    phase: Text
    active_seat: int = Field(ge=0, lt=MAX_POD, description="0-based seat of a pod of at most 6 (MAX_POD)")
    game_outcome: str
    """``draw`` or ``win_seat_<k>`` (0-based seat): the whole game's result, on every record."""
    deck_name: Text = ""
    commander: Text = ""
    archetype: Text = "midrange"
    players: list[PlayerView] = Field(min_length=2, max_length=MAX_POD, description="one per seat: pods of 2 to 6")
    action: Action
    action_mask: list[int] | None = Field(
        default=None, min_length=NUM_ACTIONS, max_length=NUM_ACTIONS, description="one 0/1 per macro action"
    )
    """int[NUM_ACTIONS] of 0/1: legal macro actions at this decision."""
    source: Source | None = None
    model_version: Text | None = None
    generation: int | None = Field(default=None, ge=0)
    reward: float | None = Field(default=None, allow_inf_nan=False)
    episode_return: float | None = Field(default=None, allow_inf_nan=False)
    policy: list[float] | None = Field(default=None, max_length=NUM_ACTIONS, description="one probability per macro action")
    """float[NUM_ACTIONS]: the acting policy's probabilities over the macro actions (PPO records, version 2)."""
    schema_version: int | None = None
    forge_game_id: str | None = None
    """The ``game_id`` Forge wrote, on a game that ``python loop.py import-forge`` gave a new
    ``game_id`` (``<forge_game_id>~<8 hex>``) because another game held that id (our extra;
    optional, so ``schema_version`` is unchanged: older readers ignore it)."""

    outcome_seats: ClassVar[int | None] = MAX_POD
    ppo_required: ClassVar[tuple[str, ...]] = PPO_REQUIRED
    policy_actions: ClassVar[int | None] = NUM_ACTIONS

    @model_validator(mode="wrap")
    @classmethod
    def _name_ranges(cls, data: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        return name_ranges(cls, data, handler)

    @model_validator(mode="after")
    def _ppo_complete(self) -> DecisionRecord:
        self._check_decision(self.source, self.policy, self.action_mask, self.action.action_idx, self.schema_version)
        return self

    def winner(self) -> int | None:
        """Seat of the game's winner, or None for a draw."""
        return outcome_winner(self.game_outcome)

    @property
    def players_count(self) -> int:
        """Seats in the game (``len(players)``)."""
        return len(self.players)
