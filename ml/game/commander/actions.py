"""The macro-action space shared by the simulator, the encoder, the labeler and the policy.

The names follow the macro actions of the Forge decision format
(``shared/docs/forge-decision-format.md``, "Macro actions"). Two choices of this project:

* ``cast_wipe`` is its own action: the pod rules (``shared/docs/commander-pod.md``) offer a board wipe
  as a main-phase choice distinct from targeted removal, and folding it into
  ``cast_removal`` would make one label mean two very different plays.
* ``attack_opponent`` is one action per opponent, relative to the actor in seat order:
  ``attack_opponent_k`` attacks seat ``(actor + k) % pod_size``. Slots up to ``MAX_POD - 1``
  exist so that one network serves pods of 2 to 6 players; unused slots are masked.

A land drop is not a policy decision (played automatically) and has no index here.
"""

from __future__ import annotations

MIN_POD = 2
"""Smallest pod (shared/docs/commander-pod.md "Players and decks": 2 to 6)."""
MAX_POD = 6
"""Largest pod size supported (casual pods, shared/docs/forge-decision-format.md "players")."""

CAST_ACTIONS: tuple[str, ...] = (
    "cast_creature",
    "cast_removal",
    "cast_draw",
    "cast_ramp",
    "cast_wipe",
    "cast_commander",
)
MACRO_ACTIONS: tuple[str, ...] = (
    *CAST_ACTIONS,
    "hold_mana",
    "pass",
    *(f"attack_opponent_{k}" for k in range(1, MAX_POD)),
)
"""Index -> macro-action name. Index order is part of the record schema (``action_idx``)."""

NUM_ACTIONS = len(MACRO_ACTIONS)
ACTION_INDEX: dict[str, int] = {name: i for i, name in enumerate(MACRO_ACTIONS)}

CAST_CREATURE, CAST_REMOVAL, CAST_DRAW, CAST_RAMP, CAST_WIPE, CAST_COMMANDER, HOLD_MANA, PASS = range(8)
FIRST_ATTACK = ACTION_INDEX["attack_opponent_1"]

KIND_OF_ACTION: dict[int, str] = {
    CAST_CREATURE: "creature",
    CAST_REMOVAL: "removal",
    CAST_DRAW: "draw",
    CAST_RAMP: "ramp",
    CAST_WIPE: "wipe",
}
"""Card kind (``ml/game/commander/data/cards.yaml``) cast by each cast macro action other than the commander."""
ACTION_OF_KIND: dict[str, int] = {kind: action for action, kind in KIND_OF_ACTION.items()}
"""Cast macro action of each card kind (the inverse of ``KIND_OF_ACTION``)."""


class IllegalActionError(ValueError):
    """An action outside the legal-action mask, or any action after the game ended."""


def attack_action(offset: int) -> int:
    """Index of ``attack_opponent_<offset>``.

    Args:
        offset: seat offset of the defender relative to the attacker, 1..MAX_POD-1.

    Raises:
        ValueError: if ``offset`` is out of range.
    """
    if not 1 <= offset < MAX_POD:
        raise ValueError(f"attack offset must be in 1..{MAX_POD - 1}, got {offset}")
    return FIRST_ATTACK + offset - 1
