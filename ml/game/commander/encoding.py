"""Seat-relative observation encoding and macro-action labels of decision records.

The encoder reads a decision record (a plain ``dict`` in the Forge decision format,
``shared/docs/forge-decision-format.md``) and never the simulator's internal state, so the
same code encodes live self-play decisions, our teacher files and real Forge files.

Layout of the observation, ``float32[OBS_DIM]`` (every slot is named, and filled by name, in
the feature table ``ml.game.commander.features``):

* global (``GLOBAL_DIM``): phase one-hot (main_1, combat, main_2, end), turn / 30,
  pod size / 6, living players / 6;
* ``MAX_POD`` seat blocks of ``SEAT_DIM`` each, seat-relative: slot 0 is the acting player,
  slot k the seat ``(actor + k) % pod_size`` (opponents in turn order); slots beyond the pod
  are zeros. Each block holds public facts of that seat plus the commander damage it took
  from each source seat, also seat-relative to the actor (rule 903.10a: 21 from a single
  commander is lethal, so damage is kept per source);
* the acting player's own hand (``HAND_DIM``): card counts by kind and how many of each it
  can afford now. Opponents' hands enter only as their sizes.

Combat features (``COMBAT_FEATURES``, after the seat's public facts) come from the public,
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
    FIRST_ATTACK,
    HOLD_MANA,
    MAX_POD,
    NUM_ACTIONS,
    PASS,
    attack_action,
)
from ml.game.commander.cards import Card, load_card_pool
from ml.game.commander.combat import board_value, plan_blocks, resolve_damage
from ml.game.commander.features import (
    BOARD_POWER_SCALE,
    CARD_COUNT_SCALE,
    CMDR_DAMAGE_FEATURES,
    CMDR_DAMAGE_SCALE,
    CREATURE_COUNT_SCALE,
    CREATURE_POWER_SCALE,
    GRAVEYARD_SCALE,
    HAND_START,
    LANDS_SCALE,
    LIBRARY_SCALE,
    LIFE_SCALE,
    MANA_SCALE,
    OBS_DIM,
    PHASES,
    POD_SCALE,
    PREVIEW_DAMAGE_CAP,
    SEAT_DIM,
    SEATS_START,
    TOTAL_CMDR_DAMAGE_SCALE,
    TURN_SCALE,
    G,
    H,
    S,
)
from ml.game.commander.records import cmdr_damage_by_source
from ml.game.commander.state import COMMANDER_DAMAGE_LETHAL, Permanent
from ml.record_schema import record_field


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
        players = record_field(record, "players")
        n = len(players)
        actor = int(record_field(record, "active_seat"))
        by_seat = {int(record_field(p, "seat")): p for p in players}
        phase = record_field(record, "phase")
        if phase in PHASES:
            out[G[f"phase_{phase}"]] = 1.0
        alive = [not self._eliminated(p) for p in players]
        out[G["turn"]] = float(record_field(record, "turn")) / TURN_SCALE
        out[G["pod_size"]] = n / POD_SCALE
        out[G["living_players"]] = sum(alive) / POD_SCALE
        boards = {seat: self._creatures(p) for seat, p in by_seat.items()}
        mine = boards.get(actor, [])
        ready = [c for c in mine if c.can_attack()]
        kept = [c for c in mine if not c.can_attack() or "vigilance" in c.card.keywords]
        me = by_seat.get(actor)
        for k in range(min(n, MAX_POD)):
            seat = (actor + k) % n
            p = by_seat.get(seat)
            if p is not None:
                base = SEATS_START + k * SEAT_DIM
                v = out[base : base + SEAT_DIM]
                self._encode_seat(p, actor, n, v)
                untapped = [x for x in boards[seat] if not x.tapped]
                v[S["untapped_creatures"]] = len(untapped) / CREATURE_COUNT_SCALE
                v[S["untapped_power"]] = sum(x.card.power for x in untapped) / BOARD_POWER_SCALE
                if k == 0:
                    v[S["ready_attackers"]] = len(ready) / CREATURE_COUNT_SCALE
                    v[S["ready_power"]] = sum(x.card.power for x in ready) / BOARD_POWER_SCALE
                elif me is not None and not self._eliminated(p):
                    self._encode_previews(me, p, actor, seat, ready, kept, boards[seat], v)
                    v[S["attacked_me_last"]] = float(record_field(me, "last_attacker") == seat)
        if me is not None:
            self._encode_hand(me, out[HAND_START:])

    def _creatures(self, p: Any) -> list[Permanent]:
        """The seat's creatures as ``Permanent``s, tapped/sick/commander flags from the record."""
        tapped = list(record_field(p, "tapped") or [])
        sick = list(record_field(p, "sick") or [])
        commander = record_field(p, "commander_name")
        out = []
        for name in record_field(p, "battlefield") or []:
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

    def _encode_previews(self, me, opp, actor, seat, ready, kept, theirs, v: np.ndarray) -> None:
        """Previews of an all-out attack each way between the actor and one opponent (``attack_*``, ``counter_*``)."""
        life = max(int(record_field(opp, "life")), 1)
        taken = cmdr_damage_by_source(record_field(opp, "cmdr_dmg")).get(actor, 0)
        if ready:
            res = resolve_damage(ready, plan_blocks(ready, theirs, life, taken))
            dealt = res.player_damage - res.defender_gain
            v[S["attack_damage"]] = min(dealt / life, PREVIEW_DAMAGE_CAP)
            v[S["attack_lethal"]] = float(dealt >= life or taken + res.commander_damage >= COMMANDER_DAMAGE_LETHAL)
            v[S["attack_attackers_lost"]] = sum(board_value(x) for x in res.dead_attackers) / BOARD_POWER_SCALE
            v[S["attack_blockers_lost"]] = sum(board_value(x) for x in res.dead_blockers) / BOARD_POWER_SCALE
        if theirs:
            my_life = max(int(record_field(me, "life")), 1)
            my_taken = cmdr_damage_by_source(record_field(me, "cmdr_dmg")).get(seat, 0)
            attackers = [Permanent(x.card, sick=False, is_commander=x.is_commander) for x in theirs]
            res = resolve_damage(attackers, plan_blocks(attackers, kept, my_life, my_taken))
            v[S["counter_damage"]] = min(res.player_damage / my_life, PREVIEW_DAMAGE_CAP)
            v[S["counter_lethal"]] = float(
                res.player_damage >= my_life or my_taken + res.commander_damage >= COMMANDER_DAMAGE_LETHAL
            )

    def _eliminated(self, p: Any) -> bool:
        return seat_eliminated(p)

    def _encode_seat(self, p: Any, actor: int, n: int, v: np.ndarray) -> None:
        """The seat's public features (``SEAT_BASE_FEATURES``, ``CMDR_DAMAGE_FEATURES``) into its block ``v``."""
        battlefield = record_field(p, "battlefield") or []
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
        creature_count = max(creatures, int(record_field(p, "creatures") or 0))
        command_zone = record_field(p, "command_zone") or []
        lands = int(record_field(p, "lands") or 0)
        sources = record_field(p, "mana_sources")
        library = record_field(p, "library")
        v[S["present"]] = 1.0
        v[S["alive"]] = 0.0 if self._eliminated(p) else 1.0
        v[S["life"]] = float(record_field(p, "life")) / LIFE_SCALE
        v[S["mana"]] = float(record_field(p, "mana") or 0) / MANA_SCALE
        v[S["mana_sources"]] = float(sources if sources is not None else lands) / MANA_SCALE
        v[S["cmdr_tax"]] = float(record_field(p, "cmdr_tax") or 0) / MANA_SCALE
        v[S["creatures"]] = creature_count / CREATURE_COUNT_SCALE
        v[S["power"]] = power / BOARD_POWER_SCALE
        v[S["toughness"]] = toughness / BOARD_POWER_SCALE
        v[S["flying_power"]] = flying / BOARD_POWER_SCALE
        v[S["max_power"]] = max_power / CREATURE_POWER_SCALE
        v[S["lands"]] = lands / LANDS_SCALE
        v[S["hand_size"]] = len(record_field(p, "hand") or []) / CARD_COUNT_SCALE
        v[S["graveyard_size"]] = len(record_field(p, "graveyard") or []) / GRAVEYARD_SCALE
        v[S["library_size"]] = float(library) / LIBRARY_SCALE if library is not None else 0.0
        v[S["commander_in_command_zone"]] = 1.0 if command_zone else 0.0
        v[S["is_actor"]] = 1.0 if int(record_field(p, "seat")) == actor else 0.0
        dmg = cmdr_damage_by_source(record_field(p, "cmdr_dmg"))
        v[S["max_cmdr_damage_taken"]] = max(dmg.values(), default=0) / CMDR_DAMAGE_SCALE
        v[S["total_cmdr_damage_taken"]] = sum(dmg.values()) / TOTAL_CMDR_DAMAGE_SCALE
        for source, amount in dmg.items():
            if source >= 0:
                v[S[CMDR_DAMAGE_FEATURES[(source - actor) % n]]] = amount / CMDR_DAMAGE_SCALE

    def _encode_hand(self, me: Any, v: np.ndarray) -> None:
        """The acting player's hand features (``HAND_FEATURES``) into the hand block ``v``."""
        mana = int(record_field(me, "mana") or 0)
        instants = 0
        best_affordable_power = 0
        for name in record_field(me, "hand") or []:
            card = self.pool.get(name)
            kind = card.kind if card is not None else "unknown"
            v[H[f"hand_{kind}"]] += 1.0 / CARD_COUNT_SCALE
            if card is not None and card.kind != "land" and card.mana_value <= mana:
                v[H[f"affordable_{kind}"]] += 1.0 / CARD_COUNT_SCALE
                if card.kind == "creature":
                    best_affordable_power = max(best_affordable_power, card.power)
            if card is not None and card.instant:
                instants += 1
        v[H["instants"]] = instants / CARD_COUNT_SCALE
        v[H["best_affordable_power"]] = best_affordable_power / CREATURE_POWER_SCALE
        command_zone = record_field(me, "command_zone") or []
        if command_zone:
            cmdr = self.pool.get(command_zone[0])
            cost = (cmdr.mana_value if cmdr is not None else 0) + int(record_field(me, "cmdr_tax") or 0)
            v[H["commander_cost"]] = cost / MANA_SCALE
            v[H["commander_affordable"]] = 1.0 if cost <= mana else 0.0


