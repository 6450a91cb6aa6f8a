"""Tests of ``ml.game.commander.env.CommanderPodEnv`` (the PettingZoo AEC view of one core game).

Checks:
* ``pettingzoo.test.api_test`` and ``seed_test`` pass (2- and 4-seat pods; 6 with the core's encoder);
* rewards sum to 0 over a game won by one seat and over a turn-cap draw, and the winner
  gets +1 while the others get -1/(n-1);
* every decision record has the Forge keys in Forge's order, a 0/1 ``action_mask`` equal to
  the observation's mask, and serialises to JSON; ``describe_action`` gives the action object;
* the view agrees with the object engine's ``ReferencePodEnv`` step for step (observations of
  every agent, masks, rewards, terminations, truncations, infos, records, results, game ids of
  seedless resets), and its ``scripted_action`` chooses as the object players do.

A tiny stand-in encoder (reading records) is used where the encoding does not matter.
"""

from __future__ import annotations

import json
import random
import re

import numpy as np
import pytest
from pettingzoo.test import api_test, seed_test

from ml.game.commander.actions import MACRO_ACTIONS, MAX_POD, NUM_ACTIONS, IllegalActionError
from ml.game.commander.env import CommanderPodEnv
from ml.game.commander.reference.players import HeuristicPlayer, RandomPlayer
from ml.game.commander.reference.reference_env import ReferencePodEnv
from ml.game.protocol import PLAYER_SEED_STRIDE

FORGE_KEYS = [
    "game_id",
    "turn",
    "phase",
    "active_seat",
    "game_outcome",
    "deck_name",
    "commander",
    "archetype",
    "players",
]
PLAYER_KEYS = ["seat", "life", "cmdr_dmg", "mana", "cmdr_tax", "creatures", "lands"]
PLAYER_KEYS += ["hand", "battlefield", "graveyard", "command_zone"]


class TinyEncoder:
    """Stand-in encoder: a few public numbers per seat, float32[obs_dim]."""

    obs_dim = 2 + 4 * 6

    def __call__(self, record: dict) -> np.ndarray:
        out = np.zeros(self.obs_dim, dtype=np.float32)
        out[0] = record["turn"] / 30.0
        out[1] = 1.0
        for i, p in enumerate(record["players"]):
            out[2 + 4 * i : 6 + 4 * i] = (p["life"] / 40.0, p["creatures"], p["mana"], len(p["hand"]))
        return out


def make_env(pod_size: int = 4, max_turns: int = 30) -> CommanderPodEnv:
    return CommanderPodEnv(pod_size=pod_size, max_turns=max_turns, encoder=TinyEncoder())


@pytest.mark.parametrize("pod_size", [2, 4])
def test_api(pod_size: int) -> None:
    api_test(make_env(pod_size), num_cycles=300)


def test_api_with_the_core_encoder() -> None:
    """The default encoder's path (``core.encode``, no records) passes too."""
    api_test(CommanderPodEnv(pod_size=6), num_cycles=300)


def test_seed() -> None:
    seed_test(lambda: make_env(4), num_cycles=200)


def play(env: CommanderPodEnv, seed: int, check_records: bool = False) -> dict[str, float]:
    """Play one game with the teacher in every seat (``scripted_action``); returns each agent's total reward."""
    env.reset(seed=seed)
    totals = dict.fromkeys(env.possible_agents, 0.0)
    for agent in env.agent_iter():
        obs, reward, term, trunc, _ = env.last()
        totals[agent] += reward
        if term or trunc:
            env.step(None)
            continue
        action = env.scripted_action()
        if check_records:
            check_record(env, obs, action)
        env.step(action)
    return totals


def check_record(env: CommanderPodEnv, obs: dict, action: int) -> None:
    record = env.decision_record()
    assert list(record)[: len(FORGE_KEYS)] == FORGE_KEYS
    assert list(record["players"][0])[: len(PLAYER_KEYS)] == PLAYER_KEYS
    assert len(record["action_mask"]) == NUM_ACTIONS and set(record["action_mask"]) <= {0, 1}
    assert record["action_mask"] == obs["action_mask"].tolist()
    assert record["active_seat"] == env.agent_name_mapping[env.agent_selection]
    desc = env.describe_action(action)
    assert desc["macro_action"] == MACRO_ACTIONS[action] and desc["action_idx"] == action
    assert desc["type"] in ("cast", "cast_commander", "attack", "pass", "hold") and len(desc["raw"]) <= 200
    json.loads(json.dumps({**record, "action": desc}))


def test_rewards_zero_sum_win() -> None:
    env = make_env(4)
    winners = []
    for seed in range(5):
        totals = play(env, seed, check_records=seed == 0)
        winner = env.game_result()[2]
        assert abs(sum(totals.values())) < 1e-9
        if winner is not None:
            winners.append(winner)
            assert totals[f"player_{winner}"] == pytest.approx(1.0)
            assert all(v == pytest.approx(-1 / 3) for a, v in totals.items() if a != f"player_{winner}")
    assert len(winners) >= 3, winners  # the win case was checked (measured: all 5 are won)


