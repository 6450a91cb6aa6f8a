"""A Python oracle of the commander's observation arithmetic, for tests only.

The product encodes through one compiled encoder (``ml.game.commander.core.kernels.encode_kernel``,
the layout in ``ml.game.commander.observation``). This module is the same arithmetic written
once more over plain objects, statement for statement as the product computed it before the
encoder was compiled: :func:`encode_views` fills an observation from one :class:`SeatView` per
seat, a view read from a record (:meth:`SeatView.from_record`) or from the object engine's live
seat (:meth:`SeatView.from_player`). ``tests/test_encoding.py`` checks the compiled encoder
against it bit for bit; it is an independent second reading, so it stays out of the product.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ml.game.commander.actions import MAX_POD
from ml.game.commander.cards import Card
from ml.game.commander.features import (
    BOARD_POWER_SCALE,
    CARD_COUNT_SCALE,
    CMDR_DAMAGE_FEATURES,
    CMDR_DAMAGE_SCALE,
    CREATURE_COUNT_SCALE,
    CREATURE_POWER_SCALE,
    GRAVEYARD_SCALE,
    HAND_START,
    KINDS,
    LANDS_SCALE,
    LIBRARY_SCALE,
    LIFE_SCALE,
    MANA_SCALE,
    OBS_DIM,
    PHASES,
    POD_SCALE,
    PREVIEW_DAMAGE_CAP,
    SEAT_BASE_FEATURES,
    SEAT_DIM,
    SEATS_START,
    TOTAL_CMDR_DAMAGE_SCALE,
    TURN_SCALE,
    G,
    H,
    S,
)
from ml.game.commander.forge_record import cmdr_damage_by_source
from ml.game.commander.observation import seat_eliminated
from ml.game.commander.pod_rules import COMMANDER_DAMAGE_LETHAL
from ml.game.commander.reference.combat import board_value, plan_blocks, resolve_damage
from ml.game.commander.reference.state import GameState, Permanent, PlayerState
from ml.game.record import record_field


class SeatView:
    """What the encoder reads of one seat, from a record (``from_record``) or the live game
    (``from_player``): the one input of the feature arithmetic, so both paths encode alike.

    Attributes:
        seat: seat index.
        life, mana, mana_sources, cmdr_tax, lands: counters (life points, mana, lands).
        creature_count: creatures on the battlefield (a Forge record may count creatures
            outside the card pool, which ``creatures`` lacks).
        creatures: the seat's creatures of the pool, with tapped/sick/commander flags.
        hand: cards in hand; None for a card outside the pool.
        graveyard_size: cards in the graveyard.
        library_size: cards in the library, None when unknown.
        commander_card: the commander when it is in the command zone (None if not, or unknown).
        in_command_zone: the command zone holds a card.
        eliminated: the seat is out.
        cmdr_dmg: commander damage taken by source seat (``-1``: unknown source).
        last_attacker: the seat that attacked this one most recently (-1 or None: none).
    """

    __slots__ = (
        "cmdr_dmg",
        "cmdr_tax",
        "commander_card",
        "creature_count",
        "creatures",
        "eliminated",
        "graveyard_size",
        "hand",
        "in_command_zone",
        "lands",
        "last_attacker",
        "library_size",
        "life",
        "mana",
        "mana_sources",
        "seat",
    )

    seat: int
    life: int
    mana: int
    mana_sources: int
    cmdr_tax: int
    lands: int
    creature_count: int
    creatures: list[Permanent]
    hand: list[Card | None] | list[Card]
    graveyard_size: int
    library_size: int | None
    commander_card: Card | None
    in_command_zone: bool
    eliminated: bool
    cmdr_dmg: dict[int, int]
    last_attacker: int | None

    def __init__(self, **fields: Any) -> None:
        for name in self.__slots__:
            setattr(self, name, fields[name])

    @classmethod
    def from_player(cls, p: PlayerState) -> SeatView:
        """The view of a live seat (``ml.game.commander.reference.state.PlayerState``); no copies of its lists."""
        v = cls.__new__(cls)
        v.seat, v.life, v.mana, v.mana_sources = p.seat, p.life, p.mana, p.mana_sources
        v.cmdr_tax, v.lands = p.commander_tax, p.lands
        v.creatures = p.creatures
        v.creature_count = len(p.creatures)
        v.hand = p.hand
        v.graveyard_size = len(p.graveyard)
        v.library_size = len(p.library)
        v.in_command_zone = bool(p.command_zone)
        v.commander_card = p.command_zone[0] if p.command_zone else None
        v.eliminated = p.eliminated
        v.cmdr_dmg = {src: dmg for src, dmg in enumerate(p.cmdr_dmg) if dmg}
        v.last_attacker = p.last_attacker
        return v

    @classmethod
    def from_record(cls, p: Mapping[str, Any] | Any, pool: dict[str, Card]) -> SeatView:
        """The view of a record's ``players[]`` entry (dict or ``PlayerView``); cards by name in ``pool``."""
        creatures = _record_creatures(p, pool)
        sources = record_field(p, "mana_sources")
        lands = int(record_field(p, "lands") or 0)
        command_zone = record_field(p, "command_zone") or []
        library = record_field(p, "library")
        return cls(
            seat=int(record_field(p, "seat")),
            life=int(record_field(p, "life")),
            mana=int(record_field(p, "mana") or 0),
            mana_sources=int(sources) if sources is not None else lands,
            cmdr_tax=int(record_field(p, "cmdr_tax") or 0),
            lands=lands,
            creatures=creatures,
            creature_count=max(len(creatures), int(record_field(p, "creatures") or 0)),
            hand=[pool.get(name) for name in record_field(p, "hand") or []],
            graveyard_size=len(record_field(p, "graveyard") or []),
            library_size=int(library) if library is not None else None,
            in_command_zone=bool(command_zone),
            commander_card=pool.get(command_zone[0]) if command_zone else None,
            eliminated=seat_eliminated(p),
            cmdr_dmg=cmdr_damage_by_source(record_field(p, "cmdr_dmg")),
            last_attacker=record_field(p, "last_attacker"),
        )


