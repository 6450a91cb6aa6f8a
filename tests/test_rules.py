"""Tests of the Commander pod rules, on the product's core and on the tests' object engine, and of the players.

Scripted positions are built in the object engine (``ml.game.commander.reference``: ``new_game``,
then setting fields); every ``apply_action`` of a scripted test loads the position into a
one-game core state (``load_core``), steps the action there too, and requires the core's
state after it to equal the object engine's (``tests/test_core_agreement.py``'s snapshots), so
each rule asserted below holds on the core. The long random and heuristic games play on the
object engine alone (the agreement tests play thousands on both). Checks:
* commander damage: 21 from ONE commander eliminates, 21 spread over two commanders does not;
* commander tax: cost rises by 2 per cast; a commander that dies returns to the command zone;
* elimination at 0 life and on drawing from an empty library; an eliminated player's
  permanents leave the game and it can no longer be attacked;
* the turn-cap draw (``outcome == "draw"``);
* determinism: same seed and player seeds give identical record sequences; another seed differs;
* chosen actions are always inside the mask; a masked action, or any action after the end,
  raises ``IllegalActionError`` naming the legal actions;
* ``hold_mana`` lets instant removal kill an attacker (and ``pass`` does not);
* one scripted combat per keyword: flying, trample, deathtouch, lifelink, vigilance, haste;
* the heuristic player beats 3 random players (win rate printed with its 95% interval);
* card-pool and deck validation errors name the file and entry.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from ml.game.commander import core
from ml.game.commander.actions import (
    CAST_COMMANDER,
    CAST_REMOVAL,
    CAST_WIPE,
    HOLD_MANA,
    MAX_POD,
    NUM_ACTIONS,
    PASS,
    attack_action,
)
from ml.game.commander.cards import load_card_pool, load_decks
from ml.game.commander.features import PHASES
from ml.game.commander.reference import engine
from ml.game.commander.reference.players import HeuristicPlayer, RandomPlayer
from ml.game.commander.reference.rules import (
    IllegalActionError,
    decision_record,
    describe_action,
    legal_action_mask,
    new_game,
    outcome,
)
from ml.game.commander.reference.rules import apply_action as ref_apply_action
from ml.game.commander.reference.state import GameState, Permanent
from ml.judge.stats import wilson_interval
from tests.test_core_agreement import TABLES, core_snapshot, ref_snapshot

POOL = load_card_pool()


def load_core(state: GameState) -> core.CoreState:
    """A one-game core state holding ``state``'s position (every field ``ref_snapshot`` names,
    the game's Mersenne Twister, every seat external)."""
    cid = TABLES.card_id
    st = core.new_state(1)
    st.seed[0], st.game_index[0], st.pod[0], st.max_turns[0] = state.seed, 0, state.pod_size, state.max_turns
    st.turn[0], st.phase[0], st.active[0] = state.turn, PHASES.index(state.phase), state.active_seat
    st.done[0], st.winner[0] = state.done, -1 if state.winner is None else state.winner
    st.elim_n[0] = len(state.elimination_order)
    st.elim_order[0, : st.elim_n[0]] = state.elimination_order
    st.legal[0, state.legal] = True
    for p in state.players:
        s = p.seat
        st.deck[0, s] = TABLES.deck_names.index(p.deck_name)
        st.life[0, s], st.mana[0, s], st.mana_sources[0, s], st.casts[0, s] = p.life, p.mana, p.mana_sources, p.commander_casts
        st.cmdr_dmg[0, s, : state.pod_size] = p.cmdr_dmg
        st.eliminated[0, s], st.holding[0, s], st.in_cz[0, s] = p.eliminated, p.holding_mana, bool(p.command_zone)
        st.last_attacker[0, s] = p.last_attacker
        for zone, n, cards in ((st.lib, st.lib_n, p.library), (st.hand, st.hand_n, p.hand), (st.grave, st.grave_n, p.graveyard),
                               (st.perm, st.perm_n, [c.card for c in p.permanents]), (st.crt, st.crt_n, [c.card for c in p.creatures])):  # fmt: skip
            n[0, s] = len(cards)
            zone[0, s, : len(cards)] = [cid[c.name] for c in cards]
        for i, c in enumerate(p.creatures):
            st.crt_tapped[0, s, i], st.crt_sick[0, s, i], st.crt_cmdr[0, s, i] = c.tapped, c.sick, c.is_commander
    st.rng[0] = state.rng.getstate()[1]
    assert core_snapshot(st, 0) == ref_snapshot(state)
    return st


