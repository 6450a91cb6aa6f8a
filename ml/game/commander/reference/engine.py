"""Turn flow and card effects of the built-in Commander pod (internals of ``rules.py``).

Spec: ``shared/docs/commander-pod.md``. Functions mutate a ``GameState`` in place; the public
API (legality checks, records) is ``rules.py``. Fixed card-choice rules of the cast actions:

=================  ==========================================================================
action             effect
=================  ==========================================================================
cast_creature      the highest mana value creature affordable (first in hand on ties)
cast_removal       the cheapest affordable removal (sorcery before instant), on the biggest
                   threat to the caster: the biggest creature (``combat.threat``) of the
                   opponent that attacked the caster last; when that seat is gone or has no
                   creature, the biggest threat among all opponents' creatures (first seat
                   after the actor, then battlefield order, on ties)
cast_draw/ramp     the largest ``amount`` affordable (cheaper on ties); ramp stays as a rock
cast_wipe          the cheapest affordable wipe; destroys every creature
cast_commander     the commander, for mana value + tax
hold_mana          ends the main phase; until its next turn the seat casts its cheapest
                   affordable instant removal on the biggest creature attacking it (once per
                   combat)
pass               ends the main phase (drops an earlier hold) / declares no attack
attack_opponent_k  all creatures able to attack attack seat (actor + k) % pod_size
=================  ==========================================================================

A decision point is made only when the active seat has more than one legal action; a lone
``pass`` is taken automatically. The game's only randomness is ``state.rng``.
"""

from __future__ import annotations

import logging

from ml.game.commander.actions import (
    CAST_COMMANDER,
    CAST_CREATURE,
    CAST_DRAW,
    CAST_RAMP,
    CAST_REMOVAL,
    CAST_WIPE,
    FIRST_ATTACK,
    HOLD_MANA,
    KIND_OF_ACTION,
    PASS,
)
from ml.game.commander.cards import Card
from ml.game.commander.pod_rules import COMMANDER_DAMAGE_LETHAL, HAND_SIZE
from ml.game.commander.reference.combat import plan_blocks, resolve_damage, threat
from ml.game.commander.reference.state import GameState, Permanent, PlayerState

logger = logging.getLogger(__name__)


# ---------------------------------------------------------------------------- turn flow


def begin_turn(state: GameState, seat: int, skip_draw: bool = False) -> None:
    """Untap, upkeep, draw and the automatic land drop of ``seat``; phase becomes main_1."""
    state.active_seat = state.current_seat = seat
    state.phase = "main_1"
    p = state.players[seat]
    for c in p.creatures:
        c.tapped = False
        c.sick = False
    p.mana = p.mana_sources
    p.holding_mana = False
    if not skip_draw and not draw_cards(state, p, 1):
        return
    for i, card in enumerate(p.hand):
        if card.kind == "land":
            del p.hand[i]
            p.permanents.append(Permanent(card, sick=False))
            p.mana_sources += 1
            p.mana += 1
            break


def draw_cards(state: GameState, p: PlayerState, n: int) -> bool:
    """Draw ``n`` cards; drawing from an empty library eliminates. Returns False if eliminated."""
    for _ in range(n):
        if not p.library:
            eliminate(state, p)
            return False
        p.hand.append(p.library.pop())
    return True


def eliminate(state: GameState, p: PlayerState) -> None:
    """``p`` loses: its permanents leave the game; the game ends when one seat is left."""
    if p.eliminated:
        return
    p.eliminated = True
    state.elimination_order.append(p.seat)
    p.creatures = []
    p.permanents = []
    p.mana = p.mana_sources = 0
    p.holding_mana = False
    logger.debug("%s: seat %d eliminated on turn %d", state.game_id, p.seat, state.turn)
    living = state.living_seats()
    if len(living) <= 1:
        state.done = True
        state.winner = living[0] if living else None


