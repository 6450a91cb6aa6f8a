"""The batched core (``ml.game.commander.core``) agrees with the object engine, decision by decision.

From the same seed (the core carries Python's Mersenne Twister, so it deals the same game)
and the same actions, both give identical states (every zone, in order, every counter and
flag), legal masks, observations (``np.array_equal`` on float32), per-step rewards (the
PettingZoo env's), scripted choices (heuristic and random seats, their generators included),
decision records and results. Seats are a seeded mix of heuristic, random and "external"
(uniform over the legal mask, drawn by the test) players; pods of 2 to 6, every deck, round
caps from 2 to 30, so that wipes, commander-damage eliminations, decking and the turn cap all
occur (asserted).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pytest

from ml.game.commander import core
from ml.game.commander.actions import CAST_WIPE, MAX_POD
from ml.game.commander.features import PHASES
from ml.game.commander.reference import rules
from ml.game.commander.reference.players import HeuristicPlayer, RandomPlayer
from ml.game.commander.reference.reference_env import ReferencePodEnv
from ml.game.commander.reference.state import GameState

ROOT = Path(__file__).resolve().parents[1]
TABLES = core.load_tables()

pytestmark = pytest.mark.xdist_group("numba-core")  # one worker compiles the kernels once (numba cache)


def ref_snapshot(state: GameState) -> dict:
    """Every field of the object state that the core holds, with cards as ids."""
    cid = TABLES.card_id
    out: dict = {
        "turn": state.turn, "phase": PHASES.index(state.phase), "active": state.active_seat, "done": state.done,
        "winner": -1 if state.winner is None else state.winner, "elim": list(state.elimination_order),
        "legal": sorted(state.legal),
    }  # fmt: skip
    for p in state.players:
        out[p.seat] = {
            "deck": TABLES.deck_names.index(p.deck_name), "life": p.life, "mana": p.mana, "sources": p.mana_sources,
            "casts": p.commander_casts, "cmdr_dmg": list(p.cmdr_dmg), "eliminated": p.eliminated,
            "holding": p.holding_mana, "in_cz": bool(p.command_zone), "last_attacker": p.last_attacker,
            "lib": [cid[c.name] for c in p.library], "hand": [cid[c.name] for c in p.hand],
            "grave": [cid[c.name] for c in p.graveyard], "perm": [cid[c.card.name] for c in p.permanents],
            "crt": [(cid[c.card.name], c.tapped, c.sick, c.is_commander) for c in p.creatures],
        }  # fmt: skip
    return out


def core_snapshot(st: core.CoreState, g: int) -> dict:
    """The same fields from the core's arrays."""
    out: dict = {
        "turn": int(st.turn[g]), "phase": int(st.phase[g]), "active": int(st.active[g]), "done": bool(st.done[g]),
        "winner": int(st.winner[g]), "elim": [int(x) for x in st.elim_order[g, : st.elim_n[g]]],
        "legal": [int(a) for a in np.flatnonzero(st.legal[g])],
    }  # fmt: skip
    n = int(st.pod[g])
    for s in range(n):
        k = int(st.crt_n[g, s])
        out[s] = {
            "deck": int(st.deck[g, s]), "life": int(st.life[g, s]), "mana": int(st.mana[g, s]),
            "sources": int(st.mana_sources[g, s]), "casts": int(st.casts[g, s]),
            "cmdr_dmg": [int(x) for x in st.cmdr_dmg[g, s, :n]], "eliminated": bool(st.eliminated[g, s]),
            "holding": bool(st.holding[g, s]), "in_cz": bool(st.in_cz[g, s]), "last_attacker": int(st.last_attacker[g, s]),
            "lib": st.lib[g, s, : st.lib_n[g, s]].tolist(), "hand": st.hand[g, s, : st.hand_n[g, s]].tolist(),
            "grave": st.grave[g, s, : st.grave_n[g, s]].tolist(), "perm": st.perm[g, s, : st.perm_n[g, s]].tolist(),
            "crt": [(int(st.crt[g, s, i]), bool(st.crt_tapped[g, s, i]), bool(st.crt_sick[g, s, i]), bool(st.crt_cmdr[g, s, i]))
                    for i in range(k)],
        }  # fmt: skip
    return out