def apply_action(state: GameState, action: int) -> None:
    """The rule on both engines: the core, loaded with ``state``'s position, steps ``action``, the
    object engine applies it, and the core's state must equal the object state after it."""
    st = load_core(state)
    if st.done[0] or not st.legal[0, action]:  # the core refuses it: so must the object engine
        with pytest.raises(IllegalActionError) as refused:
            ref_apply_action(state, action)
        raise refused.value
    core.step(st, TABLES, np.full(1, action, np.int64), np.zeros((1, MAX_POD), np.float32))
    ref_apply_action(state, action)
    assert core_snapshot(st, 0) == ref_snapshot(state)


def blank(pod_size: int = 2, seed: int = 0) -> GameState:
    """A game with empty hands and battlefields, seat 0 to act in main_1 of round 5."""
    st = new_game(seed, pod_size=pod_size)
    for p in st.players:
        p.hand, p.creatures, p.permanents, p.graveyard = [], [], [], []
        p.command_zone = [POOL[p.commander_name]]
        p.life, p.mana, p.mana_sources, p.commander_casts = 40, 0, 0, 0
        p.cmdr_dmg = [0] * pod_size
        p.holding_mana = p.eliminated = False
        p.last_attacker = -1
        p.library = [POOL["Plains"]] * 20
    st.done, st.winner, st.turn = False, None, 5
    set_phase(st, 0, "main_1")
    return st


def set_phase(st: GameState, seat: int, phase: str) -> None:
    st.active_seat = st.current_seat = seat
    st.phase = phase
    st.legal = engine.compute_legal(st)


def perm(name: str, *, commander: bool = False, sick: bool = False, tapped: bool = False) -> Permanent:
    return Permanent(POOL[name], sick=sick, tapped=tapped, is_commander=commander)


def attack(st: GameState, attacker: int, offset: int) -> None:
    set_phase(st, attacker, "combat")
    apply_action(st, attack_action(offset))


# ---------------------------------------------------------------- commander damage and tax


@pytest.mark.parametrize(
    ("prior_same", "prior_other", "eliminated"),
    [(14, 0, True), (0, 14, False), (13, 0, False), (7, 7, False)],
)
def test_commander_damage_single_source(prior_same: int, prior_other: int, eliminated: bool) -> None:
    st = blank(pod_size=3)
    p0, p1 = st.players[0], st.players[1]
    p0.creatures = [perm("Zurgo Helmsmasher", commander=True)]  # 7/2 haste
    p0.command_zone = []
    p1.cmdr_dmg = [prior_same, 0, prior_other]
    attack(st, 0, 1)
    assert p1.cmdr_dmg[0] == prior_same + 7
    assert p1.eliminated is eliminated
    assert p1.life == (40 - 7 if not eliminated else p1.life)


def test_commander_tax_and_return() -> None:
    st = blank()
    p = st.players[0]
    name = p.commander_name
    mv = POOL[name].mana_value
    p.mana_sources = 40
    for casts in range(3):
        p.mana, p.hand = 40, [POOL["Wrath of God"]]
        set_phase(st, 0, "main_1")
        assert p.commander_tax == 2 * casts
        assert decision_record(st)["players"][0]["cmdr_tax"] == 2 * casts
        desc = describe_action(st, CAST_COMMANDER)
        assert desc["type"] == "cast_commander" and desc["card"] == name
        apply_action(st, CAST_COMMANDER)
        assert 40 - p.mana == mv + 2 * casts
        assert [c.card.name for c in p.creatures] == [name] and p.command_zone == []
        assert st.current_seat == 0 and CAST_WIPE in st.legal
        apply_action(st, CAST_WIPE)  # the commander would die: back to the command zone
        assert [c.name for c in p.command_zone] == [name] and name not in [c.name for c in p.graveyard]
    p.mana = mv + p.commander_tax - 1
    set_phase(st, 0, "main_1")
    assert not legal_action_mask(st)[CAST_COMMANDER]


