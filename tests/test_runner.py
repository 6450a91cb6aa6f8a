"""``ml.play.runner.play_games``: scripted seats act at once so networks see full batches, and a
decision budget stops new games without discarding the games in flight."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ml.config.sections import TeacherParams
from ml.game.commander.encoding import OBS_DIM
from ml.game.commander.reference.objects import objects_game
from ml.game.commander.spec import CommanderSpec, commander
from ml.model.policy import MASKED_LOGIT, PolicyBank, PolicyNet
from ml.play.controller import Controller
from ml.play.runner import Keep, Pods, StagePlay, play_games
from ml.play.seating import game_seeds, rotated_seatings


class CountingNet(PolicyNet):
    """A policy that records the batch size of every forward pass."""

    def __init__(self) -> None:
        super().__init__(OBS_DIM, (16,))
        self.batches: list[int] = []

    def act(self, obs, action_mask, generator=None, greedy=False):
        self.batches.append(len(obs))
        return super().act(obs, action_mask, generator, greedy)


def _play(n_games: int, num_envs: int, budget: int | None, net: PolicyNet):
    seatings = rotated_seatings(n_games, 4, "agent", lambda g: ["teacher"] * 3)
    controllers = {"agent": Controller("net", net), "teacher": Controller("teacher")}
    return list(
        play_games(Pods(seatings, game_seeds(3, n_games)), controllers, game=commander(4, 30), num_envs=num_envs,
                   generator=torch.Generator().manual_seed(0), keep=Keep(track_seats=lambda seats: [seats.index("agent")], budget=budget))
    )  # fmt: skip


def test_every_forward_pass_answers_all_games_in_flight():
    torch.manual_seed(0)
    net = CountingNet()
    results = _play(24, 8, None, net)
    assert len(results) == 24
    # While at least 8 games are unfinished, every forward pass answers 8 decisions: the
    # heuristic seats never hold a game back.
    total = sum(len(r.transitions[r.seats.index("agent")]) for r in results)
    assert sum(net.batches) == total
    assert net.batches[0] == 8 and max(net.batches) == 8
    full = sum(1 for b in net.batches if b == 8)
    assert full >= (total - 8 * max(len(r.transitions[r.seats.index("agent")]) for r in results)) / 8


def test_budget_stops_new_games_and_keeps_the_games_in_flight():
    torch.manual_seed(0)
    net = PolicyNet(OBS_DIM, (16,))
    unlimited = _play(40, 4, None, net)
    limited = _play(40, 4, 100, net)
    steps = [len(r.transitions[r.seats.index("agent")]) for r in limited]
    assert 4 <= len(limited) < 40  # stopped starting games ...
    assert sum(steps) >= 100 and all(s > 0 for s in steps)  # ... and finished every game it started
    assert all(r.outcome for r in limited)
    assert sorted(r.index for r in limited) == list(range(len(limited)))  # the first games of the list
    assert len(unlimited) == 40
    again = _play(40, 4, 100, net)  # deterministic
    assert [(r.game_id, r.decisions, r.outcome) for r in again] == [(r.game_id, r.decisions, r.outcome) for r in limited]


# ---------------------------------------------------------------------------- the batched core against the AEC env


def _outcome(r) -> tuple:
    """Everything a GameResult holds, each episode's arrays as (dtype, shape, bytes)."""
    trans = {s: [(a.dtype.str, a.shape, a.tobytes()) for a in vars(ep).values()] for s, ep in r.transitions.items()}
    return (r.index, r.game_id, r.outcome, r.winner, r.seats, r.returns.tobytes(), r.records, trans, r.decisions, r.ranking)


def _tracked_decisions(outcome: tuple) -> int:
    """Decisions of an ``_outcome``'s tracked seats (the length of each episode's action array)."""
    return sum(arrays[2][1][0] for arrays in outcome[7].values())