def _first_difference(a: dict, b: dict) -> str:
    for key in a:
        if a[key] != b.get(key):
            if isinstance(a[key], dict):
                return f"seat {key}: " + _first_difference(a[key], b[key])
            return f"{key}: reference {a[key]} core {b.get(key)}"
    return "keys differ"


def assert_states_agree(envs: list[ReferencePodEnv], st: core.CoreState, games: Iterable[int]) -> None:
    """The object state of each of ``games`` equals the core's, field by field."""
    for g in games:
        ref, mine = ref_snapshot(envs[g].state), core_snapshot(st, g)
        assert ref == mine, f"game {g} after {st.decisions[g]} decisions: {_first_difference(ref, mine)}"


def play_agreement(n_games: int, seed: int, record_every: int = 7, observe_every: int = 1) -> Counter:
    """Play ``n_games`` through the env (reference) and the core side by side, asserting agreement
    of the states (legal moves included), scripted choices and rewards after every decision, of
    the observation and action mask at every ``observe_every``-th decision of a game and of the
    decision record at every ``record_every``-th. Returns counts of what happened (decisions,
    observations, wipes, outcomes, decks)."""
    rng = np.random.default_rng(seed)
    seeds = rng.choice(2**31 - 1, size=n_games, replace=False).astype(np.int64)
    pods = rng.integers(2, MAX_POD + 1, size=n_games)
    caps = np.where(rng.random(n_games) < 0.25, rng.integers(2, 9, size=n_games), 30)
    kinds = rng.choice([core.SEAT_EXTERNAL, core.SEAT_HEURISTIC, core.SEAT_RANDOM], p=[0.2, 0.6, 0.2], size=(n_games, MAX_POD))
    pseeds = seeds[:, None] * 7 + np.arange(MAX_POD)[None, :]
    envs, players = [], []
    for g in range(n_games):
        env = ReferencePodEnv(pod_size=int(pods[g]), max_turns=int(caps[g]))
        env.reset(seed=int(seeds[g]))
        envs.append(env)
        players.append([HeuristicPlayer(int(pseeds[g, s])) if kinds[g, s] == core.SEAT_HEURISTIC else
                        RandomPlayer(int(pseeds[g, s])) if kinds[g, s] == core.SEAT_RANDOM else None
                        for s in range(MAX_POD)])  # fmt: skip
    st = core.new_state(n_games)
    core.reset(st, TABLES, seeds, pods, caps, game_index=np.zeros(n_games, np.int64), seat_kind=kinds, player_seeds=pseeds)
    obs = np.zeros((n_games, core.OBS_DIM), np.float32)
    rewards = np.zeros((n_games, MAX_POD), np.float32)
    chosen = np.zeros(n_games, np.int64)
    seen: Counter = Counter()
    for g in range(n_games):
        seen.update(f"deck {d}" for d in st.deck[g, : pods[g]])
        seen[f"pod {pods[g]}"] += 1
    stepped: Iterable[int] = range(n_games)
    while True:
        live = [g for g in range(n_games) if not envs[g].state.done]
        assert_states_agree(envs, st, stepped)  # every game the last step moved, one it ended included
        if not live:
            break
        stepped = live
        core.encode(st, TABLES, np.where(st.done, -1, st.active).astype(np.int64), obs)
        core.choose_scripted(st, TABLES, chosen)
        actions = np.full(n_games, -1, np.int64)
        for g in live:
            env, state = envs[g], envs[g].state
            seat = state.current_seat
            seen["decisions"] += 1
            assert env.agent_selection == f"player_{seat}"
            if st.decisions[g] % observe_every == 0:  # the reference's observe is half the test's time
                observed = env.observe(env.agent_selection)
                assert np.array_equal(observed["action_mask"].astype(bool), st.legal[g]), f"game {g}: masks differ"
                if not np.array_equal(observed["observation"], obs[g]):
                    bad = np.flatnonzero(observed["observation"] != obs[g])
                    raise AssertionError(f"game {g} decision {st.decisions[g]}: observations differ at {bad.tolist()}: "
                                         f"{observed['observation'][bad].tolist()} vs {obs[g][bad].tolist()}")  # fmt: skip
                seen["observations"] += 1
            if st.decisions[g] % record_every == 0:
                assert rules.decision_record(state) == core.decision_record(st, TABLES, g), f"game {g}: records differ"
                seen["records"] += 1
            player = players[g][seat]
            if player is None:
                action = int(rng.choice(state.legal))
                assert chosen[g] == -1
            else:
                action = player.act(state)
                assert chosen[g] == action, f"game {g}: scripted choice {chosen[g]}, reference {action}"
                seen["scripted"] += 1
            seen["wipes"] += action == CAST_WIPE
            actions[g] = action
            env.step(action)
            step_rewards = np.zeros(MAX_POD, np.float32)
            for agent, r in env.rewards.items():
                step_rewards[env.agent_name_mapping[agent]] = r
            actions[g] = action
            while env.agents and (env.terminations[env.agent_selection] or env.truncations[env.agent_selection]):
                env.step(None)
            rewards[g] = step_rewards  # compared after the core's step
        expected = rewards.copy()
        core.apply_actions(st, TABLES, actions, rewards)
        for g in live:
            assert np.array_equal(rewards[g], expected[g]), f"game {g}: rewards {rewards[g]} vs {expected[g]}"
    assert_states_agree(envs, st, range(n_games))  # a finished game stayed as it ended while the others played on
    for g, env in enumerate(envs):
        state = env.state
        if state.winner is None:
            seen["turn cap"] += 1
        by_cmdr = any(max(p.cmdr_dmg) >= 21 for p in state.players if p.eliminated)
        seen["commander kill"] += by_cmdr
        seen["decked"] += any(p.eliminated and not p.library for p in state.players)
        assert int(st.winner[g]) == (-1 if state.winner is None else state.winner)
    return seen