def test_removal_on_commander_returns_it() -> None:
    st = blank()
    p0, p1 = st.players
    p1.creatures = [perm(p1.commander_name, commander=True), perm("Goblin Guide")]
    p1.command_zone = []
    p0.hand, p0.mana = [POOL["Murder"]], 3
    set_phase(st, 0, "main_1")
    desc = describe_action(st, CAST_REMOVAL)
    assert desc["target"] == "seat 1" and p1.commander_name in desc["raw"]
    apply_action(st, CAST_REMOVAL)
    assert [c.name for c in p1.command_zone] == [p1.commander_name]
    assert [c.card.name for c in p1.creatures] == ["Goblin Guide"]


def test_removal_targets_last_attacker_first() -> None:
    st = blank(pod_size=4)
    p0, p1, p2, _ = st.players
    p1.creatures = [perm("Kenrith, the Returned King")]
    p2.creatures = [perm("Goblin Guide")]
    p0.hand, p0.mana = [POOL["Murder"], POOL["Murder"]], 6
    set_phase(st, 0, "main_1")
    assert describe_action(st, CAST_REMOVAL)["target"] == "seat 1"  # nobody attacked: biggest threat
    attack(st, 2, 2)  # seat 2 attacks seat 0
    assert p0.last_attacker == 2
    p0.mana = 6
    set_phase(st, 0, "main_1")
    assert describe_action(st, CAST_REMOVAL)["target"] == "seat 2"
    apply_action(st, CAST_REMOVAL)
    assert not p2.creatures and len(p1.creatures) == 1
    set_phase(st, 0, "main_1")
    assert describe_action(st, CAST_REMOVAL)["target"] == "seat 1"  # seat 2 has no creature left


# ---------------------------------------------------------------- elimination


@pytest.mark.parametrize(("life", "eliminated"), [(2, True), (1, True), (3, False)])
def test_elimination_at_zero_life(life: int, eliminated: bool) -> None:
    st = blank()
    st.players[0].creatures = [perm("Goblin Guide")]  # 2/2 haste
    st.players[1].life = life
    attack(st, 0, 1)
    assert st.players[1].eliminated is eliminated
    assert st.done is eliminated
    if eliminated:
        assert outcome(st) == f"win_seat_{st.players[0].seat}"


def test_empty_library_draw_eliminates() -> None:
    st = blank()
    st.players[1].library = []
    set_phase(st, 0, "main_2")
    apply_action(st, PASS)  # seat 0 ends its turn; seat 1 must draw from an empty library
    assert st.players[1].eliminated and st.done and outcome(st) == "win_seat_0"
    with pytest.raises(IllegalActionError, match="game is over"):
        apply_action(st, PASS)


def test_eliminated_permanents_leave() -> None:
    st = blank(pod_size=3)
    p1 = st.players[1]
    p1.creatures = [perm("Courser of Kruphix", tapped=True)]
    p1.permanents = [perm("Forest"), perm("Sol Ring")]
    p1.life = 2
    st.players[0].creatures = [perm("Goblin Guide")]
    attack(st, 0, 1)
    assert p1.eliminated and not st.done
    rec = decision_record(st)["players"][1]
    assert rec["battlefield"] == [] and rec["creatures"] == 0 and rec["lands"] == 0 and rec["eliminated"]
    assert p1.creatures == [] and p1.permanents == []
    st.players[0].creatures = [perm("Goblin Guide")]
    set_phase(st, 0, "combat")
    mask = legal_action_mask(st)
    assert not mask[attack_action(1)] and mask[attack_action(2)]