def _both_engines(n_games: int, others: list[str], log, monkeypatch, num_envs: int = 8, engines=("objects", "core")) -> list:
    """The same games through each of ``engines`` (``objects``: the tests' object engine, rows of
    ``ReferencePodEnv``; ``core``: the product's, which must not build an env); their ``_outcome`` lists."""
    torch.manual_seed(0)
    nets = {"agent": PolicyNet(OBS_DIM, (16,)), "frozen": PolicyNet(OBS_DIM, (16,))}
    controllers = {k: Controller("net", net) for k, net in nets.items()}
    controllers |= {"teacher": Controller("teacher"), "random": Controller("random")}
    seatings = rotated_seatings(n_games, 4, "agent", lambda g: [others[(g + i) % len(others)] for i in range(3)])
    runs = []
    for engine in engines:
        with monkeypatch.context() as m:
            if engine == "core":
                m.setattr(CommanderSpec, "make_env", lambda *a: pytest.fail("the core path built an AEC env"))
            else:
                m.setattr(CommanderSpec, "batched", objects_game)
            runs.append([_outcome(r) for r in play_games(
                Pods(seatings, game_seeds(11, n_games)), controllers, game=commander(4, 30), num_envs=num_envs,
                generator=torch.Generator().manual_seed(5),
                keep=Keep(log_seats=log, track_seats=lambda seats: [s for s, k in enumerate(seats) if k == "agent"]),
            )])  # fmt: skip
    return runs


def test_core_plays_the_same_games_as_the_env_agent_and_heuristic_seats(monkeypatch):
    objects, core = _both_engines(50, ["teacher"], lambda seats: [seats.index("agent")], monkeypatch)
    assert sum(_tracked_decisions(o) for o in objects) > 500  # the agent decided, in every game
    assert sum(len(o[6]) for o in objects) > 500 and all(rec["policy"] for o in objects for rec in o[6])
    assert core == objects


def test_core_plays_the_same_games_as_the_env_frozen_nets_and_random_seats(monkeypatch):
    # two agent seats in some pods, frozen nets, random and heuristic seats; every seat logged
    # (the scripted seats' decisions are surfaced for their records)
    objects, core = _both_engines(50, ["teacher", "frozen", "random", "agent"], lambda seats: list(range(4)), monkeypatch)
    assert {o[2] for o in objects} >= {"win_seat_0", "win_seat_1"}
    assert any(len(o[7]) == 2 for o in objects)  # pods with two tracked agent seats
    assert core == objects


def test_core_episodes_survive_compaction_of_the_decision_buffer(monkeypatch):
    # a buffer of 8 decisions fills within a few forward passes: it is compacted (finished
    # games' decisions dropped, the last-decision index of every seat in flight moved) and
    # grown many times; the episodes and rewards must equal those of a buffer that never filled
    # (which equal the object engine's: the tests above)
    from ml.play import buffer

    sizes = []  # (capacity before, after) of every compaction
    real = buffer.Tracker._make_room

    def make_room(self, k):
        before = len(self.key)
        real(self, k)
        sizes.append((before, len(self.key)))

    (roomy,) = _both_engines(60, ["teacher", "frozen", "agent"], None, monkeypatch, engines=("core",))
    assert not sizes  # the default capacity never filled
    monkeypatch.setattr(buffer.Tracker, "CAPACITY", 8)
    monkeypatch.setattr(buffer.Tracker, "_make_room", make_room)
    (tight,) = _both_engines(60, ["teacher", "frozen", "agent"], None, monkeypatch, engines=("core",))
    assert sum(a < b for a, b in sizes) >= 4 and sum(a == b for a, b in sizes) >= 4  # grown, and compacted in place
    assert sum(_tracked_decisions(o) for o in roomy) > 300
    assert tight == roomy


def test_teacher_batch_is_byte_identical_through_the_core(tmp_path, monkeypatch):
    from ml.play import teacher

    def write(engine: str) -> bytes:
        with monkeypatch.context() as m:
            if engine == "objects":
                m.setattr(CommanderSpec, "batched", objects_game)
            out = tmp_path / engine
            metrics = teacher.write_teacher_batch(
                out, commander(4, 30), TeacherParams(games=12), "teacher-s1", StagePlay(1, chunk_games=5)
            )
        assert metrics["teacher/decisions"] > 12 * 20
        (batch,) = out.glob("*.jsonl")
        return batch.read_bytes()

    assert write("core") == write("objects")


