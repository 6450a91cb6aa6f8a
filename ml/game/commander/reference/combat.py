"""Combat of the built-in Commander pod: threat rule, fixed block rule, damage.

Pure functions over ``state.Permanent`` lists; ``rules.py`` applies the results and the
heuristic player previews attacks with the same functions (shared/docs/commander-pod.md "Combat").

Block rule (fixed, public): attackers are considered biggest threat first. A defender first
makes favourable blocks: "eat" (the blocker survives and kills the attacker), "wall" (the
blocker survives), "trade" (both die and the blocker costs no more than the attacker; never
trading away the commander). Then, if the unblocked damage is still lethal (life or 21
commander damage), it chump-blocks the biggest unblocked attackers with its cheapest
remaining creatures until it is not. Flying attackers can only be blocked by flyers.
"""

from __future__ import annotations

from ml.game.commander.core.kernels import THREAT_BONUS as COMMANDER_THREAT_BONUS
from ml.game.commander.pod_rules import COMMANDER_DAMAGE_LETHAL
from ml.game.commander.reference.state import Permanent


def threat(perm: Permanent) -> int:
    """Fixed threat rule: 2*power + toughness + 2 per keyword, plus a bonus for a commander.

    Returns:
        Threat score (int, higher is more threatening).
    """
    card = perm.card
    score = 2 * card.power + card.toughness + 2 * len(card.keywords)
    return score + COMMANDER_THREAT_BONUS if perm.is_commander else score


def board_value(perm: Permanent) -> int:
    """A creature's board value: power + toughness + number of keywords (the teacher's attack score)."""
    card = perm.card
    return card.power + card.toughness + len(card.keywords)


def can_block(blocker: Permanent, attacker: Permanent) -> bool:
    """Whether ``blocker`` may block ``attacker`` (flying is blockable only by flyers)."""
    return "flying" not in attacker.card.keywords or "flying" in blocker.card.keywords


def _kills(source: Permanent, target: Permanent, damage: int) -> bool:
    return damage > 0 and (damage >= target.card.toughness or "deathtouch" in source.card.keywords)


def _trample_excess(att: Permanent, blk: Permanent) -> int:
    """Damage an attacker assigns past its blocker (0 without trample)."""
    card = att.card
    if "trample" not in card.keywords:
        return 0
    needed = 1 if "deathtouch" in card.keywords else blk.card.toughness
    return max(0, card.power - needed)


def _unblocked_damage(attackers: list[Permanent], blocks: list[Permanent | None]) -> tuple[int, int]:
    """Damage to the defending player and the largest single-commander damage, given blocks."""
    total = 0
    cmdr = 0
    for att, blk in zip(attackers, blocks, strict=True):
        dmg = att.card.power if blk is None else _trample_excess(att, blk)
        total += dmg
        if att.is_commander:
            cmdr = max(cmdr, dmg)
    return total, cmdr


def _favourable_blocker(att: Permanent, pool: list[Permanent]) -> Permanent | None:
    """Best favourable blocker for ``att`` from ``pool`` (eat > wall > trade), cheapest first."""
    best: Permanent | None = None
    best_key: tuple[int, int] | None = None
    a = att.card
    for blk in pool:
        if not can_block(blk, att):
            continue
        survives = not _kills(att, blk, a.power)
        kills = _kills(blk, att, blk.card.power)
        if survives and kills:
            rank = 0
        elif survives:
            rank = 1
        elif kills and not blk.is_commander and blk.card.mana_value <= a.mana_value:
            rank = 2
        else:
            continue
        key = (rank, blk.card.mana_value)
        if best_key is None or key < best_key:
            best, best_key = blk, key
    return best


def plan_blocks(attackers: list[Permanent], blockers: list[Permanent], life: int, cmdr_taken: int) -> list[Permanent | None]:
    """The defender's fixed block rule (see the module docstring).

    Args:
        attackers: attacking creatures.
        blockers: the defender's creatures (tapped ones are skipped).
        life: the defender's life (life points).
        cmdr_taken: commander damage the defender has already taken from the attacker's commander.

    Returns:
        The blocker of each attacker (same index), None when unblocked.
    """
    pool = [b for b in blockers if not b.tapped]
    blocks: list[Permanent | None] = [None] * len(attackers)
    if not pool:
        return blocks
    order = sorted(range(len(attackers)), key=lambda i: -threat(attackers[i]))
    for i in order:
        blk = _favourable_blocker(attackers[i], pool)
        if blk is not None:
            blocks[i] = blk
            pool.remove(blk)
    total, cmdr = _unblocked_damage(attackers, blocks)
    if total < life and cmdr_taken + cmdr < COMMANDER_DAMAGE_LETHAL:
        return blocks
    pool.sort(key=lambda b: (b.card.mana_value, threat(b)))
    for i in sorted(range(len(attackers)), key=lambda i: -attackers[i].card.power):
        if blocks[i] is not None:
            continue
        for blk in pool:
            if can_block(blk, attackers[i]):
                blocks[i] = blk
                pool.remove(blk)
                break
        total, cmdr = _unblocked_damage(attackers, blocks)
        if total < life and cmdr_taken + cmdr < COMMANDER_DAMAGE_LETHAL:
            break
    return blocks


class CombatResult:
    """Outcome of one combat damage step (nothing applied yet).

    Attributes:
        player_damage: damage dealt to the defending player (life points).
        commander_damage: part of it dealt by the attacker's commander.
        dead_attackers: attacking permanents that die.
        dead_blockers: blocking permanents that die.
        attacker_gain: life the attacking player gains (lifelink).
        defender_gain: life the defending player gains (lifelink on blockers).
    """

    __slots__ = ("attacker_gain", "commander_damage", "dead_attackers", "dead_blockers", "defender_gain", "player_damage")

    def __init__(self) -> None:
        self.player_damage = 0
        self.commander_damage = 0
        self.dead_attackers: list[Permanent] = []
        self.dead_blockers: list[Permanent] = []
        self.attacker_gain = 0
        self.defender_gain = 0


def resolve_damage(attackers: list[Permanent], blocks: list[Permanent | None]) -> CombatResult:
    """Compute combat damage (simultaneous; keywords: trample, deathtouch, lifelink).

    Args:
        attackers: attacking creatures.
        blocks: blocker per attacker (same index) or None.

    Returns:
        A ``CombatResult``; the caller applies life, commander damage and deaths.
    """
    res = CombatResult()
    for att, blk in zip(attackers, blocks, strict=True):
        a = att.card
        if blk is None:
            dealt = to_player = a.power
        else:
            to_player = _trample_excess(att, blk)
            to_blocker = a.power - to_player
            dealt = a.power
            if _kills(att, blk, to_blocker):
                res.dead_blockers.append(blk)
            b = blk.card
            if _kills(blk, att, b.power):
                res.dead_attackers.append(att)
            if "lifelink" in b.keywords:
                res.defender_gain += b.power
        res.player_damage += to_player
        if att.is_commander:
            res.commander_damage += to_player
        if "lifelink" in a.keywords:
            res.attacker_gain += dealt
    return res
