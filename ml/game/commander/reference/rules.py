"""Public rules API of the built-in Commander pod (spec: ``shared/docs/commander-pod.md``).

No PettingZoo here (the AEC adapter is ``env.py``); turn flow and card effects live in
``engine.py`` (its docstring lists the fixed card-choice rules), combat in ``combat.py``.
``apply_action`` advances automatically (untap, upkeep, draw, land drop, blocks, instant
responses, end-step discard, eliminations, next player) to the next decision point of
``state.current_seat`` or to the end. Records follow ``shared/docs/forge-decision-format.md``.

Determinism: all randomness comes from ``state.rng`` (``random.Random(seed)``); same seed and
same actions give the same game, bit for bit.
"""

from __future__ import annotations

import logging
import random

import numpy as np

from ml.base.io import JSONObject
from ml.game.commander.actions import (
    CAST_COMMANDER,
    CAST_REMOVAL,
    FIRST_ATTACK,
    HOLD_MANA,
    KIND_OF_ACTION,
    MACRO_ACTIONS,
    MAX_POD,
    MIN_POD,
    NUM_ACTIONS,
    PASS,
    IllegalActionError,
)
from ml.game.commander.cards import load_card_pool, load_decks
from ml.game.commander.core.game import action_object
from ml.game.commander.core.kernels import MAX_MULL as MAX_MULLIGANS
from ml.game.commander.core.kernels import MULL_MAX as MULLIGAN_MAX_LANDS
from ml.game.commander.core.kernels import MULL_MIN as MULLIGAN_MIN_LANDS
from ml.game.commander.pod_rules import HAND_SIZE
from ml.game.commander.reference import engine
from ml.game.commander.reference.state import GameState, PlayerState

logger = logging.getLogger(__name__)


# ---------------------------------------------------------------------------- setup


def new_game(
    seed: int, pod_size: int = 4, max_turns: int = 30, game_index: int = 0, deck_names: list[str] | None = None
) -> GameState:
    """Start a seeded game and advance it to the first decision point.

    Args:
        seed: game seed (int); the only source of randomness.
        pod_size: number of seats, 2..MAX_POD.
        max_turns: round cap (rounds), >= 1.
        game_index: index used in ``game_id`` (``game-<index>-<seed>``).
        deck_names: one deck name per seat before the seat shuffle; None draws decks at random
            (without repeats while the pool allows).

    Returns:
        The new ``GameState`` (seat order shuffled, libraries shuffled, 7-card hands).

    Raises:
        ValueError: bad ``pod_size``, ``max_turns`` or deck names.
    """
    if not MIN_POD <= pod_size <= MAX_POD:
        raise ValueError(f"pod_size must be in {MIN_POD}..{MAX_POD}, got {pod_size}")
    if max_turns < 1:
        raise ValueError(f"max_turns must be >= 1, got {max_turns}")
    pool, decks = load_card_pool(), load_decks()
    state = GameState(seed, pod_size, max_turns, game_index, [])
    rng = state.rng
    if deck_names is None:
        names = list(decks)
        chosen = rng.sample(names, pod_size) if pod_size <= len(names) else [rng.choice(names) for _ in range(pod_size)]
    else:
        unknown = [n for n in deck_names if n not in decks]
        if len(deck_names) != pod_size or unknown:
            raise ValueError(f"deck_names must be {pod_size} names of {list(decks)}; got {deck_names}")
        chosen = list(deck_names)
    rng.shuffle(chosen)
    for seat, name in enumerate(chosen):
        deck = decks[name]
        p = PlayerState(seat, pod_size, deck.name, deck.archetype, pool[deck.commander])
        p.library = [pool[n] for n in deck.cards]
        rng.shuffle(p.library)
        _deal_opening_hand(p, rng)
        state.players.append(p)
    engine.begin_turn(state, 0, skip_draw=True)
    engine.advance(state)
    return state


def _deal_opening_hand(p: PlayerState, rng: random.Random) -> None:
    """Draw 7; automatic free mulligans (shuffle back, draw 7) while the hand is unkeepable.

    A hand is kept with MULLIGAN_MIN_LANDS..MULLIGAN_MAX_LANDS lands, or after MAX_MULLIGANS
    redraws (Commander's free mulligan, rule 103.5c; Forge's AI keeps 2-5 landers).
    """
    for _ in range(MAX_MULLIGANS + 1):
        p.hand = [p.library.pop() for _ in range(HAND_SIZE)]
        lands = sum(1 for c in p.hand if c.kind == "land")
        if MULLIGAN_MIN_LANDS <= lands <= MULLIGAN_MAX_LANDS:
            return
        p.library.extend(p.hand)
        rng.shuffle(p.library)
    p.hand = [p.library.pop() for _ in range(HAND_SIZE)]


def legal_actions(state: GameState) -> list[int]:
    """Legal action indices for ``state.current_seat`` (ascending; empty when done). A new list."""
    return list(state.legal)


def legal_action_mask(state: GameState) -> np.ndarray:
    """Legal-action mask for ``state.current_seat``.

    Returns:
        bool[NUM_ACTIONS]; all False when the game is over.
    """
    mask = np.zeros(NUM_ACTIONS, dtype=bool)
    mask[state.legal] = True
    return mask


def apply_action(state: GameState, action: int) -> None:
    """Apply ``action`` for ``state.current_seat`` and advance to the next decision point or the end.

    Args:
        state: the game, mutated in place.
        action: index into ``MACRO_ACTIONS``.

    Raises:
        IllegalActionError: the game is over, or ``action`` is not legal now (the message
            names the action and the legal ones).
    """
    _check_legal(state, action)
    action = int(action)
    p = state.players[state.active_seat]
    if state.phase == "combat":
        if action != PASS:
            engine.attack(state, p, state.players[(p.seat + action - FIRST_ATTACK + 1) % state.pod_size])
        state.phase = "main_2"
    elif action == PASS:
        state.phase = engine.after_pass(state)
    elif action == HOLD_MANA:
        p.holding_mana = True
        state.phase = "combat" if state.phase == "main_1" else "end"
    else:
        engine.cast(state, p, action)
    engine.advance(state)