def test_turn_cap_draw() -> None:
    st = new_game(3, max_turns=2)
    while not st.done:
        apply_action(st, PASS)
    assert st.winner is None and outcome(st) == "draw" and st.turn == 2


# ---------------------------------------------------------------- determinism and masks


def record_sequence(seed: int, player_seed: int) -> list[str]:
    st = new_game(seed, game_index=1)
    players = [HeuristicPlayer(player_seed + i) if i % 2 else RandomPlayer(player_seed + i) for i in range(4)]
    out = []
    while not st.done:
        action = players[st.current_seat].act(st)
        out.append(json.dumps({**decision_record(st), "action": describe_action(st, action)}))
        ref_apply_action(st, action)
    out.append(outcome(st))
    return out


def test_determinism_by_seed() -> None:
    a, b = record_sequence(11, 5), record_sequence(11, 5)
    assert a == b
    assert record_sequence(12, 5) != a
    assert json.loads(a[0])["game_id"] == "game-1-11"


@pytest.mark.parametrize("pod_size", [2, 4, 6])
def test_actions_inside_mask_and_illegal_raises(pod_size: int) -> None:
    for seed in range(10):
        st = new_game(seed, pod_size=pod_size)
        player = RandomPlayer(seed)
        while not st.done:
            mask = legal_action_mask(st)
            assert mask.shape == (NUM_ACTIONS,) and mask.sum() >= 2
            illegal = [i for i in range(NUM_ACTIONS) if not mask[i]]
            if illegal and seed == 0:
                with pytest.raises(IllegalActionError, match="legal"):
                    ref_apply_action(st, illegal[0])
            action = player.act(st)
            assert mask[action]
            ref_apply_action(st, action)
        assert not legal_action_mask(st).any()


# ---------------------------------------------------------------- hold mana and keywords


@pytest.mark.parametrize(("main_action", "life_after", "attacker_dies"), [(HOLD_MANA, 40, True), (PASS, 36, False)])
def test_hold_mana_instant_removal(main_action: int, life_after: int, attacker_dies: bool) -> None:
    st = blank()
    p0, p1 = st.players
    p1.hand, p1.mana = [POOL["Murder"]], 3  # instant, mana value 3
    p0.creatures = [perm("Serra Angel")]  # 4/4 flying vigilance
    set_phase(st, 1, "main_2")
    assert legal_action_mask(st)[HOLD_MANA]
    apply_action(st, main_action)  # seat 1 ends its turn holding (or not)
    assert st.active_seat == 0 and st.phase == "combat"
    apply_action(st, attack_action(1))
    assert p1.life == life_after
    assert (p0.creatures == []) is attacker_dies
    assert (POOL["Murder"] in p1.graveyard) is attacker_dies


def test_hold_mana_needs_affordable_instant() -> None:
    st = blank()
    p0 = st.players[0]
    p0.hand, p0.mana = [POOL["Murder"]], 2
    set_phase(st, 0, "main_1")
    assert not legal_action_mask(st)[HOLD_MANA]
    p0.mana = 3
    set_phase(st, 0, "main_1")
    assert legal_action_mask(st)[HOLD_MANA]


KEYWORD_CASES = [
    # (keyword, attackers, blockers, defender life, expected defender life, attacker life, dead)
    ("flying", ["Trygon Predator"], ["Courser of Kruphix"], 40, 38, 40, []),
    ("no-flying", ["Kalonian Tusker"], ["Courser of Kruphix"], 40, 40, 40, []),
    ("trample", ["Ghor-Clan Rampager"], ["Eternal Witness"], 3, 0, 40, ["Eternal Witness"]),
    ("no-trample", ["Loxodon Smiter"], ["Eternal Witness"], 3, 3, 40, ["Eternal Witness"]),
    ("deathtouch", ["Loxodon Smiter"], ["Typhoid Rats"], 40, 40, 40, ["Loxodon Smiter", "Typhoid Rats"]),
    ("lifelink", ["Archangel of Thune"], [], 40, 37, 43, []),
]