def label_record(record: Mapping[str, Any] | Any, pool: dict[str, Card]) -> int | None:
    """Macro-action index of a record's action, or None if it is not trainable.

    Args:
        record: decision record (dict or ``ml.game.commander.records.DecisionRecord``).
        pool: card pool used to classify cast cards by kind.

    Returns:
        Index into ``ml.game.commander.actions.MACRO_ACTIONS``, or None for land drops, casts of cards
        outside the pool, and attacks whose target is not recorded (real Forge data).
    """
    action = record_field(record, "action")
    idx = record_field(action, "action_idx")
    if idx is not None:
        return int(idx)
    macro = record_field(action, "macro_action")
    if macro:
        return ACTION_INDEX[macro]
    kind = record_field(action, "type")
    card_name = record_field(action, "card") or ""
    if kind == "cast_commander" or (kind == "cast" and card_name and card_name == record_field(record, "commander")):
        return CAST_COMMANDER
    if kind == "cast":
        card = pool.get(card_name)
        return ACTION_OF_KIND.get(card.kind) if card is not None else None
    if kind == "attack":
        target = record_field(action, "target") or ""
        if not target.startswith("seat "):
            return None
        n = len(record_field(record, "players"))
        offset = (int(target.split()[1]) - int(record_field(record, "active_seat"))) % n
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
    mask = record_field(record, "action_mask")
    if mask is None:
        return np.ones(NUM_ACTIONS, dtype=bool)
    return np.asarray(mask, dtype=bool)


