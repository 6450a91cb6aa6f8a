"""Scripted players of the built-in Commander pod (shared/docs/commander-pod.md "Players (policies)").

``RandomPlayer`` picks uniformly among legal actions. ``HeuristicPlayer`` is the teacher:
Forge-like priorities, clearly better than random and beatable (it never uses ``hold_mana``,
spends removal at sorcery speed, and previews attacks without the defenders' instant
responses). Both read only what their seat may know: their own hand, public zones and
opponents' hand sizes (they never look at opponents' hands or any library). Each owns a
seeded ``random.Random``; nothing uses the global RNG.
"""

from __future__ import annotations

import random

from ml.game.commander.actions import (
    CAST_COMMANDER,
    CAST_CREATURE,
    CAST_DRAW,
    CAST_RAMP,
    CAST_REMOVAL,
    CAST_WIPE,
    FIRST_ATTACK,
    PASS,
)
from ml.game.commander.core.kernels import (
    DANGER_FRACTION,
    LOSS_WEIGHT,
    REMOVAL_MIN_THREAT,
    RETALIATE_BONUS,
    SWAP_PROB,
    WIPE_COUNT_GAP,
    WIPE_POWER_GAP,
)
from ml.game.commander.core.kernels import EARLY_MANA as EARLY_MANA_SOURCES
from ml.game.commander.pod_rules import COMMANDER_DAMAGE_LETHAL
from ml.game.commander.reference import engine
from ml.game.commander.reference.combat import board_value, plan_blocks, resolve_damage, threat
from ml.game.commander.reference.state import GameState, Permanent, PlayerState


class RandomPlayer:
    """Uniform over legal actions.

    Args:
        seed: seed of the player's own ``random.Random``.
    """

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def act(self, state: GameState) -> int:
        """An action index drawn uniformly among the legal ones of ``state.current_seat``.

        Raises:
            ValueError: the game is over (no legal action).
        """
        if not state.legal:
            raise ValueError(f"{state.game_id}: no legal action (game over)")
        return self.rng.choice(state.legal)


class HeuristicPlayer:
    """The teacher: Forge-like priorities with small seeded randomness in tie-breaks.

    Main phase: commander when affordable; ramp early; a wipe when clearly behind on board;
    removal on a big threat; creatures on curve (or draw, by a seeded coin); ramp later;
    any remaining removal; pass. Combat: attack an opponent it can kill; otherwise keep
    blockers when an opponent threatens lethal; otherwise attack the opponent where the
    previewed combat (the public block rule) scores best, if any scores above zero, with a
    bonus for the opponent that attacked it last (politics: that seat's removal already
    points at us under the caster-relative removal rule).

    Args:
        seed: seed of the player's own ``random.Random``.
    """

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def act(self, state: GameState) -> int:
        """Choose an action for ``state.current_seat``.

        Returns:
            A legal action index.

        Raises:
            ValueError: the game is over (no legal action).
        """
        legal = state.legal
        if not legal:
            raise ValueError(f"{state.game_id}: no legal action (game over)")
        if len(legal) == 1:
            return legal[0]
        if state.phase == "combat":
            return self._combat(state, legal)
        return self._main(state, legal)

    def _main(self, state: GameState, legal: list[int]) -> int:
        p = state.players[state.current_seat]
        if CAST_COMMANDER in legal:
            return CAST_COMMANDER
        if CAST_RAMP in legal and p.mana_sources < EARLY_MANA_SOURCES:
            return CAST_RAMP
        if CAST_WIPE in legal and _behind(state, p):
            return CAST_WIPE
        if CAST_REMOVAL in legal:
            target = engine.removal_target(state, p.seat)
            if target is not None and (threat(target[1]) >= REMOVAL_MIN_THREAT or target[1].is_commander):
                return CAST_REMOVAL
        order = [CAST_CREATURE, CAST_DRAW]
        if self.rng.random() < SWAP_PROB:
            order.reverse()
        for action in (*order, CAST_RAMP, CAST_REMOVAL):
            if action in legal:
                return action
        return PASS

    def _combat(self, state: GameState, legal: list[int]) -> int:
        p = state.players[state.current_seat]
        n = state.pod_size
        attackers = [c for c in p.creatures if c.can_attack()]
        best, best_score = PASS, 0.0
        for action in legal:
            if action < FIRST_ATTACK:
                continue
            d = state.players[(p.seat + action - FIRST_ATTACK + 1) % n]
            lethal, score = _preview(attackers, p, d)
            if lethal:
                return action
            if score > 0 and d.seat == p.last_attacker:
                score += RETALIATE_BONUS
            score += self.rng.random() * 0.5
            if score > best_score:
                best, best_score = action, score
        if best != PASS and _threatened(state, p, attackers):
            return PASS
        return best


def _behind(state: GameState, p: PlayerState) -> bool:
    """Clearly behind on board: an opponent's power and the opponents' creature count far above ours."""
    mine = sum(c.card.power for c in p.creatures)
    theirs = 0
    count = 0
    for o in state.players:
        if o.seat != p.seat and not o.eliminated:
            theirs = max(theirs, sum(c.card.power for c in o.creatures))
            count += len(o.creatures)
    return theirs >= mine + WIPE_POWER_GAP and count >= len(p.creatures) + WIPE_COUNT_GAP


def _preview(attackers: list[Permanent], p: PlayerState, d: PlayerState) -> tuple[bool, float]:
    """Preview an attack on ``d`` with the public block rule (ignores instant responses).

    Returns:
        (lethal, score): whether ``d`` would be eliminated, and damage dealt (scaled up for
        low-life defenders) plus blockers' value killed minus our creatures' value lost.
    """
    blocks = plan_blocks(attackers, d.creatures, d.life, d.cmdr_dmg[p.seat])
    res = resolve_damage(attackers, blocks)
    life_after = d.life + res.defender_gain - res.player_damage
    if life_after <= 0 or d.cmdr_dmg[p.seat] + res.commander_damage >= COMMANDER_DAMAGE_LETHAL:
        return True, 0.0
    lost = sum(board_value(c) for c in res.dead_attackers)
    killed = sum(board_value(c) for c in res.dead_blockers)
    vulnerability = 40.0 / max(d.life, 1)
    return False, res.player_damage * vulnerability + killed - LOSS_WEIGHT * lost


def _threatened(state: GameState, p: PlayerState, attackers: list[Permanent]) -> bool:
    """Whether an opponent's board could kill ``p`` next turn if our attackers are tapped."""
    kept = [c for c in p.creatures if c not in attackers or "vigilance" in c.card.keywords]
    for o in state.players:
        if o.seat == p.seat or o.eliminated or not o.creatures:
            continue
        power = sum(c.card.power for c in o.creatures)
        cmdr = max((c.card.power for c in o.creatures if c.is_commander), default=0)
        if power >= DANGER_FRACTION * p.life or p.cmdr_dmg[o.seat] + cmdr >= COMMANDER_DAMAGE_LETHAL:
            untapped_threats = [Permanent(c.card, sick=False, is_commander=c.is_commander) for c in o.creatures]
            blocks = plan_blocks(untapped_threats, kept, p.life, p.cmdr_dmg[o.seat])
            res = resolve_damage(untapped_threats, blocks)
            cmdr_total = p.cmdr_dmg[o.seat] + res.commander_damage
            if res.player_damage >= DANGER_FRACTION * p.life or cmdr_total >= COMMANDER_DAMAGE_LETHAL:
                return True
    return False