def _record_creatures(p: Any, pool: dict[str, Card]) -> list[Permanent]:
    """A record seat's creatures as ``Permanent``s, tapped/sick/commander flags from the record.

    ``tapped`` and ``sick`` list names, so copies of one card are told apart by the rules'
    order (``ml.game.commander.reference.engine``): creatures enter at the end of the battlefield and
    are all sick until their controller's untap, so the sick copies are the *last* ones;
    an attack taps every copy able to attack, which precede the sick ones, so the tapped
    copies are the *first* ones. Read so, a record gives the live state's flags exactly.
    """
    tapped = list(record_field(p, "tapped") or [])
    sick = list(record_field(p, "sick") or [])
    commander = record_field(p, "commander_name")
    out = []
    for name in record_field(p, "battlefield") or []:
        card = pool.get(name)
        if card is None or card.kind != "creature":
            continue
        perm = Permanent(card, tapped=name in tapped, sick=False, is_commander=name == commander)
        if perm.tapped:
            tapped.remove(name)
        out.append(perm)
    for perm in reversed(out):
        if perm.card.name in sick:
            perm.sick = True
            sick.remove(perm.card.name)
    return out


def encode_views(views: list[SeatView], actor: int, phase: str | None, turn: float, out: np.ndarray) -> None:
    """The observation of ``actor`` given every seat's view (the layout of the module docstring).

    The features are computed in Python floats into one list and written to ``out`` at once
    (one conversion to float32 instead of one numpy scalar write per slot).

    Args:
        views: one view per seat of the pod, any order (each names its seat).
        actor: the observing seat.
        phase: one of ``PHASES``; another value leaves the phase one-hot empty.
        turn: the round number.
        out: float32[OBS_DIM]; every slot is overwritten.
    """
    buf = [0.0] * OBS_DIM
    n = len(views)
    by_seat = {v.seat: v for v in views}
    if phase in PHASES:
        buf[G[f"phase_{phase}"]] = 1.0
    buf[G["turn"]] = turn / TURN_SCALE
    buf[G["pod_size"]] = n / POD_SCALE
    buf[G["living_players"]] = sum(not v.eliminated for v in views) / POD_SCALE
    me = by_seat.get(actor)
    mine = me.creatures if me is not None else []
    ready = [c for c in mine if c.can_attack()]
    kept = [c for c in mine if not c.can_attack() or "vigilance" in c.card.keywords]
    for k in range(min(n, MAX_POD)):
        seat = (actor + k) % n
        p = by_seat.get(seat)
        if p is None:
            continue
        base = SEATS_START + k * SEAT_DIM
        _encode_seat(p, actor, n, buf, base)
        untapped_count = untapped_power = 0
        for x in p.creatures:
            if not x.tapped:
                untapped_count += 1
                untapped_power += x.card.power
        buf[base + _UNTAPPED_CREATURES] = untapped_count / CREATURE_COUNT_SCALE
        buf[base + _UNTAPPED_POWER] = untapped_power / BOARD_POWER_SCALE
        if k == 0:
            buf[base + _READY_ATTACKERS] = len(ready) / CREATURE_COUNT_SCALE
            buf[base + _READY_POWER] = sum(x.card.power for x in ready) / BOARD_POWER_SCALE
        elif me is not None and not p.eliminated:
            _encode_previews(me, p, ready, kept, buf, base)
            buf[base + _ATTACKED_ME_LAST] = float(me.last_attacker == seat)
    if me is not None:
        _encode_hand(me, buf, HAND_START)
    out[:] = buf


