"""Curriculum phases in a temporary copy of the project (real DVC and git).

Checks: a three-phase curriculum (ungated warm-up, gated self-play, gated gauntlet against
the self-play phase's model) runs to the end: one commit per attempt with the phase in the
message; `dvc params diff` between the first attempts of two phases shows the second
phase's overrides; the gauntlet's self-play opponent is resolved at run time to the
frozen agent that passed the self-play phase; `curriculum_state.json` logs every attempt with
its phase and overrides; `abort_if` ends an attempt early as a failed attempt with the
reason; phase validation errors name the phase.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ml.curriculum import Phase, phase_overrides
from ml.params import ParamsError, params_from_dict
from tests.conftest import git, make_project_copy, run_loop, tiny_params

# Tiny agents are no match for the heuristic teacher, and in 4-pods hardly for random players
# either: this test plays 2-player pods and gates against a random player (parity 0.5).
EASY_GATE = {
    "opponent": "random",
    "target_win_rate": 0.6,
    "alpha": 0.2,
    "beta": 0.2,
    "min_games": 8,
    "max_games": 80,
    "student_games": 8,
}
CURRICULUM = [
    {"name": "warmup", "generations": 1, "gated": False, "overrides": {"selfplay": {"opponent_mix": {"random": 1.0}}}},
    {"name": "selfplay", "generations": 1, "gated": True,
     "overrides": {"selfplay": {"ent_coef": 0.02, "opponent_mix": {"random": 0.8, "self": 0.2}}, "gate": EASY_GATE}},
    {"name": "gauntlet", "generations": 1, "gated": True, "opponent": "previous_phase", "overrides": {"gate": EASY_GATE}},
]  # fmt: skip


def dvc(repo: Path, *args: str) -> str:
    env = {**os.environ, "DVC_NO_ANALYTICS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "dvc", *args], cwd=repo, env=env, check=True, capture_output=True, text=True
    ).stdout


@pytest.mark.expensive
def test_three_phase_curriculum(tmp_path: Path):
    params = tiny_params({"game": {"pod_size": 2}, "loop": {"max_generations": 9, "max_retries": 6}})
    params["gate"].update(target_win_rate=0.6)
    params["curriculum"] = CURRICULUM
    repo = make_project_copy(tmp_path / "repo", params)
    res = run_loop(repo)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert "curriculum finished (3 phases)" in res.stdout
    subjects = git(repo, "log", "--reverse", "--format=%H %s", "--grep=Attempt-Id:").splitlines()
    attempts = [line.split(" ", 1) for line in subjects if " attempt " in line]
    phases = [s.split("| phase ")[1].split(" ")[0] for _, s in attempts]
    assert phases[0] == "warmup" and phases[-1] == "gauntlet" and "selfplay" in phases
    assert phases == sorted(phases, key=["warmup", "selfplay", "gauntlet"].index)  # in order, retries allowed
    first = {p: sha for (sha, _), p in reversed(list(zip(attempts, phases, strict=True)))}
    diff = dvc(repo, "params", "diff", first["warmup"], first["selfplay"])
    assert "selfplay.ent_coef" in diff and "gate.gated" in diff and "selfplay.opponent_mix" in diff
    gauntlet = yaml.safe_load(git(repo, "show", f"{first['gauntlet']}:params.yaml"))
    assert gauntlet["selfplay"]["frozen_names"] == ["gen001"] and gauntlet["selfplay"]["opponent_mix"] == {"frozen": 1.0}
    assert gauntlet["selfplay"]["ent_coef"] == 0.01  # the self-play phase's override was restored
    state = json.loads((repo / "state/curriculum_state.json").read_text())
    assert state["status"] == "done" and state["phase_winners"] == {
        "warmup": "gen000",
        "selfplay": "gen001",
        "gauntlet": "gen002",
    }
    log_phases = [e["phase"] for e in state["log"] if e["verdict"] != "override"]
    assert log_phases == phases
    assert state["log"][1]["overrides"]["selfplay.ent_coef"] == 0.02 or "selfplay.ent_coef" in state["log"][1]["overrides"]


@pytest.mark.expensive
def test_abort_if_fails_the_attempt(tmp_path: Path):
    params = tiny_params({"loop": {"max_generations": 1, "max_retries": 0}})
    params["curriculum"] = [
        {"name": "doomed", "generations": 1, "abort_if": {"metric": "train_win_rate", "below": 1.01, "at_steps": 100}}
    ]
    repo = make_project_copy(tmp_path / "repo", params)
    res = run_loop(repo)
    assert res.returncode == 3 and "ABORTED" in res.stdout and "BLOCKED" in res.stdout, res.stdout[-2000:]
    state = json.loads((repo / "state/curriculum_state.json").read_text())
    entry = state["log"][0]
    assert entry["verdict"] == "aborted" and entry["reasons"][0].startswith("abort_if: selfplay/train_win_rate")
    assert "attempt 1: aborted | phase doomed" in git(repo, "log", "-1", "--format=%s")


def test_phase_rules():
    with pytest.raises(ParamsError, match="curriculum"):
        params_from_dict({"curriculum": [{"name": "x", "generations": 0}]})
    with pytest.raises(ParamsError, match="must exceed parity"):
        params_from_dict({"game": {"pod_size": 2}, "gate": {"target_win_rate": 0.35}})
    with pytest.raises(ParamsError, match="may not override"):
        params_from_dict({"curriculum": [{"name": "x", "generations": 1, "overrides": {"run": {"seed": 1}}}]})
    gauntlet = Phase(name="g", generations=1, opponent="previous_phase")
    with pytest.raises(ValueError, match="previous phase"):
        phase_overrides(gauntlet, None)
    out = phase_overrides(gauntlet, "gen004")
    assert out["selfplay"]["frozen_names"] == ["gen004"] and out["gate"]["gated"] is True


def test_push_fails_once_then_works(tmp_path: Path):
    from ml.orchestrator import Loop

    repo = make_project_copy(tmp_path / "repo", tiny_params())
    store, bare = tmp_path / "dvc-store", tmp_path / "remote.git"
    git(repo, "remote", "add", "origin", str(bare))  # does not exist yet: the first push fails
    dvc(repo, "remote", "add", "-d", "local", str(store))
    git(repo, "commit", "-qam", "remotes")
    (repo / "data").mkdir(exist_ok=True)
    (repo / "data/pool").mkdir()
    (repo / "data/pool/x.txt").write_text("payload\n")
    dvc(repo, "add", "data/pool")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "data")
    messages: list[str] = []
    loop = Loop(repo, echo=messages.append)
    assert loop.push(tries=2, backoff_s=0.01) is False
    assert any("push failed" in m for m in messages) and (repo / ".dvc/tmp/loop/push-pending").exists()
    subprocess.run(["git", "init", "-q", "--bare", str(bare)], check=True)
    assert loop.push(tries=2, backoff_s=0.01) is True
    assert not (repo / ".dvc/tmp/loop/push-pending").exists()
    assert git(bare, "log", "-1", "--format=%s", "main").strip() == "data"
    assert any(store.rglob("*")), "the DVC data reached the remote store"
