"""Seat-relative observation encoding and macro-action labels of decision records.

The encoder reads a decision record (a plain ``dict`` in the Forge decision format,
``shared/docs/forge-decision-format.md``) and never the simulator's internal state, so the
same code encodes live self-play decisions, our teacher files and real Forge files.

Layout of the observation, ``float32[OBS_DIM]``:

* global (``GLOBAL_DIM``): phase one-hot (main_1, combat, main_2, end), turn / 30,
  pod size / 6, living players / 6;
* ``MAX_POD`` seat blocks of ``SEAT_DIM`` each, seat-relative: slot 0 is the acting player,
  slot k the seat ``(actor + k) % pod_size`` (opponents in turn order); slots beyond the pod
  are zeros. Each block holds public facts of that seat plus the commander damage it took
  from each source seat, also seat-relative to the actor (rule 903.10a: 21 from a single
  commander is lethal, so damage is kept per source);
* the acting player's own hand (``HAND_DIM``): card counts by kind and how many of each it
  can afford now. Opponents' hands enter only as their sizes.

Combat features (``COMBAT_FEATURES`` at the end of each seat block) come from the public,
fixed block rule (``ml.game.commander.combat``) applied to the creatures of the record, with their
tapped and summoning-sick states (our record extras ``tapped``/``sick``; a Forge file has
none, read as all untapped and ready): the seat's untapped creatures (count, power); for the
actor's slot its creatures able to attack (count, power); for an opponent's slot the preview
of the actor attacking it with all of them (damage as a fraction of its life, lethal,
attackers' and blockers' value lost) and of it attacking the actor with all its creatures
while the actor's attackers are tapped (damage as a fraction of the actor's life, lethal),
and whether it attacked the actor last (our extra ``last_attacker``: the teacher retaliates,
and its removal aims at that seat). These are what the teacher's attack choice weighs
(``ml.game.commander.players``).

Cards unknown to the built-in pool (real Forge data) count in the ``unknown`` kind.

Labels (``label_record``): PPO records carry their own ``action_idx``; land drops are not
a policy decision and are non-trainable (``None``); Forge attacks without a target cannot
be labelled either.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ml.game.commander.actions import (
    ACTION_INDEX,
    ACTION_OF_KIND,
    CAST_COMMANDER,
    HOLD_MANA,
    MAX_POD,
    NUM_ACTIONS,
    PASS,
    attack_action,
)
from ml.game.commander.cards import Card, load_card_pool
from ml.game.commander.combat import board_value, plan_blocks, resolve_damage
from ml.game.commander.state import COMMANDER_DAMAGE_LETHAL, Permanent

PHASES = ("main_1", "combat", "main_2", "end")
KINDS = ("land", "creature", "removal", "draw", "ramp", "wipe", "unknown")

# Normalisers: starting life 40, commander-damage lethal 21, 30-round turn cap, 99-card
# library (commander-pod.md); the rest are typical board sizes so features stay near [0, 1].
LIFE_SCALE, CMDR_LETHAL, TURN_SCALE, LIBRARY_SCALE = 40.0, 21.0, 30.0, 99.0
COUNT_SCALE, POWER_SCALE, MANA_SCALE = 10.0, 20.0, 10.0

GLOBAL_DIM = len(PHASES) + 3
BASE_FEATURES = 19
COMBAT_FEATURES = 9
SEAT_FEATURES = BASE_FEATURES + COMBAT_FEATURES
SEAT_DIM = SEAT_FEATURES + MAX_POD
HAND_DIM = 2 * len(KINDS) + 4
OBS_DIM = GLOBAL_DIM + MAX_POD * SEAT_DIM + HAND_DIM


def _get(obj: Any, key: str, default: Any = None) -> Any:
    """Field of a record given as a dict or as a pydantic model."""
    if isinstance(obj, Mapping):
        return obj.get(key, default)
    return getattr(obj, key, default)


class RecordEncoder:
    """Encodes decision records as seat-relative observation vectors.

    Attributes:
        obs_dim: length of the observation vector (``OBS_DIM``).
        num_actions: size of the action space (``NUM_ACTIONS``).
        pool: card name -> Card, used for card attributes.
    """

    obs_dim = OBS_DIM
    num_actions = NUM_ACTIONS

    def __init__(self, pool: dict[str, Card] | None = None) -> None:
        self.pool = pool if pool is not None else load_card_pool()

    def label(self, record: Mapping[str, Any] | Any) -> int | None:
        """Macro-action index of the record's action, or None if not trainable (``label_record``)."""
        return label_record(record, self.pool)

    def action_mask(self, record: Mapping[str, Any] | Any) -> np.ndarray:
        """bool[NUM_ACTIONS] legal actions of the record (``record_action_mask``)."""
        return record_action_mask(record)

    def __call__(self, record: Mapping[str, Any] | Any) -> np.ndarray:
        """Encode one record. Returns float32[OBS_DIM]."""
        out = np.zeros(OBS_DIM, dtype=np.float32)
        self.encode_into(record, out)
        return out

    def encode_batch(self, records: list[Any]) -> np.ndarray:
        """Encode many records. Returns float32[N, OBS_DIM]."""
        out = np.zeros((len(records), OBS_DIM), dtype=np.float32)
        for i, rec in enumerate(records):
            self.encode_into(rec, out[i])
        return out

    def encode_into(self, record: Mapping[str, Any] | Any, out: np.ndarray) -> None:
        """Write the encoding of ``record`` into ``out`` (float32[OBS_DIM], zeroed by the caller)."""
        players = _get(record, "players")
        n = len(players)
        actor = int(_get(record, "active_seat"))
        by_seat = {int(_get(p, "seat")): p for p in players}
        phase = _get(record, "phase")
        if phase in PHASES:
            out[PHASES.index(phase)] = 1.0
        alive = [not self._eliminated(p) for p in players]
        out[len(PHASES)] = float(_get(record, "turn")) / TURN_SCALE
        out[len(PHASES) + 1] = n / MAX_POD
        out[len(PHASES) + 2] = sum(alive) / MAX_POD
        boards = {seat: self._creatures(p) for seat, p in by_seat.items()}
        mine = boards.get(actor, [])
        ready = [c for c in mine if c.can_attack()]
        kept = [c for c in mine if not c.can_attack() or "vigilance" in c.card.keywords]
        me = by_seat.get(actor)
        for k in range(min(n, MAX_POD)):
            seat = (actor + k) % n
            p = by_seat.get(seat)
            if p is not None:
                base = GLOBAL_DIM + k * SEAT_DIM
                v = out[base : base + SEAT_DIM]
                self._encode_seat(p, actor, n, v)
                c = v[BASE_FEATURES:SEAT_FEATURES]
                untapped = [x for x in boards[seat] if not x.tapped]
                c[0] = len(untapped) / COUNT_SCALE
                c[1] = sum(x.card.power for x in untapped) / POWER_SCALE
                if k == 0:
                    c[2] = len(ready) / COUNT_SCALE
                    c[3] = sum(x.card.power for x in ready) / POWER_SCALE
                elif me is not None and not self._eliminated(p):
                    self._encode_previews(me, p, actor, seat, ready, kept, boards[seat], c)
                    c[8] = float(_get(me, "last_attacker") == seat)
        if me is not None:
            self._encode_hand(me, out[GLOBAL_DIM + MAX_POD * SEAT_DIM :])

    def _creatures(self, p: Any) -> list[Permanent]:
        """The seat's creatures as ``Permanent``s, tapped/sick/commander flags from the record."""
        tapped = list(_get(p, "tapped") or [])
        sick = list(_get(p, "sick") or [])
        commander = _get(p, "commander_name")
        out = []
        for name in _get(p, "battlefield") or []:
            card = self.pool.get(name)
            if card is None or card.kind != "creature":
                continue
            perm = Permanent(card, tapped=name in tapped, sick=name in sick, is_commander=name == commander)
            if perm.tapped:
                tapped.remove(name)
            if perm.sick:
                sick.remove(name)
            out.append(perm)
        return out

    def _encode_previews(self, me, opp, actor, seat, ready, kept, theirs, c: np.ndarray) -> None:
        """Previews of an all-out attack each way between the actor and one opponent (``c[2:8]``)."""
        life = max(int(_get(opp, "life")), 1)
        taken = _cmdr_damage_by_source(_get(opp, "cmdr_dmg")).get(actor, 0)
        if ready:
            res = resolve_damage(ready, plan_blocks(ready, theirs, life, taken))
            dealt = res.player_damage - res.defender_gain
            c[2] = min(dealt / life, 1.5)
            c[3] = float(dealt >= life or taken + res.commander_damage >= COMMANDER_DAMAGE_LETHAL)
            c[4] = sum(board_value(x) for x in res.dead_attackers) / POWER_SCALE
            c[5] = sum(board_value(x) for x in res.dead_blockers) / POWER_SCALE
        if theirs:
            my_life = max(int(_get(me, "life")), 1)
            my_taken = _cmdr_damage_by_source(_get(me, "cmdr_dmg")).get(seat, 0)
            attackers = [Permanent(x.card, sick=False, is_commander=x.is_commander) for x in theirs]
            res = resolve_damage(attackers, plan_blocks(attackers, kept, my_life, my_taken))
            c[6] = min(res.player_damage / my_life, 1.5)
            c[7] = float(res.player_damage >= my_life or my_taken + res.commander_damage >= COMMANDER_DAMAGE_LETHAL)

    def _eliminated(self, p: Any) -> bool:
        flag = _get(p, "eliminated")
        return bool(flag) if flag is not None else int(_get(p, "life")) <= 0

    def _encode_seat(self, p: Any, actor: int, n: int, v: np.ndarray) -> None:
        battlefield = _get(p, "battlefield") or []
        power = toughness = flying = max_power = creatures = 0
        for name in battlefield:
            card = self.pool.get(name)
            if card is not None and card.kind == "creature":
                creatures += 1
                power += card.power
                toughness += card.toughness
                max_power = max(max_power, card.power)
                if "flying" in card.keywords:
                    flying += card.power
        creature_count = max(creatures, int(_get(p, "creatures") or 0))
        command_zone = _get(p, "command_zone") or []
        lands = int(_get(p, "lands") or 0)
        sources = _get(p, "mana_sources")
        library = _get(p, "library")
        v[0] = 1.0
        v[1] = 0.0 if self._eliminated(p) else 1.0
        v[2] = float(_get(p, "life")) / LIFE_SCALE
        v[3] = float(_get(p, "mana") or 0) / MANA_SCALE
        v[4] = float(sources if sources is not None else lands) / MANA_SCALE
        v[5] = float(_get(p, "cmdr_tax") or 0) / MANA_SCALE
        v[6] = creature_count / COUNT_SCALE
        v[7] = power / POWER_SCALE
        v[8] = toughness / POWER_SCALE
        v[9] = flying / POWER_SCALE
        v[10] = max_power / COUNT_SCALE
        v[11] = lands / POWER_SCALE
        v[12] = len(_get(p, "hand") or []) / COUNT_SCALE
        v[13] = len(_get(p, "graveyard") or []) / (3 * COUNT_SCALE)
        v[14] = float(library) / LIBRARY_SCALE if library is not None else 0.0
        v[15] = 1.0 if command_zone else 0.0
        v[16] = 1.0 if int(_get(p, "seat")) == actor else 0.0
        dmg = _cmdr_damage_by_source(_get(p, "cmdr_dmg"))
        v[17] = max(dmg.values(), default=0) / CMDR_LETHAL
        v[18] = sum(dmg.values()) / (2 * CMDR_LETHAL)
        for source, amount in dmg.items():
            if source >= 0:
                v[SEAT_FEATURES + (source - actor) % n] = amount / CMDR_LETHAL

    def _encode_hand(self, me: Any, v: np.ndarray) -> None:
        mana = int(_get(me, "mana") or 0)
        instants = 0
        best_affordable_power = 0
        for name in _get(me, "hand") or []:
            card = self.pool.get(name)
            kind = card.kind if card is not None else "unknown"
            i = KINDS.index(kind)
            v[i] += 1.0 / COUNT_SCALE
            if card is not None and card.kind != "land" and card.mana_value <= mana:
                v[len(KINDS) + i] += 1.0 / COUNT_SCALE
                if card.kind == "creature":
                    best_affordable_power = max(best_affordable_power, card.power)
            if card is not None and card.instant:
                instants += 1
        base = 2 * len(KINDS)
        v[base] = instants / COUNT_SCALE
        v[base + 1] = best_affordable_power / COUNT_SCALE
        command_zone = _get(me, "command_zone") or []
        if command_zone:
            cmdr = self.pool.get(command_zone[0])
            cost = (cmdr.mana_value if cmdr is not None else 0) + int(_get(me, "cmdr_tax") or 0)
            v[base + 2] = cost / MANA_SCALE
            v[base + 3] = 1.0 if cost <= mana else 0.0


