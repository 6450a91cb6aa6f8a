"""The commander's observation features: names, slots and scales (the table the compiled encoder fills).

Every slot of the observation ``float32[OBS_DIM]`` has a name: the global block
(``GLOBAL_FEATURES``, slot ``G[name]``), ``MAX_POD`` seat blocks of ``SEAT_DIM`` each
(``SEAT_FEATURE_NAMES``, slot ``S[name]`` within the block, which starts at
``SEATS_START + k * SEAT_DIM`` for the seat ``k`` places after the actor) and the acting
player's hand block (``HAND_FEATURES``, slot ``H[name]`` from ``HAND_START``).
:func:`feature_names` and :func:`feature_index` name every slot of the whole vector
(``turn``, ``seat2/life``, ``hand/instants``), for tests and reports. What each feature
means is in ``ml.game.commander.observation``'s docstring.

Order is part of the encoding: a policy trained on one order cannot read another
(``ml.model.policy.check_shape`` sees only the length).
"""

from __future__ import annotations

from ml.game.commander.actions import MAX_POD

PHASES: tuple[str, ...] = ("main_1", "combat", "main_2", "end")
"""Phases that appear in records (shared/docs/forge-decision-format.md ``phase``), in the order of
the ``phase_*`` features and of the core's phase codes."""
KINDS = ("land", "creature", "removal", "draw", "ramp", "wipe", "unknown")

# Scales, each named for what it divides. Sources: starting life 40, commander-damage lethal 21
# (rule 903.10a), the 30-round turn cap and the 99-card library of the pod rules
# (shared/docs/commander-pod.md); the rest are typical board sizes so that features
# stay near [0, 1]. Changing one changes the encoding: retrain (policy.check_shape does not see it).
TURN_SCALE = 30.0
"""Turn number (the default round cap)."""
POD_SCALE = MAX_POD
"""Pod size and living players."""
LIFE_SCALE = 40.0
"""Life total (starting life)."""
MANA_SCALE = 10.0
"""Untapped mana, mana sources, commander tax, the commander's total cost."""
CREATURE_COUNT_SCALE = 10.0
"""Creature counts (on the battlefield, untapped, ready to attack)."""
BOARD_POWER_SCALE = 20.0
"""Summed power or toughness of a board, and the board value lost in an attack preview."""
CREATURE_POWER_SCALE = 10.0
"""Power of one creature (the biggest on the battlefield, the biggest affordable in hand)."""
LANDS_SCALE = 20.0
"""Lands on the battlefield."""
CARD_COUNT_SCALE = 10.0
"""Cards in hand (by kind, affordable, instants)."""
GRAVEYARD_SCALE = 30.0
"""Cards in the graveyard."""
LIBRARY_SCALE = 99.0
"""Cards in the library (a commander deck's library at the start)."""
CMDR_DAMAGE_SCALE = 21.0
"""Commander damage from one source (lethal at 21)."""
TOTAL_CMDR_DAMAGE_SCALE = 42.0
"""Commander damage summed over sources (two lethal sources)."""
PREVIEW_DAMAGE_CAP = 1.5
"""Cap of an attack preview's damage as a fraction of the defender's life."""

GLOBAL_FEATURES: tuple[str, ...] = (*(f"phase_{p}" for p in PHASES), "turn", "pod_size", "living_players")
"""Names of the global block's slots, in order."""
SEAT_BASE_FEATURES: tuple[str, ...] = (
    "present",  # 1: the slot holds a seat
    "alive",
    "life",
    "mana",  # untapped mana sources
    "mana_sources",  # all mana sources (Forge: lands)
    "cmdr_tax",
    "creatures",
    "power",  # summed power of the creatures in the pool
    "toughness",
    "flying_power",
    "max_power",
    "lands",
    "hand_size",
    "graveyard_size",
    "library_size",
    "commander_in_command_zone",
    "is_actor",
    "max_cmdr_damage_taken",  # from any one source
    "total_cmdr_damage_taken",
)
COMBAT_FEATURES: tuple[str, ...] = (
    "untapped_creatures",
    "untapped_power",
    "attack_damage",  # actor attacks this opponent with all ready creatures: damage / its life
    "attack_lethal",
    "attack_attackers_lost",  # board value of the actor's attackers that die
    "attack_blockers_lost",  # board value of this opponent's blockers that die
    "counter_damage",  # this opponent attacks the actor with all creatures: damage / actor's life
    "counter_lethal",
    "attacked_me_last",
)
"""Combat previews at the end of the seat's public features (see the module docstring)."""
ACTOR_COMBAT_FEATURES: dict[str, str] = {"ready_attackers": "attack_damage", "ready_power": "attack_lethal"}
"""The actor's own slot (slot 0) has no preview against itself: it reuses these two slots."""
CMDR_DAMAGE_FEATURES: tuple[str, ...] = tuple(f"cmdr_damage_from_{k}" for k in range(MAX_POD))
"""Commander damage taken from the seat ``k`` places after the actor."""
SEAT_FEATURE_NAMES: tuple[str, ...] = SEAT_BASE_FEATURES + COMBAT_FEATURES + CMDR_DAMAGE_FEATURES
HAND_FEATURES: tuple[str, ...] = (
    *(f"hand_{k}" for k in KINDS),
    *(f"affordable_{k}" for k in KINDS),  # castable with the untapped mana now
    "instants",
    "best_affordable_power",
    "commander_cost",  # mana value plus tax
    "commander_affordable",
)
"""Names of the acting player's hand block's slots, in order."""

G: dict[str, int] = {name: i for i, name in enumerate(GLOBAL_FEATURES)}
"""Global feature name -> slot in the observation."""
S: dict[str, int] = {name: i for i, name in enumerate(SEAT_FEATURE_NAMES)}
S.update({alias: S[target] for alias, target in ACTOR_COMBAT_FEATURES.items()})
"""Seat feature name -> slot within a seat block."""
H: dict[str, int] = {name: i for i, name in enumerate(HAND_FEATURES)}
"""Hand feature name -> slot within the hand block."""

GLOBAL_DIM = len(GLOBAL_FEATURES)
BASE_FEATURES = len(SEAT_BASE_FEATURES)
SEAT_FEATURES = BASE_FEATURES + len(COMBAT_FEATURES)
SEAT_DIM = len(SEAT_FEATURE_NAMES)
HAND_DIM = len(HAND_FEATURES)
SEATS_START = GLOBAL_DIM
HAND_START = GLOBAL_DIM + MAX_POD * SEAT_DIM
OBS_DIM = HAND_START + HAND_DIM


def feature_names() -> list[str]:
    """Name of every slot of the observation: ``turn``, ``seat<k>/<feature>``, ``hand/<feature>``."""
    seats = [f"seat{k}/{name}" for k in range(MAX_POD) for name in SEAT_FEATURE_NAMES]
    return [*GLOBAL_FEATURES, *seats, *(f"hand/{name}" for name in HAND_FEATURES)]


def feature_index(name: str) -> int:
    """Slot of a feature named as in :func:`feature_names` (seat-0 aliases ``ready_*`` included).

    Raises:
        KeyError: no such feature.
    """
    if name in G:
        return G[name]
    block, _, feature = name.partition("/")
    if block == "hand":
        return HAND_START + H[feature]
    if block.startswith("seat") and block[4:].isdecimal() and int(block[4:]) < MAX_POD:
        return SEATS_START + int(block[4:]) * SEAT_DIM + S[feature]
    raise KeyError(name)