def seat_eliminated(player: Mapping[str, Any] | Any) -> bool:
    """Whether a record's player is out: its ``eliminated`` flag, or life 0 or less when it has none."""
    flag = record_field(player, "eliminated")
    return bool(flag) if flag is not None else int(record_field(player, "life")) <= 0


def attack_target_mask(record: Mapping[str, Any] | Any) -> np.ndarray:
    """The attacks a record allows by its seats: ``attack_opponent_k`` for each opponent present and not eliminated.

    Returns:
        bool[NUM_ACTIONS], true only at attack actions (``attack_opponent_k`` attacks seat
        ``(active_seat + k) % pod size``, ``ml.game.commander.actions``).
    """
    players = record_field(record, "players")
    seats = {int(record_field(p, "seat")): p for p in players}
    n, actor = len(players), int(record_field(record, "active_seat"))
    out = np.zeros(NUM_ACTIONS, dtype=bool)
    for offset in range(1, min(n, MAX_POD)):
        p = seats.get((actor + offset) % n)
        if p is not None and not seat_eliminated(p):
            out[attack_action(offset)] = True
    return out


def record_legal_mask(record: Mapping[str, Any] | Any) -> np.ndarray:
    """Legal actions of a record to be answered: its ``action_mask`` (every action when it has none,
    as in Forge files), less the attacks on seats the pod lacks or that are out
    (:func:`attack_target_mask`), whatever the sent mask says.

    Training reads a record without mask as all actions legal (:func:`record_action_mask`); an answer
    must not name an attack on a missing or eliminated seat.

    Returns:
        bool[NUM_ACTIONS].
    """
    sent = record_field(record, "action_mask") is not None
    mask = record_action_mask(record).copy() if sent else np.ones(NUM_ACTIONS, dtype=bool)
    mask[FIRST_ATTACK:] &= attack_target_mask(record)[FIRST_ATTACK:]
    return mask