def _assert_coverage(seen: Counter) -> None:
    for what in ("wipes", "turn cap", "commander kill", "records", "observations", "scripted"):
        assert seen[what] > 0, f"no game reached: {what} ({dict(seen)})"
    for d in range(len(TABLES.deck_names)):
        assert seen[f"deck {d}"] > 0
    for n in range(2, MAX_POD + 1):
        assert seen[f"pod {n}"] > 0


def test_core_agrees_with_the_object_engine_300_games():
    seen = play_agreement(300, seed=1)
    _assert_coverage(seen)


@pytest.mark.expensive
def test_core_agrees_with_the_object_engine_2000_games():
    seen = play_agreement(2000, seed=2, record_every=3, observe_every=3)  # every observation: the 300 games
    _assert_coverage(seen)


def test_scripted_seats_play_inside_step_as_the_reference_plays():
    """All-scripted pods run to the end inside one ``step`` call, reaching the reference's final states."""
    n = 60
    rng = np.random.default_rng(5)
    seeds = rng.choice(2**31 - 1, size=n, replace=False).astype(np.int64)
    pods = rng.integers(2, MAX_POD + 1, size=n)
    kinds = np.where(rng.random((n, MAX_POD)) < 0.8, core.SEAT_HEURISTIC, core.SEAT_RANDOM).astype(np.int8)
    pseeds = seeds[:, None] * 7 + np.arange(MAX_POD)[None, :]
    st = core.new_state(n)
    core.reset(st, TABLES, seeds, pods, 30, seat_kind=kinds, player_seeds=pseeds)
    rewards = np.zeros((n, MAX_POD), np.float32)
    decisions = core.step(st, TABLES, np.full(n, -1), rewards)
    assert st.done.all()
    total = 0
    for g in range(n):
        state = rules.new_game(int(seeds[g]), int(pods[g]), 30, g)
        ps = [
            (HeuristicPlayer if kinds[g, s] == core.SEAT_HEURISTIC else RandomPlayer)(int(pseeds[g, s]))
            for s in range(MAX_POD)
        ]
        while not state.done:
            rules.apply_action(state, ps[state.current_seat].act(state))
            total += 1
        assert ref_snapshot(state) == core_snapshot(st, g)
        loss = -1.0 / (pods[g] - 1)
        for s in range(pods[g]):
            expected = 1.0 if s == state.winner else loss if state.players[s].eliminated else None
            if expected is not None:
                assert rewards[g, s] == np.float32(expected)
        assert abs(float(rewards[g, : pods[g]].sum())) < 1e-5
    assert decisions == total == int(st.decisions.sum())