def _cmdr_damage_by_source(value: Any) -> dict[int, int]:
    """Commander damage taken, by source seat; Forge's summed int becomes source -1 (unknown)."""
    if value is None:
        return {}
    if isinstance(value, int):
        return {-1: value} if value else {}
    return {int(k): int(v) for k, v in value.items()}


def label_record(record: Mapping[str, Any] | Any, pool: dict[str, Card]) -> int | None:
    """Macro-action index of a record's action, or None if it is not trainable.

    Args:
        record: decision record (dict or ``ml.records.DecisionRecord``).
        pool: card pool used to classify cast cards by kind.

    Returns:
        Index into ``ml.game.commander.actions.MACRO_ACTIONS``, or None for land drops, casts of cards
        outside the pool, and attacks whose target is not recorded (real Forge data).
    """
    action = _get(record, "action")
    idx = _get(action, "action_idx")
    if idx is not None:
        return int(idx)
    macro = _get(action, "macro_action")
    if macro:
        return ACTION_INDEX[macro]
    kind = _get(action, "type")
    card_name = _get(action, "card") or ""
    if kind == "cast_commander" or (kind == "cast" and card_name and card_name == _get(record, "commander")):
        return CAST_COMMANDER
    if kind == "cast":
        card = pool.get(card_name)
        return ACTION_OF_KIND.get(card.kind) if card is not None else None
    if kind == "attack":
        target = _get(action, "target") or ""
        if not target.startswith("seat "):
            return None
        n = len(_get(record, "players"))
        offset = (int(target.split()[1]) - int(_get(record, "active_seat"))) % n
        return attack_action(offset) if offset else None
    if kind == "pass":
        return PASS
    if kind == "hold":
        return HOLD_MANA
    return None


def record_action_mask(record: Mapping[str, Any] | Any) -> np.ndarray:
    """Legal-action mask stored with a record, or all-ones when the record has none (Forge).

    Returns:
        bool[NUM_ACTIONS].
    """
    mask = _get(record, "action_mask")
    if mask is None:
        return np.ones(NUM_ACTIONS, dtype=bool)
    return np.asarray(mask, dtype=bool)