def test_rewards_zero_sum_draw() -> None:
    env = make_env(4, max_turns=3)
    totals = play(env, 1)
    assert env.game_result()[1:3] == ("draw", None) and not env.agents
    assert not env.core.st.eliminated[0].any()  # 3 turns: nobody is out yet
    assert all(v == 0.0 for v in totals.values())


def test_records_random_play() -> None:
    env = make_env(3)
    env.reset(seed=7)
    rng = random.Random(7)
    for _agent in env.agent_iter(max_iter=2000):
        obs, _, term, trunc, _ = env.last()
        if term or trunc:
            env.step(None)
            continue
        action = rng.choice(np.flatnonzero(obs["action_mask"]).tolist())
        check_record(env, obs, action)
        env.step(action)


@pytest.mark.parametrize("pod_size,max_turns", [(2, 1), (2, 2), (4, 1)])
def test_runner_finishes_games_over_before_any_decision(pod_size: int, max_turns: int) -> None:
    """A turn cap of one or two rounds can end a game inside reset (no seat had two legal actions)."""
    import torch

    from ml.game.commander.spec import commander
    from ml.play.controller import Controller
    from ml.play.runner import Pods, play_games

    n = 40
    seatings = [["h"] * pod_size for _ in range(n)]
    results = list(
        play_games(Pods(seatings, list(range(n))), {"h": Controller("teacher")}, game=commander(pod_size, max_turns),
                   num_envs=8, generator=torch.Generator().manual_seed(0))
    )  # fmt: skip
    assert sorted(r.index for r in results) == list(range(n))
    assert any(r.decisions == 0 for r in results)  # the case this test is about occurred
    assert all(r.outcome == "draw" for r in results if r.decisions == 0)


def _shown(env: CommanderPodEnv | ReferencePodEnv, everyone: bool = True) -> dict:
    """What the AEC API shows now: agents, selection, rewards, flags, infos, and the observation of
    every agent (``everyone``) or of the agent to act."""
    seen = {a: env.observe(a) for a in env.agents if everyone or a == env.agent_selection}
    for o in seen.values():
        assert o["observation"].dtype == np.float32 and o["action_mask"].dtype == np.int8
    return {
        "agents": list(env.agents),
        "selection": env.agent_selection if env.agents else None,
        "rewards": dict(env.rewards),
        "cumulative": dict(env._cumulative_rewards),
        "terminations": dict(env.terminations),
        "truncations": dict(env.truncations),
        "infos": dict(env.infos),
        "observations": {a: o["observation"].tolist() for a, o in seen.items()},
        "masks": {a: o["action_mask"].tolist() for a, o in seen.items()},
    }


def test_view_agrees_with_the_object_engine_step_for_step() -> None:
    """240 games of random legal play (pods 2..6, a quarter under a 1..8-round cap, a third through
    a record-reading encoder), three per env pair (one seeded reset, two seedless): identical after
    every step, dead steps included (the observations of every agent after every third step, of the
    agent to act after the others), and identical records, action objects and results."""
    rng = np.random.default_rng(25)
    seen: dict[str, int] = {}
    for pair in range(80):
        pod = int(rng.integers(2, MAX_POD + 1))
        cap = int(rng.integers(1, 9)) if rng.random() < 0.25 else 30
        encoder = TinyEncoder() if pair % 3 == 0 else None
        view, ref = CommanderPodEnv(pod, cap, encoder), ReferencePodEnv(pod, cap, encoder)
        pick = random.Random(pair)
        for k in range(3):
            seed = int(rng.integers(2**31 - 1)) if k == 0 else None
            view.reset(seed=seed)
            ref.reset(seed=seed)
            assert _shown(view) == _shown(ref), f"pair {pair} game {k}: after reset"
            decisions, steps = 0, 0
            shown = _shown(ref)
            while ref.agents:
                agent = ref.agent_selection
                action = None
                if not (ref.terminations[agent] or ref.truncations[agent]):
                    action = pick.choice(np.flatnonzero(shown["masks"][agent]).tolist())
                    assert view.decision_record() == ref.decision_record(), f"pair {pair} game {k}: records"
                    assert view.describe_action(action) == ref.describe_action(action)
                    decisions += 1
                else:
                    seen["dead steps"] = seen.get("dead steps", 0) + 1
                view.step(action)
                ref.step(action)
                steps += 1
                shown = _shown(ref, steps % 3 == 0)
                assert _shown(view, steps % 3 == 0) == shown, f"pair {pair} game {k}: after {decisions} decisions"
            result = view.game_result()
            assert result == ref.game_result()
            assert result[0].startswith(f"game-{k}-")
            key = "no decision" if decisions == 0 else "draw" if result[2] is None else "win"
            seen[key] = seen.get(key, 0) + 1
    assert seen["win"] > 100 and seen["draw"] > 50 and seen["no decision"] > 0 and seen["dead steps"] > 500, (
        seen
    )  # measured: 147, 91, 2, 939