def test_given_decks_deal_as_new_game_with_deck_names():
    n = 12
    seeds = np.arange(100, 100 + n, dtype=np.int64)
    choice = np.full((n, MAX_POD), -1, np.int64)
    pods = np.array([2, 3, 4, 5, 6, 6] * 2)
    rng = np.random.default_rng(0)
    for g in range(n):
        choice[g, : pods[g]] = rng.integers(0, len(TABLES.deck_names), size=pods[g])
    st = core.new_state(n)
    core.reset(st, TABLES, seeds, pods, 30, deck_choice=choice)
    for g in range(n):
        names = [TABLES.deck_names[d] for d in choice[g, : pods[g]]]
        state = rules.new_game(int(seeds[g]), int(pods[g]), 30, g, deck_names=names)
        assert ref_snapshot(state) == core_snapshot(st, g)
        assert rules.decision_record(state) == core.decision_record(st, TABLES, g)


def test_every_form_of_a_per_game_argument_deals_the_same_games():
    """``core.reset`` takes a C-contiguous int64 array as it is and converts every other form (a
    scalar, a numpy scalar, a list, a strided or read-only array): the same deal each way, the
    caller's array unchanged, and a value out of range refused whatever its form."""
    n = 4
    seeds = np.arange(20, 20 + n, dtype=np.int64)

    def dealt(seed_arg: object, pods: object) -> list[dict[str, object]]:
        st = core.new_state(n)
        core.reset(st, TABLES, seed_arg, pods, 30)  # type: ignore[arg-type]
        return [core_snapshot(st, g) for g in range(n)]

    want = [ref_snapshot(rules.new_game(int(seeds[g]), 4, 30, g)) for g in range(n)]
    strided = np.arange(20, 20 + 2 * n, dtype=np.int64)[::2] - np.arange(n)  # 20..23 again, as a copy
    view = np.repeat(seeds, 2)[::2]  # a strided view: not C-contiguous
    frozen = seeds.copy()
    frozen.flags.writeable = False
    for seed_arg, pods in ((seeds, 4), (seeds.tolist(), np.int64(4)), (view, np.full(n, 4, np.int8)),
                           (frozen, [4] * n), (strided, np.full(n, 4)), (seeds.astype(np.int32), 4)):  # fmt: skip
        assert dealt(seed_arg, pods) == want
    assert seeds.tolist() == [20, 21, 22, 23]
    for pods in (1, 7, np.int64(7), [4, 4, 4, 9], np.array([4, 4, 1, 4])):
        with pytest.raises(ValueError, match="pod_size must be in 2"):
            dealt(seeds, pods)
    with pytest.raises(ValueError, match=r"seeds must be a scalar or shape \(4,\)"):
        dealt(np.arange(3), 4)


def test_illegal_action_is_refused():
    st = core.new_state(1)
    kinds = np.array([[core.SEAT_HEURISTIC, core.SEAT_EXTERNAL, core.SEAT_RANDOM, core.SEAT_HEURISTIC, 0, 0]], np.int8)
    core.reset(st, TABLES, np.array([3]), 4, 30, seat_kind=kinds)
    illegal = int(np.flatnonzero(~st.legal[0])[0])
    with pytest.raises(ValueError, match="legal mask"):
        core.apply_actions(st, TABLES, np.array([illegal]), np.zeros((1, MAX_POD), np.float32))
    assert st.decisions[0] == 0
    assert np.array_equal(st.seat_kind, kinds)  # the step ran with every seat external, then the kinds came back


def test_apply_actions_plays_one_decision_of_a_scripted_seat_and_stops():
    st = core.new_state(2)
    kinds = np.full((2, MAX_POD), core.SEAT_HEURISTIC, np.int8)
    core.reset(st, TABLES, np.array([5, 6]), 4, 30, seat_kind=kinds, player_seeds=np.arange(2 * MAX_POD).reshape(2, MAX_POD))
    chosen = core.choose_scripted(st, TABLES, np.zeros(2, np.int64))
    rewards = np.zeros((2, MAX_POD), np.float32)
    core.apply_actions(st, TABLES, np.array([chosen[0], -1]), rewards)
    assert st.decisions.tolist() == [1, 0] and np.array_equal(st.seat_kind, kinds)
    assert core.step(st, TABLES, np.full(2, -1, np.int64), rewards) > 1  # scripted seats still play in step


def test_encode_checks_its_buffer():
    st = core.new_state(2)
    core.reset(st, TABLES, np.array([1, 2]), 4, 30)
    with pytest.raises(ValueError, match="float32"):
        core.encode(st, TABLES, np.zeros(2, np.int64), np.zeros((2, core.OBS_DIM), np.float64))


