"""The league of PPO self-play and PPO's start (``ml.play.league``, ``ml.learn.ppo``, stage ``selfplay``).

Checks: PFSP probabilities against hand-computed ones (k, floor, uniform cases, bad input); the
score estimate's prior and the learner's points against a seat (ranking, draws); ``league`` draws
are numpy's weighted choice with the round's probabilities, and a round's probabilities decide
whom the learner meets; a league run reports the mix it played and each member's estimate, and
its last probabilities follow from its tally; PPO resumed from an agent with its optimizer state
continues Adam's step count and plays other games than a restart from the student; the
selfplay stage with ``start: agent`` starts from the newest ``gen<G>.pt`` and writes the optimizer
state into its checkpoint; a mix with nothing to draw is one error line.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from ml.config.sections import SelfplayParams
from ml.config.yaml_file import safe_yaml
from ml.game.commander.encoding import OBS_DIM
from ml.game.commander.spec import commander
from ml.learn.ppo import train_ppo
from ml.learn.settings import Resume, RunSettings
from ml.model.policy import PolicyNet, load_optimizer_state, load_policy, save_policy
from ml.play.collect import Collector, CollectSettings, _opponent_picker
from ml.play.league import Tally, league_probabilities, learner_points, pfsp_probabilities
from tests.conftest import Pipeline, yaml_text

TINY_PPO = dict(
    learner_decisions=300, num_envs=4, rollout_steps=150, minibatch_size=64, update_epochs=2, workers=1, rollout_chunks=2
)


def test_pfsp_probabilities_by_hand():
    # f = (1 - p)^2 = 0.64, 0.25, 0.01 (sum 0.9)
    got = pfsp_probabilities(np.array([0.2, 0.5, 0.9]), k=2.0, floor=0.0)
    assert got == pytest.approx([0.64 / 0.9, 0.25 / 0.9, 0.01 / 0.9])
    floored = pfsp_probabilities(np.array([0.2, 0.5, 0.9]), k=2.0, floor=0.05)
    assert floored == pytest.approx([0.05 + 0.85 * 0.64 / 0.9, 0.05 + 0.85 * 0.25 / 0.9, 0.05 + 0.85 * 0.01 / 0.9])
    assert floored.sum() == pytest.approx(1.0) and floored.min() >= 0.05
    assert pfsp_probabilities(np.array([0.2, 0.9]), k=0.0, floor=0.0) == pytest.approx([0.5, 0.5])  # k = 0: alike
    assert pfsp_probabilities(np.array([0.2, 0.9]), k=2.0, floor=0.5) == pytest.approx([0.5, 0.5])  # M * floor >= 1
    assert pfsp_probabilities(np.array([1.0, 1.0]), k=2.0, floor=0.0) == pytest.approx([0.5, 0.5])  # beaten always
    assert pfsp_probabilities(np.array([0.3, 0.3, 0.6]), k=1.0, floor=0.0) == pytest.approx([0.7 / 1.8, 0.7 / 1.8, 0.4 / 1.8])
    assert len(pfsp_probabilities(np.array([]), k=2.0, floor=0.1)) == 0
    with pytest.raises(ValueError, match="win rates"):
        pfsp_probabilities(np.array([1.5]), k=2.0, floor=0.0)
    with pytest.raises(ValueError, match="pfsp_k"):
        pfsp_probabilities(np.array([0.5]), k=-1.0, floor=0.0)


def test_tally_estimates_and_points():
    t = Tally()
    assert t.win_rate("frozen:gen000") == 0.5  # the prior alone
    for points in (1.0, 1.0, 0.0, 0.5):
        t.add("frozen:gen000", points)
    assert t.games == {"frozen:gen000": 4} and t.win_rate("frozen:gen000") == pytest.approx((2.5 + 1) / (4 + 2))
    t.add("teacher", 0.0)
    assert t.shares() == {"frozen:gen000": 0.8, "teacher": 0.2}
    both = Tally()
    both.merge([t, t])
    assert both.games["frozen:gen000"] == 8 and both.score["frozen:gen000"] == 5.0
    assert league_probabilities(["frozen:gen000", "teacher"], t, 2.0, 0.0) == pytest.approx(
        tuple(pfsp_probabilities(np.array([3.5 / 6, 1 / 3]), 2.0, 0.0))
    )
    returns = np.array([1.0, -1 / 3, -1 / 3, -1 / 3])
    assert learner_points(2, 0, [0, 3, 2, 1], returns, 0) == 0.0  # below the winner
    assert learner_points(2, 1, [0, 3, 2, 1], returns, 0) == 1.0  # above by place, whatever the equal returns
    assert learner_points(0, 1, [0, 1], np.array([0.0, 0.0]), None) == 0.5  # a draw
    assert learner_points(1, 0, [], np.array([2.0, -2.0]), 0) == 0.0  # no ranking: by return


def test_league_draws_are_numpys_weighted_choice():
    mix, league, probs = (
        {"teacher": 0.5, "league": 0.5},
        ("frozen:gen000", "student:gen000", "frozen:gen001"),
        (0.2, 0.7, 0.1),
    )
    pick = _opponent_picker(mix, [], np.random.default_rng(3), league, probs)
    rng = np.random.default_rng(3)
    expected = []
    for _ in range(2000):
        kind = ["teacher", "league"][rng.choice(2, p=[0.5, 0.5])]
        expected.append(league[rng.choice(3, p=probs)] if kind == "league" else kind)
    got = [pick() for _ in range(2000)]
    assert got == expected
    assert got.count("student:gen000") > 3 * got.count("frozen:gen000")


def _nets(n: int) -> list[PolicyNet]:
    torch.manual_seed(0)
    return [PolicyNet(OBS_DIM, (16,)) for _ in range(n)]


def test_round_probabilities_decide_whom_the_learner_meets():
    learner, a, b = _nets(3)
    settings = CollectSettings(commander(4, 30), 4, {"league": 1.0}, ("frozen:a", "frozen:b"))
    collector = Collector(learner, {"frozen:a": a, "frozen:b": b}, settings, workers=1, chunks=2)
    try:
        only_a = collector.round(learner, 11, 120, league_probs=(1.0, 0.0))
        only_b = collector.round(learner, 11, 120, league_probs=(0.0, 1.0))
    finally:
        collector.close()
    met_a, met_b = Tally(), Tally()
    met_a.merge(c.tally for c in only_a)
    met_b.merge(c.tally for c in only_b)
    assert set(met_a.games) == {"frozen:a"} and set(met_b.games) == {"frozen:b"}
    assert met_a.games["frozen:a"] == 3 * sum(c.games for c in only_a)  # three opponent seats a game


def test_league_run_reports_mix_and_estimates():
    student, a, s = _nets(3)
    cfg = SelfplayParams(**TINY_PPO, opponent_mix={"teacher": 0.5, "league": 0.5}, pfsp_k=2.0, league_floor=0.1)
    _, m = train_ppo(student, {"frozen:gen000": a, "student:gen000": s}, cfg, commander(4, 30), RunSettings(4))
    league, mix = m["selfplay/league"], m["selfplay/opponents"]
    assert set(league) == {"frozen:gen000", "student:gen000"} and set(mix) == {"teacher", *league}
    assert sum(mix.values()) == pytest.approx(1.0)
    seats = 3 * m["selfplay/episodes"]
    assert sum(v["games"] for v in league.values()) == pytest.approx(seats * (1 - mix["teacher"]))
    rates = np.array([league[k]["win_rate"] for k in sorted(league)])
    last = np.array([league[k]["prob"] for k in sorted(league)])
    assert last.sum() == pytest.approx(1.0) and last.min() >= 0.1
    # the last round's probabilities come from the tally before it: the harder member is never drawn less
    assert (rates[0] - rates[1]) * (last[0] - last[1]) <= 1e-9 or abs(rates[0] - rates[1]) < 0.1


def test_resumed_agent_continues_its_optimizer():
    student, agent = _nets(2)
    cfg = SelfplayParams(**TINY_PPO, opponent_mix={"teacher": 1.0})
    first = Resume(agent)
    after_one, m1 = train_ppo(student, {}, cfg, commander(4, 30), RunSettings(5), resume=first)
    steps_one = int(first.optimizer_state["state"][0]["step"])
    assert steps_one > 0 and m1["selfplay/start"] == "student"  # Resume's default name
    resumed = Resume(after_one, "frozen:gen000", first.optimizer_state)
    after_two, m2 = train_ppo(student, {}, cfg, commander(4, 30), RunSettings(6), resume=resumed)
    assert int(resumed.optimizer_state["state"][0]["step"]) > steps_one and m2["selfplay/start"] == "frozen:gen000"
    restarted, _ = train_ppo(student, {}, cfg, commander(4, 30), RunSettings(6))
    differs = [
        not torch.equal(x, y) for x, y in zip(after_two.state_dict().values(), restarted.state_dict().values(), strict=True)
    ]
    assert any(differs)
    for x, y in zip(student.state_dict().values(), _nets(1)[0].state_dict().values(), strict=True):
        assert torch.equal(x, y)  # the student is left unchanged


def test_nothing_to_draw_is_an_error():
    (student,) = _nets(1)
    cfg = SelfplayParams(**TINY_PPO, opponent_mix={"league": 1.0})
    with pytest.raises(ValueError, match="no frozen policy to draw from"):
        train_ppo(student, {}, cfg, commander(4, 30), RunSettings(1))


def test_selfplay_stage_starts_from_the_newest_agent(pipeline: Pipeline, tmp_path):
    from stages import selfplay

    frozen, students = tmp_path / "frozen", tmp_path / "students"
    frozen.mkdir()
    students.mkdir()
    agent, _ = load_policy(pipeline.root / "ppo.pt")
    save_policy(agent, frozen / "gen000.pt", {"role": "ppo"})
    for i, name in enumerate(("gen001", "gen010")):  # gen010 is the newest, by number
        torch.manual_seed(i)
        net = PolicyNet(agent.obs_dim, agent.hidden_sizes, agent.num_actions)
        save_policy(net, frozen / f"{name}.pt", {}, torch.optim.Adam(net.parameters()).state_dict())
    save_policy(agent, students / "gen000.pt", {"role": "student"})
    params = tmp_path / "params.yaml"
    base = ["--params", str(params), "--no-progress", "--student", str(pipeline.root / "student.pt")]

    def run(extra: dict, out: str) -> dict:
        data = safe_yaml().load((pipeline.root / "params.yaml").read_text())
        data["selfplay"].update(extra)
        params.write_text(yaml_text(data))
        code = selfplay.main([*base, "--frozen", str(frozen), "--students", str(students),
                              "--out", str(tmp_path / out), "--metrics", str(tmp_path / f"{out}.json")])  # fmt: skip
        assert code == 0
        return json.loads((tmp_path / f"{out}.json").read_text())

    m = run({"start": "agent", "opponent_mix": {"teacher": 0.5, "league": 0.5}}, "resumed.pt")
    assert m["selfplay/start"] == "frozen:gen010"
    assert set(m["selfplay/league"]) == {"frozen:gen000", "frozen:gen001", "frozen:gen010", "student:gen000"}
    state = load_optimizer_state(tmp_path / "resumed.pt")
    assert state is not None and int(state["state"][0]["step"]) > 0  # type: ignore[index]
    m = run({"start": "student", "opponent_mix": {"teacher": 1.0}}, "fresh.pt")
    assert m["selfplay/start"] == "student" and m["selfplay/opponents"] == {"teacher": 1.0}


@pytest.mark.expensive
def test_the_league_is_pinned_in_each_attempt_and_restored(reference_run, tmp_path):
    import hashlib
    import shutil
    import subprocess
    import sys

    from tests.conftest import attempt_commits, git

    repo = reference_run[0]  # this test's copy
    gen1 = attempt_commits(repo)[1][0]
    lock = safe_yaml().load(git(repo, "show", f"{gen1}:dvc.lock"))
    deps = {d["path"]: d for d in lock["stages"]["selfplay"]["deps"]}
    metrics = json.loads(git(repo, "show", f"{gen1}:metrics/selfplay.json"))
    assert metrics["selfplay/start"] == "frozen:gen000"  # the TINY params resume the agent against the league
    assert set(metrics["selfplay/league"]) == {"frozen:gen000", "student:gen000"}
    assert sum(v["games"] for v in metrics["selfplay/league"].values()) > 0
    for folder in ("data/frozen", "data/students"):  # the league generation 1 played, pinned by its commit
        pointer = safe_yaml().load(git(repo, "show", f"{gen1}:{folder}.dvc"))["outs"][0]
        assert pointer["md5"] == deps[folder]["md5"] and deps[folder]["nfiles"] == 1, folder
    git(repo, "checkout", "-q", gen1)
    for folder in ("data/frozen", "data/students"):
        shutil.rmtree(repo / folder)
    env = {"DVC_NO_ANALYTICS": "1", "PATH": __import__("os").environ["PATH"]}
    subprocess.run([sys.executable, "-m", "dvc", "checkout", "-q"], cwd=repo, env=env, check=True)
    for folder in ("data/frozen", "data/students"):
        listing = json.loads((repo / ".dvc/cache/files/md5" / deps[folder]["md5"][:2] / deps[folder]["md5"][2:]).read_text())
        got = {p.name: hashlib.md5(p.read_bytes()).hexdigest() for p in (repo / folder).iterdir()}
        assert got == {e["relpath"]: e["md5"] for e in listing} == {"gen000.pt": got.get("gen000.pt")}, folder
