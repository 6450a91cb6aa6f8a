"""Two policies and two runs compared (``ml.judge.head_to_head``, ``loop.py compare``).

Checks: the mixed seatings give each side every seat equally often; a policy against itself
takes exactly half the first places of the mixed pods and differs by exactly 0 from itself
against the teachers (the same deals for both sides); swapping A and B swaps every figure;
``loop.py compare`` on the two-generation reference run plays the same deals for both runs
(swapped runs, mirrored figures), reports each run's CPU time and learner decisions, and
refuses, in one line, runs of different games, an unknown run and a generation never accepted.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import torch

from ml.game.commander.encoding import OBS_DIM
from ml.game.commander.spec import commander
from ml.judge.head_to_head import Play, head_to_head, mixed_seatings, paired_against
from ml.model.policy import PolicyNet
from ml.play.controller import Controller
from tests.conftest import git


def test_mixed_seatings_share_every_seat():
    assert mixed_seatings(2) == [["a", "b"], ["b", "a"]]
    assert mixed_seatings(4) == [["a", "a", "b", "b"], ["b", "a", "a", "b"], ["b", "b", "a", "a"], ["a", "b", "b", "a"]]
    for n in (2, 3, 4, 5):
        seatings = mixed_seatings(n)
        for seat in range(n):
            column = [s[seat] for s in seatings]
            assert column.count("a") == column.count("b"), (n, seat)
    with pytest.raises(ValueError, match="at least 2"):
        mixed_seatings(1)


def _net(seed: int) -> Controller:
    torch.manual_seed(seed)
    return Controller("net", PolicyNet(OBS_DIM, (16,)), greedy=True)


def test_a_policy_against_itself_is_even():
    a = _net(0)
    same = head_to_head(a, a, 6, Play(commander(4, 30), 8, 3))
    assert same.a_first_share == pytest.approx(0.5) and same.games == 24
    paired = paired_against(a, a, Controller("teacher"), 6, Play(commander(4, 30), 8, 3))
    assert paired.difference.mean == 0.0 and paired.a_rate.mean == paired.b_rate.mean


def test_swapping_the_sides_mirrors_the_figures():
    a, b = _net(0), _net(1)
    play = Play(commander(4, 30), 8, 5)
    ab, ba = head_to_head(a, b, 6, play), head_to_head(b, a, 6, play)
    assert ab.draws == ba.draws and ab.a_first_share == pytest.approx(1 - ba.a_first_share)
    pab = paired_against(a, b, Controller("teacher"), 6, play)
    pba = paired_against(b, a, Controller("teacher"), 6, play)
    assert pab.a_rate == pba.b_rate and pab.difference.mean == pytest.approx(-pba.difference.mean)


@pytest.mark.expensive  # importing ml.driver.compare loads GitPython, which runs git
def test_spent_counts_the_attempts_up_to_the_generation_compared():
    from ml.driver.compare import spent_by

    def entry(generation: int, verdict: str, cpu: float) -> dict:
        return {"generation": generation, "verdict": verdict, "stage_wall_s": {"selfplay": 2 * cpu, "gate": 1.0},
                "metrics": {"selfplay": {"selfplay/cpu_s": cpu, "selfplay/decisions": 100}, "gate": {}}}  # fmt: skip

    history = [entry(0, "accepted", 10.0), entry(1, "rejected", 20.0), entry(1, "accepted", 30.0), entry(2, "accepted", 40.0)]
    assert spent_by(history, 1) == {"attempts": 3, "cpu_s": 63.0, "wall_s": 123.0, "learner_decisions": 300.0}
    assert spent_by(history)["attempts"] == 4 and spent_by(history)["cpu_s"] == 104.0  # no gate cpu_s: its wall


@pytest.mark.expensive
def test_compare_two_generations_of_the_reference_run(reference_run, tmp_path: Path, capsys):
    from ml.driver.compare import compare

    repo = reference_run[0]
    assert compare(repo, (str(repo), "HEAD"), 16, (1, 0), tmp_path / "ab.json") == 0
    assert compare(repo, ("HEAD", str(repo)), 16, (0, 1), tmp_path / "ba.json") == 0
    ab, ba = (json.loads((tmp_path / f).read_text()) for f in ("ab.json", "ba.json"))
    assert [r["policy"] for r in ab["runs"]] == ["data/merged/students/gen001.pt", "data/merged/students/gen000.pt"]
    h, g = ab["head_to_head"], ba["head_to_head"]
    assert h["games"] == 16 and h["draws"] == g["draws"] and h["a_first_share"] == pytest.approx(1 - g["a_first_share"])
    p, q = ab["against_teachers"], ba["against_teachers"]
    assert (
        p["deals"] == 4 and p["a_rate"] == q["b_rate"] and p["difference"]["mean"] == pytest.approx(-q["difference"]["mean"])
    )
    for run, attempts in zip(ab["runs"], (2, 1), strict=True):  # spent up to the generation compared
        assert run["attempts"] == attempts and run["cpu_s"] > 0 and run["learner_decisions"] >= attempts * 600
    assert ab["params_difference"] == []
    out = capsys.readouterr().out
    assert "A's share of the first places" in out and "; 2 attempts to it" in out and "; 1 attempt to it" in out


@pytest.mark.expensive
def test_compare_refuses_in_one_line(reference_run, tmp_path: Path, capsys):
    from ml.driver.compare import compare

    repo = reference_run[0]
    other = tmp_path / "other"
    subprocess.run(["git", "clone", "-q", str(repo), str(other)], check=True)
    text = (other / "params.yaml").read_text().replace("name: commander", "name: openspiel:kuhn_poker", 1)
    (other / "params.yaml").write_text(text)
    git(other, "commit", "-qam", "another game")
    capsys.readouterr()
    assert compare(repo, (str(repo), str(other)), 16, (None, None), None) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "play different games (game.name: 'commander' vs 'openspiel:kuhn_poker')" in err
    assert compare(repo, (str(repo), "no-such-branch"), 16, (None, None), None) == 2
    assert "no-such-branch: not a clone's folder, nor a branch or commit" in capsys.readouterr().err
    assert compare(repo, (str(repo), str(repo)), 16, (7, None), None) == 2
    assert "generation 7 was not accepted (accepted: [0, 1])" in capsys.readouterr().err


@pytest.mark.expensive
def test_ppo_only_profile_runs_a_tiny_generation_and_compares_its_agents(reference_run, tmp_path: Path):
    """The reference run's copy goes on under ``ppo_only`` (the profile's sections, the TINY sizes over
    them, written by hand: the loop commits the edit): its generation 2 continues generation 1's agent,
    distils nothing, and ``compare`` takes the run's agents."""
    from ml.config.yaml_file import safe_yaml
    from tests.conftest import ROOT, TINY, run_loop, yaml_text

    repo = reference_run[0]
    params = safe_yaml().load((repo / "params.yaml").read_text())
    for section, values in safe_yaml().load((ROOT / "params.yaml").read_text())["profiles"]["ppo_only"].items():
        params[section].update(values)  # the profile, then the TINY sizes over it
    for section, values in TINY.items():
        params[section].update(values)
    assert params["loop"]["result"] == "agent" and params["train"]["source_weights"]["ppo"] == 0.0
    (repo / "params.yaml").write_text(yaml_text(params))
    res = run_loop(repo, "--max-generations", "3")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    history = json.loads((repo / "state/eval_history.json").read_text())
    assert [h["verdict"] for h in history] == ["accepted"] * 3
    assert history[2]["metrics"]["train"]["train/sampled_share"].get("ppo", 0.0) == 0.0  # no distillation
    assert history[1]["metrics"]["train"]["train/sampled_share"]["ppo"] > 0  # as the default profile did
    assert history[2]["metrics"]["selfplay"]["selfplay/start"] == "frozen:gen001"  # PPO continues its agent
    res = run_loop(repo, "compare", str(repo), "HEAD", "--generation-a", "2", "--generation-b", "1", "--games", "8",
                   "--json", str(tmp_path / "c.json"))  # fmt: skip
    assert res.returncode == 0, res.stderr
    report = json.loads((tmp_path / "c.json").read_text())
    assert [r["policy"] for r in report["runs"]] == ["data/merged/frozen/gen002.pt", "data/merged/frozen/gen001.pt"]
    assert [r["result"] for r in report["runs"]] == ["agent", "agent"]