def test_core_describes_actions_as_the_rules_do():
    """``CoreGame.record`` equals ``rules.decision_record`` + ``rules.describe_action`` for every
    legal action (not only the ones played), and rejects an illegal one."""
    from ml.game.commander.core.game import CoreGame
    from ml.game.commander.reference import rules
    from ml.game.commander.reference.players import HeuristicPlayer

    checked = set()
    for seed in range(6):
        batch = CoreGame(1, 4, 30)
        batch.reset(0, seed, dict.fromkeys(range(4), "teacher"), True)
        state = rules.new_game(seed, 4, 30, game_index=0)
        players = [HeuristicPlayer(seed * 7 + s) for s in range(4)]
        acts = np.full(1, -1, np.int64)
        batch.step(acts)
        while not batch.done[0]:
            for a in list(state.legal):
                rec = rules.decision_record(state)
                rec["action"] = rules.describe_action(state, int(a))
                assert batch.record(0, int(a)) == rec
                checked.add(rec["action"]["type"])
            with pytest.raises(ValueError):
                batch.record(0, next(a for a in range(13) if a not in set(state.legal)))
            (acts[0],) = batch.scripted_actions(np.zeros(1, np.int64))
            assert acts[0] == players[state.current_seat].act(state)
            rules.apply_action(state, int(acts[0]))
            batch.step(acts)
        assert batch.result(0) == (state.game_id, rules.outcome(state), state.winner, state.ranking())
    assert checked == {"cast", "cast_commander", "attack", "pass", "hold"}


def test_core_game_deals_the_decks_asked_for():
    from ml.game.commander import core
    from ml.game.commander.core.game import CoreGame
    from ml.game.commander.reference import rules

    batch = CoreGame(2, 4, 30)
    names = batch.tables.deck_names
    decks = [len(names) - 1, 0, 1, 1]
    batch.reset(1, 77, {}, False, decks=decks)
    batch.reset(0, 77, {}, False)
    chosen = rules.new_game(77, 4, 30, game_index=0, deck_names=[names[i] for i in decks])
    assert core.decision_record(batch.st, batch.tables, 1) == rules.decision_record(chosen)
    drawn = core.decision_record(batch.st, batch.tables, 0)
    assert drawn == rules.decision_record(rules.new_game(77, 4, 30, game_index=0)) != rules.decision_record(chosen)
    with pytest.raises(ValueError, match="3 decks for 4 seats"):
        batch.reset(0, 77, {}, False, decks=[1, 2, 3])


def test_an_exploring_net_spreads_its_moves_and_keeps_its_distribution():
    """``Controller.explore``: a share of the moves is uniform over the legal ones, each logged record keeps
    the network's distribution as ``policy``, and a tracked (PPO) seat refuses to explore."""
    from ml.game.openspiel.spec import openspiel

    game = openspiel("kuhn_poker")
    torch.manual_seed(0)
    net = PolicyNet(game.obs_dim, (16,), num_actions=game.num_actions)
    seatings = rotated_seatings(400, 2, "agent", lambda g: ["random"])
    pods = Pods(seatings, game_seeds(7, 400))

    def off_argmax(explore: float) -> tuple[float, list]:
        ctrl = {"agent": Controller("net", net, greedy=True, explore=explore), "random": Controller("random")}
        runner = play_games(pods, ctrl, game=game, num_envs=16, generator=torch.Generator().manual_seed(1),
                            keep=Keep(log_seats=lambda s: [s.index("agent")]))  # fmt: skip
        recs = [r for res in runner for r in res.records]
        moves = np.asarray([r["action"]["action_idx"] for r in recs])
        best = np.asarray([int(np.argmax(r["policy"])) for r in recs])
        return float(np.mean(moves != best)), recs

    greedy_share, greedy_recs = off_argmax(0.0)
    explored_share, explored_recs = off_argmax(0.5)
    assert greedy_share == 0.0
    assert 0.15 < explored_share < 0.35  # kuhn: 2 legal moves, so half the explored moves miss the arg-max: 0.25
    policy_of = {tuple(r["observation"]): r["policy"] for r in greedy_recs}
    assert all(policy_of.get(tuple(r["observation"]), r["policy"]) == r["policy"] for r in explored_recs)
    ctrl = {"agent": Controller("net", net, explore=0.5), "random": Controller("random")}
    with pytest.raises(ValueError, match="tracked seat"):
        list(play_games(pods, ctrl, game=game, num_envs=16, generator=torch.Generator().manual_seed(1),
                        keep=Keep(track_seats=lambda s: [s.index("agent")])))  # fmt: skip