def test_the_encoders_call_chain_is_inlined():
    """Every function the encoder calls is inlined into ``encode_kernel``: with kernels in the chain,
    numba's cached code ran it 2x slower than fresh code (docs/measurements.md). The rules call
    ``combat``, one compiled function."""
    from ml.game.commander.core import kernels

    if not hasattr(kernels.combat, "targetoptions"):
        pytest.skip("numba's JIT is disabled")
    chain = (kernels.encode_one, kernels._encode_seat, kernels._encode_previews, kernels._encode_hand,
             kernels._combat, kernels._plan_blocks, kernels._lost_values, kernels._gather_ready, kernels._gather_kept)  # fmt: skip
    for f in chain:
        assert f.targetoptions.get("inline") == "always", f.py_func.__name__
    assert kernels.combat.targetoptions.get("inline", "never") == "never"


def test_the_rules_chain_of_a_decision_is_inlined_into_the_step():
    """What ``step_kernel`` runs per decision is inlined into it (a call that is not passes the
    39-array state by value, about 150 ns; inlined, the rules-only bench ran 1.9x faster), and
    ``_apply`` and ``scripted_action`` are called from one place in it (each place is a copy to
    compile: 81 s cold with two against 59 s with one)."""
    import inspect

    from ml.game.commander.core import kernels

    if not hasattr(kernels.combat, "targetoptions"):
        pytest.skip("numba's JIT is disabled")
    chain = (kernels.scripted_action, kernels._heuristic_main, kernels._heuristic_combat, kernels._threatened,
             kernels._behind, kernels.choose_card, kernels._apply, kernels._cast, kernels._attack, kernels._advance,
             kernels._compute_legal, kernels._end_turn, kernels._after_pass, kernels._rewards, kernels._check)  # fmt: skip
    for f in chain:
        assert f.targetoptions.get("inline") == "always", f.py_func.__name__
    body = inspect.getsource(kernels.step_kernel.py_func)
    assert body.count("_apply(") == 1 and body.count("scripted_action(") == 1


def _plain_python_kernels():
    """``kernels.py`` loaded again with numba's JIT off (``njit`` then returns the plain functions)."""
    import importlib.util

    import numba

    spec = importlib.util.spec_from_file_location("_plain_kernels", ROOT / "ml/game/commander/core/kernels.py")
    module = importlib.util.module_from_spec(spec)
    saved = numba.config.DISABLE_JIT
    numba.config.DISABLE_JIT = True
    try:
        spec.loader.exec_module(module)
    finally:
        numba.config.DISABLE_JIT = saved
    assert not hasattr(module.step_kernel, "py_func")
    return module


def test_plain_python_kernels_equal_the_compiled_ones():
    """The kernels run as plain Python (what ``NUMBA_DISABLE_JIT=1`` gives) reach the compiled run's arrays and observations."""
    from ml.game.commander.core import kernels

    plain = _plain_python_kernels()
    n = 3
    seeds = np.array([11, 12, 13], np.int64)
    args = (np.ones(n, bool), seeds, np.arange(n), np.array([2, 4, 6]), np.full(n, 30), np.full((n, MAX_POD), -1),
            seeds[:, None] * 7 + np.arange(MAX_POD)[None, :], np.ones((n, MAX_POD), np.int8))  # fmt: skip
    results = []
    for k in (kernels, plain):
        st = k.allocate(n)
        tables = k.Tables(*TABLES.nb)
        k.reset_kernel(st, tables, k.Deal(*args), core.scratch())
        k.step_kernel(st, tables, np.full(n, -1), np.zeros((n, MAX_POD), np.float32), core.scratch())
        obs = np.zeros((n, core.OBS_DIM), np.float32)
        k.encode_kernel(st, tables, k.NO_RECORD, np.zeros(n, np.int64), obs, core.scratch())
        results.append((st, obs))
    (a, obs_a), (b, obs_b) = results
    assert a.decisions.sum() > 50 and a.done.all()
    for name, x, y in zip(a._fields, a, b, strict=True):
        assert np.array_equal(x, y), name
    assert np.array_equal(obs_a, obs_b)