_UNTAPPED_CREATURES, _UNTAPPED_POWER = S["untapped_creatures"], S["untapped_power"]
_READY_ATTACKERS, _READY_POWER, _ATTACKED_ME_LAST = S["ready_attackers"], S["ready_power"], S["attacked_me_last"]
_SEAT_SLOTS = tuple(S[name] for name in SEAT_BASE_FEATURES[:17])
"""Slots of ``present`` .. ``is_actor``, in the order :func:`_encode_seat` computes them."""
_CMDR_SLOTS = tuple(S[name] for name in CMDR_DAMAGE_FEATURES)
_MAX_CMDR, _TOTAL_CMDR = S["max_cmdr_damage_taken"], S["total_cmdr_damage_taken"]
_HAND_KIND = {kind: H[f"hand_{kind}"] for kind in KINDS}
_AFFORDABLE_KIND = {kind: H[f"affordable_{kind}"] for kind in KINDS}


def _encode_previews(
    me: SeatView, opp: SeatView, ready: list[Permanent], kept: list[Permanent], buf: list[float], base: int
) -> None:
    """Previews of an all-out attack each way between the actor and one opponent (``attack_*``, ``counter_*``)."""
    life = max(opp.life, 1)
    taken = opp.cmdr_dmg.get(me.seat, 0)
    if ready:
        res = resolve_damage(ready, plan_blocks(ready, opp.creatures, life, taken))
        dealt = res.player_damage - res.defender_gain
        buf[base + S["attack_damage"]] = min(dealt / life, PREVIEW_DAMAGE_CAP)
        buf[base + S["attack_lethal"]] = float(dealt >= life or taken + res.commander_damage >= COMMANDER_DAMAGE_LETHAL)
        buf[base + S["attack_attackers_lost"]] = sum(board_value(x) for x in res.dead_attackers) / BOARD_POWER_SCALE
        buf[base + S["attack_blockers_lost"]] = sum(board_value(x) for x in res.dead_blockers) / BOARD_POWER_SCALE
    if opp.creatures:
        my_life = max(me.life, 1)
        my_taken = me.cmdr_dmg.get(opp.seat, 0)
        attackers = [Permanent(x.card, sick=False, is_commander=x.is_commander) for x in opp.creatures]
        res = resolve_damage(attackers, plan_blocks(attackers, kept, my_life, my_taken))
        buf[base + S["counter_damage"]] = min(res.player_damage / my_life, PREVIEW_DAMAGE_CAP)
        buf[base + S["counter_lethal"]] = float(
            res.player_damage >= my_life or my_taken + res.commander_damage >= COMMANDER_DAMAGE_LETHAL
        )