@pytest.mark.parametrize("teacher", ["uniform", "cfr"])
def test_export_targets_teacher_labels_the_agents_decisions_with_the_teachers_distribution(tmp_path, teacher):
    """``export.targets: teacher``: the same games and moves as ``agent`` (labelling draws nothing), and every
    record's ``policy`` is the teacher's distribution at its decision, not the agent's."""
    from ml.config.sections import ExportParams, RunParams
    from ml.data.batch_files import read_records
    from ml.game.openspiel.players import _decision_states, cfr_average_policy
    from ml.game.openspiel.spec import openspiel
    from ml.play.export import export_batch

    game = openspiel("kuhn_poker", observation="information_state", teacher_policy=teacher, cfr_iterations=50)
    torch.manual_seed(0)
    net = PolicyNet(game.obs_dim, (16,), num_actions=game.num_actions)
    batches = {}
    for targets in ("agent", "teacher"):
        out = tmp_path / targets
        export_batch(net, out, ExportParams(games=200, only_wins=False, explore=0.2, targets=targets), RunParams(),
                     game, StagePlay(5), num_envs=8)  # fmt: skip
        batches[targets] = [r for f in sorted(out.glob("*.jsonl")) for r in read_records(f)]
    moves = {t: [(r.game_id, r.action.action_idx) for r in recs] for t, recs in batches.items()}
    assert moves["agent"] == moves["teacher"] and len(moves["agent"]) > 200
    os_game = game.openspiel_game()
    table = cfr_average_policy(os_game, 50)
    cfr_at = {tuple(s.information_state_tensor(s.current_player())): table[s.information_state_string()]
              for s in _decision_states(os_game)}  # fmt: skip
    for agent_rec, rec in zip(batches["agent"], batches["teacher"], strict=True):
        legal = np.asarray(rec.action_mask, bool)
        if teacher == "uniform":
            want = (legal / legal.sum()).tolist()
        else:  # the information-state tensor names the state; CFR's table is keyed by its string
            want = [cfr_at[tuple(rec.observation)].get(a, 0.0) for a in range(game.num_actions)]
        assert rec.policy == pytest.approx(want, abs=1e-4)
        assert rec.policy != pytest.approx(agent_rec.policy, abs=1e-3)
    if teacher == "cfr":  # kuhn's CFR+ policy mixes in some information states
        assert any(0.05 < p < 0.95 for rec in batches["teacher"] for p in rec.policy)


def test_export_explore_changes_the_moves_not_the_targets(tmp_path):
    """``export.explore``: the same export with a share of uniform moves writes other games, and every record's
    ``policy`` is still the agent's distribution at its observation."""
    from ml.config.sections import ExportParams, RunParams
    from ml.data.batch_files import read_records
    from ml.game.openspiel.spec import openspiel
    from ml.play.export import export_batch

    game = openspiel("kuhn_poker")
    torch.manual_seed(0)
    net = PolicyNet(game.obs_dim, (16,), num_actions=game.num_actions)
    batches = {}
    for explore in (0.0, 0.6):
        out = tmp_path / str(explore)
        export_batch(net, out, ExportParams(games=200, only_wins=False, explore=explore), RunParams(), game,
                     StagePlay(5), num_envs=8)  # fmt: skip
        batches[explore] = [r for f in sorted(out.glob("*.jsonl")) for r in read_records(f)]
    moves = {e: [(r.game_id, r.action.action_idx) for r in recs] for e, recs in batches.items()}
    assert moves[0.0] != moves[0.6]
    with torch.no_grad():
        for r in batches[0.6]:
            logits, _ = net(torch.tensor([r.observation]), torch.tensor([r.action_mask], dtype=torch.bool))
            assert r.policy == pytest.approx(torch.softmax(logits, -1)[0].tolist(), abs=1e-4)