_DIGEST = """
import hashlib, numpy as np
from ml.game.commander import core
t = core.load_tables(); n = 6
st = core.new_state(n)
seeds = np.arange(7, 7 + n, dtype=np.int64)
core.reset(st, t, seeds, np.array([2, 3, 4, 5, 6, 4]), 30, seat_kind=np.ones((n, 6), np.int8), player_seeds=np.arange(n * 6).reshape(n, 6))
core.step(st, t, np.full(n, -1), np.zeros((n, 6), np.float32))
obs = np.zeros((n, core.OBS_DIM), np.float32)
core.encode(st, t, np.zeros(n, np.int64), obs)
h = hashlib.sha256()
for a in st:
    h.update(np.ascontiguousarray(a).tobytes())
h.update(obs.tobytes())
print(h.hexdigest(), int(st.decisions.sum()))
"""


@pytest.mark.expensive
def test_plain_python_run_equals_the_compiled_run():
    """``NUMBA_DISABLE_JIT=1`` runs the same kernels as plain Python: same final arrays and observations."""
    out = {}
    for jit in ("0", "1"):
        env = {**os.environ, "NUMBA_DISABLE_JIT": jit, "PYTHONHASHSEED": "0"}
        proc = subprocess.run([sys.executable, "-c", _DIGEST], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr[-2000:]
        out[jit] = proc.stdout.split()
    assert out["0"] == out["1"]
    assert int(out["0"][1]) > 100


def test_drawing_from_an_empty_library_eliminates_as_in_the_reference():
    """Libraries cut to their top few cards in both engines: seats deck out, identically."""
    n = 20
    seeds = np.arange(500, 500 + n, dtype=np.int64)
    pods = np.array([2, 3, 4, 5, 6] * 4)
    kinds = np.ones((n, MAX_POD), np.int8)
    pseeds = seeds[:, None] * 7 + np.arange(MAX_POD)[None, :]
    st = core.new_state(n)
    core.reset(st, TABLES, seeds, pods, 30, seat_kind=kinds, player_seeds=pseeds)
    refs = []
    for g in range(n):
        state = rules.new_game(int(seeds[g]), int(pods[g]), 30, g)
        for s, p in enumerate(state.players):
            keep = 1 + (g + s) % 4
            p.library = p.library[-keep:]
            top = st.lib[g, s, st.lib_n[g, s] - keep : st.lib_n[g, s]].copy()
            st.lib[g, s, :keep] = top
            st.lib_n[g, s] = keep
        assert ref_snapshot(state) == core_snapshot(st, g)
        refs.append(state)
    core.step(st, TABLES, np.full(n, -1), np.zeros((n, MAX_POD), np.float32))
    decked = 0
    for g, state in enumerate(refs):
        ps = [HeuristicPlayer(int(pseeds[g, s])) for s in range(MAX_POD)]
        while not state.done:
            rules.apply_action(state, ps[state.current_seat].act(state))
        assert ref_snapshot(state) == core_snapshot(st, g), _first_difference(ref_snapshot(state), core_snapshot(st, g))
        decked += sum(p.eliminated and not p.library for p in state.players)
    assert decked > 0


def test_first_core_game_of_a_process_logs_the_kernels_load(caplog, monkeypatch):
    from ml.game.commander.core import warmup
    from ml.game.commander.core.game import CoreGame

    monkeypatch.setattr(warmup, "_DONE", [])  # as in a fresh process
    caplog.set_level("INFO", logger=warmup.__name__)
    CoreGame(2, 4, 30)
    CoreGame(3, 4, 30)
    lines = [r.getMessage() for r in caplog.records if r.name == warmup.__name__]
    assert len(lines) == 1 and lines[0].startswith("commander core: kernels "), lines


@pytest.mark.parametrize("cold", [True, False])
def test_a_long_warm_up_says_what_it_does_every_interval(cold, caplog, monkeypatch):
    """Issue #42, item 2: a first run on a fresh clone was silent for the minute numba compiled the core."""
    from ml.base import progress
    from ml.game.commander.core import warmup

    monkeypatch.setattr(progress, "HEARTBEAT_EVERY_S", 0.05)
    monkeypatch.setattr(warmup, "cold", lambda: cold)
    monkeypatch.setattr(warmup, "_take_compile_lock", lambda: None)
    monkeypatch.setattr(warmup, "_start_observation_side", lambda: None)
    caplog.set_level("INFO", logger=warmup.__name__)

    def slow_sides(helper: object) -> None:  # a compile that takes three lines' time (a minute at most)
        deadline = time.monotonic() + 60.0
        while len(caplog.records) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)

    monkeypatch.setattr(warmup, "_run_sides", slow_sides)
    warmup.run_kernels()
    said = [r.getMessage() for r in caplog.records]
    doing = "compiling the kernels once (numba; cached in" if cold else "loading the kernels (numba's cache:"
    assert len(said) >= 3 and all(line.startswith(f"commander core: {doing} {warmup.cache_path()}") for line in said), said
    assert all(re.search(r": \d+s elapsed \.\.\.$", line) for line in said), said
    time.sleep(0.2)
    assert len(caplog.records) == len(said)  # none after the warm-up