def end_turn(state: GameState) -> None:
    """End step (discard to 7), then the next living seat's turn, or the turn-cap draw."""
    p = state.players[state.active_seat]
    while len(p.hand) > HAND_SIZE:
        p.graveyard.append(p.hand.pop(discard_index(p.hand)))
    n = state.pod_size
    nxt = state.active_seat
    for _ in range(n):
        nxt = (nxt + 1) % n
        if not state.players[nxt].eliminated:
            break
    if nxt <= state.active_seat:
        state.turn += 1
        if state.turn > state.max_turns:
            state.turn = state.max_turns
            state.phase = "end"
            state.done = True
            state.winner = None
            return
    begin_turn(state, nxt)


def discard_index(hand: list[Card]) -> int:
    """Fixed discard rule: a land while holding more than 3, else the highest mana value card."""
    lands = [i for i, c in enumerate(hand) if c.kind == "land"]
    if len(lands) > 3:
        return lands[-1]
    return max(range(len(hand)), key=lambda i: (hand[i].mana_value, i))


def advance(state: GameState) -> None:
    """Run automatic steps until a decision point with more than one legal action, or the end."""
    while not state.done:
        if state.players[state.active_seat].eliminated:
            end_turn(state)
            continue
        if state.phase == "end":
            end_turn(state)
            continue
        legal = compute_legal(state)
        if len(legal) > 1:
            state.legal = legal
            return
        state.phase = after_pass(state)
    state.legal = []


def after_pass(state: GameState) -> str:
    """Phase after a ``pass`` (a main-phase pass also drops any earlier ``hold_mana``)."""
    if state.phase == "combat":
        return "main_2"
    state.players[state.active_seat].holding_mana = False
    return "combat" if state.phase == "main_1" else "end"


# ---------------------------------------------------------------------------- legal actions


def _affordable_kinds(p: PlayerState) -> tuple[list[str], bool]:
    """Card kinds in hand that ``p`` can afford now, and whether an instant removal is among them."""
    kinds: list[str] = []
    instant = False
    m = p.mana
    for c in p.hand:
        if c.mana_value <= m:
            if c.kind not in kinds:
                kinds.append(c.kind)
            instant = instant or c.instant
    return kinds, instant


def compute_legal(state: GameState) -> list[int]:
    """Legal action indices of the active seat now, ascending."""
    seat = state.active_seat
    p = state.players[seat]
    if state.phase == "combat":
        if not any(c.can_attack() for c in p.creatures):
            return [PASS]
        n = state.pod_size
        return [PASS] + [FIRST_ATTACK + k - 1 for k in range(1, n) if not state.players[(seat + k) % n].eliminated]
    affordable, instant = _affordable_kinds(p)
    legal = []
    for action, kind in KIND_OF_ACTION.items():
        if kind not in affordable:
            continue
        if action == CAST_REMOVAL and removal_target(state, seat) is None:
            continue
        if action == CAST_WIPE and not any(q.creatures for q in state.players):
            continue
        legal.append(action)
    m = p.mana
    if p.command_zone and p.command_zone[0].mana_value + p.commander_tax <= m:
        legal.append(CAST_COMMANDER)
    if instant:
        legal.append(HOLD_MANA)
    legal.append(PASS)
    return legal


# ---------------------------------------------------------------------------- card choice


def choose_card(p: PlayerState, kind: str) -> int:
    """Hand index of the card a cast action of ``kind`` casts (fixed rule, module docstring)."""
    m = p.mana
    best = -1
    best_key: tuple[int, int] = (0, 0)
    for i, c in enumerate(p.hand):
        if c.kind != kind or c.mana_value > m:
            continue
        if kind == "creature":
            key = (-c.mana_value, 0)
        elif kind == "removal":
            key = (c.mana_value, int(c.instant))
        elif kind in ("draw", "ramp"):
            key = (-c.amount, c.mana_value)
        else:
            key = (c.mana_value, 0)
        if best < 0 or key < best_key:
            best, best_key = i, key
    return best