def _check_legal(state: GameState, action: int) -> None:
    if state.done:
        raise IllegalActionError(f"{state.game_id}: the game is over ({outcome(state)}); no action is legal")
    if action not in state.legal:
        name = MACRO_ACTIONS[action] if isinstance(action, (int, np.integer)) and 0 <= action < NUM_ACTIONS else repr(action)
        legal = [MACRO_ACTIONS[a] for a in state.legal]
        raise IllegalActionError(f"{state.game_id}: {name} is not legal for seat {state.current_seat} now; legal: {legal}")


def outcome(state: GameState) -> str:
    """``win_seat_<k>`` or ``draw`` (meaningful only when ``state.done``)."""
    return f"win_seat_{state.winner}" if state.winner is not None else "draw"


# ---------------------------------------------------------------------------- records


def _player_record(p: PlayerState) -> JSONObject:
    """One ``players[]`` object of a Forge-format record (Forge's keys first, then our extras)."""
    return {
        "seat": p.seat,
        "life": p.life,
        "cmdr_dmg": {str(src): dmg for src, dmg in enumerate(p.cmdr_dmg) if dmg},
        "mana": p.mana,
        "cmdr_tax": p.commander_tax,
        "creatures": len(p.creatures),
        "lands": p.lands,
        "hand": [c.name for c in p.hand],
        "battlefield": [c.card.name for c in p.permanents] + [c.card.name for c in p.creatures],
        "graveyard": [c.name for c in p.graveyard],
        "command_zone": [c.name for c in p.command_zone],
        "library": len(p.library),
        "mana_sources": p.mana_sources,
        "eliminated": p.eliminated,
        "commander_name": p.commander_name,
        "tapped": [c.card.name for c in p.creatures if c.tapped],
        "sick": [c.card.name for c in p.creatures if c.sick],
        "last_attacker": p.last_attacker,
    }


def decision_record(state: GameState, seat: int | None = None) -> JSONObject:
    """The Forge-format record of the decision about to be made (no ``action`` yet).

    Keys in Forge's order (shared/docs/forge-decision-format.md "Record"): ``game_id, turn, phase,
    active_seat, game_outcome, deck_name, commander, archetype, players``, then our
    ``action_mask``. ``game_outcome`` is ``""``: the writer fills it at game end. Every seat's
    hand is logged (the encoder only uses opponents' hand sizes).

    Args:
        state: the game.
        seat: the acting seat; None means ``state.current_seat``. For any other seat (an
            observation of a seat that is not to act) the mask is all zeros.

    Returns:
        A JSON-serialisable dict; ``action_mask`` is a list of NUM_ACTIONS 0/1 ints.
    """
    if seat is None:
        seat = state.current_seat
    p = state.players[seat]
    mask = [0] * NUM_ACTIONS
    if seat == state.current_seat:
        for a in state.legal:
            mask[a] = 1
    return {
        "game_id": state.game_id,
        "turn": state.turn,
        "phase": state.phase,
        "active_seat": seat,
        "game_outcome": "",
        "deck_name": p.deck_name,
        "commander": p.commander_name,
        "archetype": p.archetype,
        "players": [_player_record(q) for q in state.players],
        "action_mask": mask,
    }


def describe_action(state: GameState, action: int) -> JSONObject:
    """The record's ``action`` object for ``action`` taken now by ``state.current_seat``.

    Call it before ``apply_action`` (it names the card the fixed rule would cast now).

    Returns:
        ``{"type", "card", "target", "raw", "macro_action", "action_idx"}``; ``type`` is one of
        ``cast, cast_commander, attack, pass, hold``; ``target`` is ``seat <k>`` for an attack
        or a removal, else ``""``; ``raw`` is a log line of at most 200 characters.

    Raises:
        IllegalActionError: the game is over or ``action`` is not legal now.
    """
    _check_legal(state, action)
    action = int(action)
    p = state.players[state.current_seat]
    who = f"Seat {p.seat} ({p.commander_name})"
    card = target = ""
    if action >= FIRST_ATTACK:
        d = (p.seat + action - FIRST_ATTACK + 1) % state.pod_size
        kind, target = "attack", f"seat {d}"
        names = ", ".join(c.card.name for c in p.creatures if c.can_attack())
        raw = f"{who} attacks seat {d} with {names}"
    elif action == PASS:
        kind = "pass"
        raw = f"{who} declares no attackers" if state.phase == "combat" else f"{who} passes"
    elif action == HOLD_MANA:
        kind, raw = "hold", f"{who} passes holding {p.mana} mana open"
    elif action == CAST_COMMANDER:
        kind, card = "cast_commander", p.command_zone[0].name
        raw = f"{who} cast {card} from the command zone for {p.command_zone[0].mana_value + p.commander_tax}"
    else:
        kind = "cast"
        card = p.hand[engine.choose_card(p, KIND_OF_ACTION[action])].name
        raw = f"{who} cast {card}"
        if action == CAST_REMOVAL:
            chosen = engine.removal_target(state, p.seat)
            assert chosen is not None, "CAST_REMOVAL is legal only with a removal target (engine.compute_legal)"
            owner, victim = chosen
            target = f"seat {owner.seat}"
            raw += f" targeting {victim.card.name} ({target})"
    return action_object(kind, card, target, raw, action)