def _encode_seat(p: SeatView, actor: int, n: int, buf: list[float], base: int) -> None:
    """The seat's public features (``SEAT_BASE_FEATURES``, ``CMDR_DAMAGE_FEATURES``) into ``buf[base:]``."""
    power = toughness = flying = max_power = 0
    for c in p.creatures:
        card = c.card
        power += card.power
        toughness += card.toughness
        if card.power > max_power:
            max_power = card.power
        if "flying" in card.keywords:
            flying += card.power
    values = (
        1.0,  # present
        0.0 if p.eliminated else 1.0,
        p.life / LIFE_SCALE,
        p.mana / MANA_SCALE,
        p.mana_sources / MANA_SCALE,
        p.cmdr_tax / MANA_SCALE,
        p.creature_count / CREATURE_COUNT_SCALE,
        power / BOARD_POWER_SCALE,
        toughness / BOARD_POWER_SCALE,
        flying / BOARD_POWER_SCALE,
        max_power / CREATURE_POWER_SCALE,
        p.lands / LANDS_SCALE,
        len(p.hand) / CARD_COUNT_SCALE,
        p.graveyard_size / GRAVEYARD_SCALE,
        p.library_size / LIBRARY_SCALE if p.library_size is not None else 0.0,
        1.0 if p.in_command_zone else 0.0,
        1.0 if p.seat == actor else 0.0,
    )
    for slot, value in zip(_SEAT_SLOTS, values, strict=True):
        buf[base + slot] = value
    dmg = p.cmdr_dmg
    if dmg:
        buf[base + _MAX_CMDR] = max(dmg.values()) / CMDR_DAMAGE_SCALE
        buf[base + _TOTAL_CMDR] = sum(dmg.values()) / TOTAL_CMDR_DAMAGE_SCALE
        for source, amount in dmg.items():
            if source >= 0:
                buf[base + _CMDR_SLOTS[(source - actor) % n]] = amount / CMDR_DAMAGE_SCALE


def _encode_hand(me: SeatView, buf: list[float], base: int) -> None:
    """The acting player's hand features (``HAND_FEATURES``) into ``buf[base:]``."""
    mana = me.mana
    instants = 0
    best_affordable_power = 0
    for card in me.hand:
        if card is None:
            buf[base + _HAND_KIND["unknown"]] += 1.0 / CARD_COUNT_SCALE
            continue
        buf[base + _HAND_KIND[card.kind]] += 1.0 / CARD_COUNT_SCALE
        if card.kind != "land" and card.mana_value <= mana:
            buf[base + _AFFORDABLE_KIND[card.kind]] += 1.0 / CARD_COUNT_SCALE
            if card.kind == "creature":
                best_affordable_power = max(best_affordable_power, card.power)
        if card.instant:
            instants += 1
    buf[base + H["instants"]] = instants / CARD_COUNT_SCALE
    buf[base + H["best_affordable_power"]] = best_affordable_power / CREATURE_POWER_SCALE
    if me.in_command_zone:
        cmdr = me.commander_card
        cost = (cmdr.mana_value if cmdr is not None else 0) + me.cmdr_tax
        buf[base + H["commander_cost"]] = cost / MANA_SCALE
        buf[base + H["commander_affordable"]] = 1.0 if cost <= mana else 0.0


def encode_record(record: Mapping[str, Any] | Any, pool: dict[str, Card]) -> np.ndarray:
    """float32[OBS_DIM]: the oracle's observation of a record (its ``active_seat``)."""
    out = np.zeros(OBS_DIM, dtype=np.float32)
    views = [SeatView.from_record(p, pool) for p in record_field(record, "players")]
    turn = float(record_field(record, "turn"))
    encode_views(views, int(record_field(record, "active_seat")), record_field(record, "phase"), turn, out)
    return out


def encode_state(state: GameState, seat: int) -> np.ndarray:
    """float32[OBS_DIM]: the oracle's observation of ``seat`` in the object engine's live game."""
    out = np.zeros(OBS_DIM, dtype=np.float32)
    encode_views([SeatView.from_player(p) for p in state.players], seat, state.phase, float(state.turn), out)
    return out