class CountingBank(PolicyBank):
    """A bank that records the rows of every forward pass."""

    def __init__(self, nets):
        super().__init__(nets)
        self.batches: list[int] = []

    def forward(self, obs, action_mask, member):
        self.batches.append(len(obs))
        return super().forward(obs, action_mask, member)


def test_a_bank_answers_each_member_as_its_own_network():
    torch.manual_seed(1)
    nets = [PolicyNet(OBS_DIM, (16, 8)) for _ in range(3)]
    bank = PolicyBank(nets)
    obs = torch.randn(7, OBS_DIM).numpy()
    mask = np.ones((7, nets[0].num_actions), bool)
    mask[:, 2] = False
    member = np.array([2, 0, 0, 1, 2, 1, 0])
    logits, value = bank.forward(obs, mask, member)
    for i, m in enumerate(member.tolist()):
        own_logits, own_value = nets[m](torch.from_numpy(obs[i : i + 1]), torch.from_numpy(mask[i : i + 1]))
        assert torch.allclose(logits[i], own_logits[0], atol=1e-5) and torch.allclose(value[i], own_value[0], atol=1e-5)
    assert (logits[:, 2] == MASKED_LOGIT).all()
    with pytest.raises(ValueError, match="one architecture"):
        PolicyBank([nets[0], PolicyNet(OBS_DIM, (16,))])


def _pods_of_nets(banked: bool, nets: list[PolicyNet], n_games: int = 12):
    names = [f"net{i}" for i in range(len(nets))]
    bank = CountingBank(nets) if banked else None
    controllers = {
        name: Controller("net", net, greedy=True, bank=bank, member=i)
        for i, (name, net) in enumerate(zip(names, nets, strict=True))
    }
    controllers["teacher"] = Controller("teacher")
    seatings = rotated_seatings(n_games, 4, names[0], lambda g: [names[1 + g % 2], names[2 - g % 2], "teacher"])
    results = list(
        play_games(Pods(seatings, game_seeds(5, n_games)), controllers, game=commander(4, 30), num_envs=6,
                   generator=torch.Generator().manual_seed(0))
    )  # fmt: skip
    return [(r.index, r.outcome, r.decisions, r.ranking) for r in results], bank


def test_banked_opponents_play_their_own_moves_in_one_pass_a_round():
    torch.manual_seed(2)
    nets = [CountingNet() for _ in range(3)]
    alone, _ = _pods_of_nets(False, nets)
    passes = [len(n.batches) for n in nets]
    rows = sum(sum(n.batches) for n in nets)
    for n in nets:
        n.batches.clear()
    banked, bank = _pods_of_nets(True, nets)
    assert banked == alone  # greedy: each member's own arg-max, so the same games
    assert bank is not None and all(not n.batches for n in nets)  # the bank answered every decision
    assert sum(bank.batches) == rows and len(bank.batches) < sum(passes)  # the same decisions in fewer passes


def test_a_bank_refuses_controllers_that_play_differently():
    nets = [PolicyNet(OBS_DIM, (16,)) for _ in range(2)]
    bank = PolicyBank(nets)
    controllers = {
        "a": Controller("net", nets[0], bank=bank, member=0),
        "b": Controller("net", nets[1], greedy=True, bank=bank, member=1),
    }
    pods = Pods([["a", "b", "a", "b"]], [1])
    with pytest.raises(ValueError, match="share a bank"):
        next(play_games(pods, controllers, game=commander(4, 30), num_envs=1, generator=torch.Generator()))
    controllers["b"] = Controller("net", nets[1], bank=bank, member=2)
    with pytest.raises(ValueError, match="member 2 of a bank of 2"):
        next(play_games(pods, controllers, game=commander(4, 30), num_envs=1, generator=torch.Generator()))