def test_a_long_wait_for_another_compile_says_so_every_interval(caplog, monkeypatch):
    from filelock import Timeout

    from ml.base import progress
    from ml.game.commander.core import warmup

    class HeldLock:  # another process compiles for three lines' time
        lock_file = "/tmp/held.lock"

        def acquire(self, timeout: float) -> None:
            if timeout == 0:
                raise Timeout(self.lock_file)
            deadline = time.monotonic() + 60.0
            while len(caplog.records) < 4 and time.monotonic() < deadline:
                time.sleep(0.01)

    monkeypatch.setattr(progress, "HEARTBEAT_EVERY_S", 0.05)
    monkeypatch.setattr(warmup, "compile_lock", HeldLock)
    caplog.set_level("INFO", logger=warmup.__name__)
    warmup._take_compile_lock()
    said = [r.getMessage() for r in caplog.records]
    waiting = "commander core: waiting for another process compiling the kernels (/tmp/held.lock)"
    assert said[0] == waiting and said[-1].startswith("commander core: the other process's compile ended after "), said
    assert len(said) >= 5 and all(re.fullmatch(re.escape(waiting) + r": \d+s elapsed \.\.\.", s) for s in said[1:-1])


def _cold_in_a_fresh_process(env: dict[str, str]) -> bool:
    code = "from ml.game.commander.core.warmup import cold; print(cold())"
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, **env}, capture_output=True, text=True, check=True)
    return {"True": True, "False": False}[out.stdout.split()[-1]]


@pytest.mark.expensive
def test_a_cold_cache_is_told_from_a_warm_one(tmp_path):
    from tests.conftest import warm_core_cache

    warm_core_cache()
    assert _cold_in_a_fresh_process({"NUMBA_CACHE_DIR": str(tmp_path)}) is True  # an empty cache
    assert _cold_in_a_fresh_process({}) is False  # this checkout's cache, filled by warm_core_cache
    from ml.game.commander.core import warmup

    assert warmup.cold() is False  # compiled or loaded in this process
    assert _cold_in_a_fresh_process({"NUMBA_DISABLE_JIT": "1"}) is False  # no cache to fill: one process


@pytest.mark.expensive
def test_a_cold_warm_up_compiles_the_observation_side_in_a_second_process(tmp_path, monkeypatch, caplog):
    from ml.game.commander import core as core_pkg
    from ml.game.commander.core import warmup

    seen = tmp_path / "child.txt"
    child = f"import pathlib, ml.game.commander.core as c; pathlib.Path({str(seen)!r}).write_text(c.__file__)"
    monkeypatch.setattr(warmup, "cold", lambda: True)
    monkeypatch.setattr(warmup, "_OBSERVATION_SIDE", child)
    monkeypatch.chdir(tmp_path)  # the child finds this process's ``ml``, not one in its working directory
    warmup.run_kernels()
    assert Path(seen.read_text()).resolve() == Path(core_pkg.__file__).resolve()  # the same source: the same cache

    monkeypatch.setattr(warmup, "_OBSERVATION_SIDE", "raise SystemExit('no room for the cache')")
    caplog.set_level("WARNING", logger=warmup.__name__)
    warmup.run_kernels()  # the kernels still run (here: already compiled)
    assert [r.getMessage() for r in caplog.records] == [
        "commander core: the second compile process failed (no room for the cache); compiling here"
    ]


_HOLD = (
    "import pathlib, sys, time; from filelock import FileLock; lock = FileLock(sys.argv[1]); lock.acquire(); "
    "print('held', flush=True); time.sleep(float(sys.argv[2])); pathlib.Path(sys.argv[1] + '.done').touch(); lock.release()"
)  # another process compiling: holds the lock for argv[2] seconds, marks that it is done, lets go