@pytest.mark.parametrize(("kw", "attackers", "blockers", "life", "life_after", "att_life", "dead"), KEYWORD_CASES)
def test_keyword_combat(kw, attackers, blockers, life, life_after, att_life, dead) -> None:
    st = blank()
    p0, p1 = st.players
    p0.creatures = [perm(n) for n in attackers]
    p1.creatures = [perm(n) for n in blockers]
    p1.life = life
    attack(st, 0, 1)
    assert p1.life == life_after, kw
    assert p0.life == att_life, kw
    graveyards = sorted(c.name for c in p0.graveyard + p1.graveyard)
    assert graveyards == sorted(dead), kw


def test_vigilance_and_tapping() -> None:
    st = blank()
    p0 = st.players[0]
    p0.creatures = [perm("Serra Angel"), perm("Glorybringer")]
    st.players[1].creatures = [perm("Goblin Guide", tapped=True)]  # gives seat 1 a decision next
    attack(st, 0, 1)
    assert st.active_seat == 1 and st.phase == "combat"
    assert [c.tapped for c in p0.creatures] == [False, True]  # vigilance does not tap
    # the tapped attacker cannot block on the opponent's turn; the vigilant one can
    assert st.players[1].life == 40 - 8


def test_haste_and_summoning_sickness() -> None:
    st = blank()
    p0 = st.players[0]
    p0.creatures = [perm("Loxodon Smiter", sick=True)]
    set_phase(st, 0, "combat")
    assert st.legal == [PASS]  # no creature able to attack: no attack offered
    p0.creatures.append(perm("Goblin Guide", sick=True))
    set_phase(st, 0, "combat")
    assert attack_action(1) in st.legal
    apply_action(st, attack_action(1))
    assert st.players[1].life == 38


# ---------------------------------------------------------------- players and data


def test_heuristic_beats_randoms() -> None:
    games, wins = 400, 0
    for g in range(games):
        st = new_game(20_000 + g, game_index=g)
        seat = g % 4
        players = [HeuristicPlayer(g) if i == seat else RandomPlayer(g * 10 + i) for i in range(4)]
        while not st.done:
            ref_apply_action(st, players[st.current_seat].act(st))
        wins += st.winner == seat
    rate = wins / games
    low, high = wilson_interval(wins, games)
    print(f"heuristic vs 3 random: {rate:.3f}, 95% Wilson [{low:.3f}, {high:.3f}] ({games} pods; chance = 0.25)")
    # Project target: >= 0.60, NOT reached (0.42-0.50 across seed sets; bench/teacher_vs_random.py and
    # docs/measurements.md). Asserted: the Wilson lower bound is well above chance (0.25).
    assert low >= 0.35


def test_data_validation(tmp_path) -> None:
    decks = load_decks()
    assert {d.archetype for d in decks.values()} >= {"aggro", "midrange", "control", "ramp"}
    assert all(len(d.cards) == 99 for d in decks.values())
    bad_cards = tmp_path / "cards.yaml"
    bad_cards.write_text("cards:\n  - {name: Foo, kind: sorcery}\n")
    with pytest.raises(ValueError, match=r"cards\.yaml: cards\[0\] \('Foo'\): kind"):
        load_card_pool(bad_cards)
    bad_decks = tmp_path / "decks.yaml"
    bad_decks.write_text(
        "decks:\n  - {name: D, archetype: aggro, commander: Zurgo Helmsmasher, cards: {Mountain: 98, Nope: 1}}\n"
    )
    with pytest.raises(ValueError, match=r"decks\[0\] \('D'\): unknown card name 'Nope'"):
        load_decks(bad_decks)
    bad_decks.write_text("decks:\n  - {name: D, archetype: aggro, commander: Zurgo Helmsmasher, cards: {Mountain: 98}}\n")
    with pytest.raises(ValueError, match="98 cards, expected 99"):
        load_decks(bad_decks)