def cheapest_instant(p: PlayerState) -> int:
    """Hand index of the cheapest affordable instant removal, or -1."""
    best = -1
    for i, c in enumerate(p.hand):
        if c.instant and c.mana_value <= p.mana and (best < 0 or c.mana_value < p.hand[best].mana_value):
            best = i
    return best


def removal_target(state: GameState, seat: int) -> tuple[PlayerState, Permanent] | None:
    """Biggest threat to ``seat``: the biggest creature of the opponent that attacked it last.

    Falls back to the biggest threat among all opponents' creatures (first seat after
    ``seat`` wins ties) when that opponent is gone or has no creature.
    """
    n = state.pod_size
    last = state.players[seat].last_attacker
    if last >= 0:
        o = state.players[last]
        if not o.eliminated and o.creatures:
            return o, biggest(o.creatures)
    best: tuple[PlayerState, Permanent] | None = None
    best_t = -1
    for k in range(1, n):
        o = state.players[(seat + k) % n]
        if o.eliminated:
            continue
        for c in o.creatures:
            t = threat(c)
            if t > best_t:
                best, best_t = (o, c), t
    return best


def biggest(perms: list[Permanent]) -> Permanent:
    """First permanent with the highest threat."""
    best = perms[0]
    best_t = threat(best)
    for c in perms:
        t = threat(c)
        if t > best_t:
            best, best_t = c, t
    return best


# ---------------------------------------------------------------------------- effects


def destroy(owner: PlayerState, perm: Permanent) -> None:
    """A creature dies (or is exiled): to the graveyard, a commander to the command zone."""
    owner.creatures.remove(perm)
    if perm.is_commander:
        owner.command_zone.append(perm.card)
    else:
        owner.graveyard.append(perm.card)


def cast(state: GameState, p: PlayerState, action: int) -> None:
    """Cast the card chosen by ``action`` (a legal cast action) for ``p``."""
    if action == CAST_COMMANDER:
        card = p.command_zone.pop()
        p.mana -= card.mana_value + p.commander_tax
        p.commander_casts += 1
        p.creatures.append(Permanent(card, is_commander=True))
        return
    card = p.hand.pop(choose_card(p, KIND_OF_ACTION[action]))
    p.mana -= card.mana_value
    if action == CAST_CREATURE:
        p.creatures.append(Permanent(card))
        return
    if action == CAST_RAMP:
        p.permanents.append(Permanent(card, sick=False))
        p.mana_sources += card.amount
        p.mana += card.amount
        return
    p.graveyard.append(card)
    if action == CAST_REMOVAL:
        target = removal_target(state, p.seat)
        assert target is not None, "cast_removal was legal without a target"
        destroy(*target)
    elif action == CAST_DRAW:
        draw_cards(state, p, card.amount)
    else:  # CAST_WIPE
        for q in state.players:
            for c in list(q.creatures):
                destroy(q, c)


def attack(state: GameState, p: PlayerState, d: PlayerState) -> None:
    """``p`` attacks ``d`` with every creature able to attack; responses, blocks, damage."""
    attackers = [c for c in p.creatures if c.can_attack()]
    d.last_attacker = p.seat
    for c in attackers:
        if "vigilance" not in c.card.keywords:
            c.tapped = True
    if d.holding_mana:
        i = cheapest_instant(d)
        if i >= 0:
            card = d.hand.pop(i)
            d.mana -= card.mana_value
            d.graveyard.append(card)
            target = biggest(attackers)
            attackers.remove(target)
            destroy(p, target)
    blocks = plan_blocks(attackers, d.creatures, d.life, d.cmdr_dmg[p.seat])
    res = resolve_damage(attackers, blocks)
    d.life += res.defender_gain - res.player_damage
    p.life += res.attacker_gain
    d.cmdr_dmg[p.seat] += res.commander_damage
    for c in res.dead_attackers:
        destroy(p, c)
    for c in res.dead_blockers:
        destroy(d, c)
    if d.life <= 0 or d.cmdr_dmg[p.seat] >= COMMANDER_DAMAGE_LETHAL:
        eliminate(state, d)