@pytest.mark.expensive
def test_a_cold_warm_up_waits_for_another_process_compiling_into_the_same_cache(tmp_path, monkeypatch, caplog):
    from filelock import FileLock

    from ml.game.commander.core import warmup

    lock = FileLock(str(tmp_path / "compile.lock"))
    monkeypatch.setattr(warmup, "compile_lock", lambda: lock)
    helpers: list[int] = []
    monkeypatch.setattr(warmup, "_start_observation_side", lambda: helpers.append(1))
    caplog.set_level("INFO", logger=warmup.__name__)

    def hold(seconds: float) -> subprocess.Popen[str]:
        holder = subprocess.Popen(
            [sys.executable, "-c", _HOLD, lock.lock_file, str(seconds)], stdout=subprocess.PIPE, text=True
        )
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        return holder

    holder = hold(1.5)
    colds = iter([True, False])  # cold at the start; filled by the holder by the time it lets go
    monkeypatch.setattr(warmup, "cold", lambda: next(colds))
    warmup.run_kernels()
    assert Path(lock.lock_file + ".done").exists()  # it ran on only once the holder had let go
    holder.wait()
    assert helpers == []  # nothing left to compile: no second process
    said = [r.getMessage() for r in caplog.records]
    assert said[0] == f"commander core: waiting for another process compiling the kernels ({lock.lock_file})"
    assert len(said) == 2 and said[1].startswith("commander core: the other process's compile ended after "), said
    assert not lock.is_locked

    caplog.clear()
    holder = hold(60)  # a holder that does not let go in time: this process compiles after the wait
    monkeypatch.setattr(warmup, "cold", lambda: True)
    monkeypatch.setattr(warmup, "LOCK_WAIT_S", 0.3)
    try:
        warmup.run_kernels()
        assert holder.poll() is None and helpers == [1]
    finally:
        holder.kill()
        holder.wait()
    assert caplog.records[-1].levelname == "WARNING"
    assert caplog.records[-1].getMessage() == f"commander core: no compile lock after 0 s ({lock.lock_file}); compiling here"

    caplog.clear()
    warmup.run_kernels()  # cold, nobody holding the lock: this process takes it, compiles with a second process
    assert helpers == [1, 1] and caplog.records == [] and not lock.is_locked

    (tmp_path / "not-a-file").mkdir()
    monkeypatch.setattr(warmup, "compile_lock", lambda: FileLock(str(tmp_path / "not-a-file")))
    warmup.run_kernels()  # a lock file it cannot open: a warning, and it compiles
    assert helpers == [1, 1, 1]
    (said,) = [r.getMessage() for r in caplog.records]
    assert said.startswith("commander core: compiling without the compile lock (") and "not-a-file" in said, said


@pytest.mark.expensive
def test_the_compile_lock_is_one_per_numba_cache(tmp_path):
    from ml.game.commander.core import warmup

    code = "from ml.game.commander.core.warmup import compile_lock; print(compile_lock().lock_file)"

    def lock_file(env: dict[str, str], cwd: Path | None = None) -> str:
        out = subprocess.run(
            [sys.executable, "-c", code], env={**os.environ, **env}, cwd=cwd, capture_output=True, text=True, check=True
        )
        return out.stdout.split()[-1]

    here = warmup.compile_lock().lock_file
    assert lock_file({}) == here  # another process on this checkout's cache: the same lock
    assert lock_file({"NUMBA_CACHE_DIR": str(tmp_path)}) != here  # another cache: another lock
    relative = lock_file({"NUMBA_CACHE_DIR": "cache"}, cwd=tmp_path)
    assert relative == lock_file({"NUMBA_CACHE_DIR": str(tmp_path / "cache")})  # the folder, however it is named


def test_warm_up_line_says_compiled_or_loaded():
    from ml.game.commander.core import kernels
    from ml.game.commander.core.warmup import WarmUp

    cold, warm = WarmUp(71.5, 5, 0).describe(), WarmUp(2.3, 0, 5).describe()
    assert (
        cold
        == f"commander core: kernels compiled in 71.5 s (first run; cached in {kernels.step_kernel.stats.cache_path} for the next)"
    )
    assert warm == "commander core: kernels loaded from numba's cache in 2.3 s"