def test_scripted_action_chooses_as_the_object_players() -> None:
    """``scripted_action`` asked at every decision gives ``HeuristicPlayer``/``RandomPlayer(seed * 7 + seat)``'s
    choices on the reference env; an unscripted seat and an illegal action raise, stepping nothing."""
    rng = random.Random(3)
    for g in range(30):
        seed, pod = 1000 + g, 2 + g % (MAX_POD - 1)
        kinds = {s: rng.choice(["teacher", "random"]) for s in range(pod)}
        view, ref = CommanderPodEnv(pod), ReferencePodEnv(pod)
        view.reset(seed=seed, options={"scripted": kinds})
        ref.reset(seed=seed)
        players = {
            s: (HeuristicPlayer if kind == "teacher" else RandomPlayer)(seed * PLAYER_SEED_STRIDE + s)
            for s, kind in kinds.items()
        }
        while ref.agents:
            agent = ref.agent_selection
            action = None
            if not (ref.terminations[agent] or ref.truncations[agent]):
                action = view.scripted_action()
                assert action == players[ref.agent_name_mapping[agent]].act(ref.state), f"game {g}"
            view.step(action)
            ref.step(action)
        assert view.game_result() == ref.game_result()
    view = CommanderPodEnv(4)
    view.reset(seed=5, options={"scripted": {1: "random"}})
    before = _shown(view)
    with pytest.raises(ValueError, match="no scripted kind"):
        view.scripted_action()
    illegal = int(np.flatnonzero(view.observe(view.agent_selection)["action_mask"] == 0)[0])
    with pytest.raises(IllegalActionError):
        view.step(illegal)
    assert _shown(view) == before
    with pytest.raises(ValueError, match="no scripted player of kind"):
        view.reset(seed=5, options={"scripted": {0: "mcts"}})


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: CommanderPodEnv(4, max_turns=32768), "max_turns must be in 1..32767"),
        (lambda: CommanderPodEnv(4).reset(seed=2**62), "seed must be an int"),
        (lambda: CommanderPodEnv(4).reset(seed=1.5), "seed must be an int"),
        (lambda: CommanderPodEnv(4).reset(seed="abc"), "seed must be an int"),
        (lambda: CommanderPodEnv(4).reset(seed=1, options={"scripted": {"0": "teacher"}}), "options['scripted']"),
        (lambda: CommanderPodEnv(4).reset(seed=1, options={"scripted": [0, 1]}), "options['scripted']"),
    ],
)
def test_the_view_refuses_bad_settings_in_one_line(make, message) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        make()


def test_the_view_refuses_actions_that_are_not_ints() -> None:
    env = CommanderPodEnv(4)
    env.reset(seed=3)
    legal = int(np.flatnonzero(env.observe(env.agent_selection)["action_mask"])[0])
    before = env.decision_record()
    for bad in (float(legal), np.array([legal]), "1", True):
        with pytest.raises(IllegalActionError, match="action must be an int"):
            env.step(bad)
    assert env.decision_record() == before  # nothing applied
    env.step(np.int64(legal))  # a numpy int is an int


def test_params_round_cap_is_the_cores() -> None:
    from ml.config.sections import GameParams
    from ml.game.commander import core

    assert GameParams.model_fields["max_turns"].metadata[-1].le == core.MAX_TURNS


def test_a_refused_reset_leaves_the_seedless_resets_as_they_were() -> None:
    env, twin = CommanderPodEnv(4), CommanderPodEnv(4)
    env.reset(seed=11)
    twin.reset(seed=11)
    with pytest.raises(ValueError, match="no scripted player of kind 'mcts'"):
        env.reset(seed=99, options={"scripted": {0: "mcts"}})
    env.reset()
    twin.reset()
    assert env.decision_record()["game_id"] == twin.decision_record()["game_id"]  # the same drawn seed


@pytest.mark.parametrize("make", [CommanderPodEnv, ReferencePodEnv])
def test_stepping_before_a_reset_or_after_the_game_says_so(make) -> None:
    env = make(2, max_turns=2)
    with pytest.raises(RuntimeError, match=re.escape("call reset() first")):
        env.step(0)
    env.reset(seed=4)
    while env.agents:
        agent = env.agent_selection
        done = env.terminations[agent] or env.truncations[agent]
        env.step(None if done else int(np.flatnonzero(env.observe(agent)["action_mask"])[0]))
    with pytest.raises(RuntimeError, match="the game is over"):
        env.step(0)
    env.reset(seed=4)  # and the env plays on
    assert env.agents
