"""Episodes are counted: every stage's metrics report the games it played, and an attempt sums them.

Checks: on the Commander pod and on kuhn_poker (the six stages in process), ``<stage>/episodes``
is the teacher's games, 0 for train and merge (they play none), self-play's PPO episodes, the
export's games and the gate's pods of both checks; ``ml.driver.history.attempt_episodes`` sums
the stages that ran and leaves out the ones DVC skipped; a tournament entry counts its games.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ml.driver.history import attempt_episodes
from tests.conftest import KUHN_TINY, TINY, Pipeline

STAGES = ("teacher", "train", "selfplay", "export", "gate", "merge")


def _check_stage_episodes(pipeline: Pipeline, teacher_games: int, export_games: int) -> dict:
    m = {stage: pipeline.metrics(stage) for stage in STAGES}
    episodes = {stage: m[stage][f"{stage}/episodes"] for stage in STAGES}
    assert episodes["teacher"] == m["teacher"]["teacher/games"] == teacher_games
    assert episodes["train"] == 0 and episodes["merge"] == 0
    assert episodes["selfplay"] == m["selfplay"]["selfplay/episodes"] > 0
    assert episodes["export"] == m["export"]["export/games_played"] == export_games
    return m


def test_commander_stages_report_episodes(pipeline: Pipeline) -> None:
    m = _check_stage_episodes(pipeline, TINY["teacher"]["games"], TINY["export"]["games"])
    g = m["gate"]
    assert g["gate/strength_test"] == "first_place" and "gate/mean_return" not in g
    # the strength SPRT counts draws as games; the student's counts decisive games, draws beside
    assert g["gate/episodes"] == g["gate/eval_games"] + g["gate/student_games"] + g["gate/student_draws"] > 0


def test_the_stages_that_ran_are_those_whose_lock_entry_changed(tmp_path: Path) -> None:
    """A stage that ended before a kill, skipped by DVC on resume, still ran in the attempt; the teacher,
    cached since the first attempt, did not (its entry is the committed one)."""
    from ml.driver.history import stages_run

    committed = "schema: '2.0'\nstages:\n  teacher:\n    cmd: t\n  train:\n    cmd: a\n  rate:\n    cmd: r1\n"
    (tmp_path / "dvc.lock").write_text(committed.replace("cmd: a", "cmd: b").replace("cmd: r1", "cmd: r2"))
    assert stages_run(tmp_path, committed.encode()) == ["train", "rate"]
    assert stages_run(tmp_path, None) == ["teacher", "train", "rate"]  # the first attempt: every stage ran
    (tmp_path / "dvc.lock").write_text(committed)
    assert stages_run(tmp_path, committed.encode()) == []


@pytest.mark.parametrize("pipeline", ["kuhn_poker"], indirect=True)
def test_kuhn_stages_report_episodes_and_the_gate_judges_chips(pipeline: Pipeline) -> None:
    m = _check_stage_episodes(pipeline, KUHN_TINY["teacher"]["games"], TINY["export"]["games"])
    g = m["gate"]
    assert g["gate/strength_test"] == "mean_return"
    assert g["gate/episodes"] == 2 * (g["gate/eval_deals"] + g["gate/student_deals"])  # two games a deal
    assert g["gate/eval_games"] == 2 * g["gate/eval_deals"]  # the first places of the same deals, beside the chips
    assert g["gate/return_low"] <= g["gate/mean_return"] <= g["gate/return_high"]
    assert -2 <= g["gate/mean_return"] <= 2  # chips: kuhn's pots are 1 or 2, not the env's rewards scaled by 1/2
    assert g["gate/student_return_low"] <= g["gate/student_mean_return"] <= g["gate/student_return_high"]


def test_attempt_episodes_sums_the_stages_that_ran(tmp_path: Path) -> None:
    (tmp_path / "metrics").mkdir()
    for stage, n in (("teacher", 400), ("train", 0), ("selfplay", 900), ("export", 100), ("gate", 60)):
        (tmp_path / "metrics" / f"{stage}.json").write_text(json.dumps({f"{stage}/episodes": n}))
    ran = {"train": 3.0, "selfplay": 10.0, "export": 1.0, "gate": 2.0, "merge": 0.1}  # teacher skipped: cached
    assert attempt_episodes(tmp_path, ran) == 900 + 100 + 60  # merge's metrics not written yet: 0
    assert attempt_episodes(tmp_path, {"teacher": 1.0, **ran}) == 400 + 1060
    assert attempt_episodes(tmp_path, {}) == 0


@pytest.mark.parametrize("pipeline", ["kuhn_poker"], indirect=True)
def test_tournament_entry_counts_its_games(pipeline: Pipeline, tmp_path: Path) -> None:
    from ml.game.openspiel.spec import openspiel
    from ml.judge.elo import PlayedTournament, record_tournament
    from ml.judge.tournament import TournamentPlay, play_tournament
    from ml.model.policy import load_policy

    student, _ = load_policy(pipeline.root / "student.pt")
    game, play = openspiel("kuhn_poker", mcts_simulations=5), TournamentPlay(games=8, num_envs=4, seed=3)
    first = PlayedTournament(generation=0, accepted=True, students=["gen000"],
                             games=play_tournament({"gen000": student}, "gen000", play, game))  # fmt: skip
    entry = record_tournament(tmp_path, "a1", first)
    assert entry["episodes"] == 8 == entry["games"]
    assert sum(r["games"] for r in entry.get("returns", [])) == 16  # chips of both seats of each game (kuhn is zero-sum)
    assert record_tournament(tmp_path, "a1", first)["episodes"] == 8  # a rerun adds nothing
    students = {"gen000": student, "gen001": student}
    games = play_tournament(students, "gen001", play, game)
    second = record_tournament(
        tmp_path, "a2", PlayedTournament(generation=1, accepted=True, students=sorted(students), games=games)
    )
    assert second["episodes"] == 8 and second["games"] == 16


@pytest.mark.expensive
def test_kuhn_loop_counts_episodes_and_plots_nash_conv(tmp_path: Path) -> None:
    """A 2-generation kuhn_poker loop: each attempt's episodes are its stages' games (the rate stage's
    tournament among them, the games the driver's refit records), plots/generations.json sums them, and ``dvc plots show`` draws NashConv against them."""
    import os
    import subprocess
    import sys

    from tests.conftest import make_project_copy, run_loop, tiny_params

    repo = make_project_copy(tmp_path / "repo", tiny_params(KUHN_TINY))
    res = run_loop(repo)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    history = json.loads((repo / "state/eval_history.json").read_text())
    elo = {e["attempt_id"]: e for e in json.loads((repo / "state/elo_history.json").read_text())}
    assert [h["verdict"] for h in history] == ["accepted", "accepted"]
    for h in history:
        stages = sum(h["metrics"][s][f"{s}/episodes"] for s in h["stage_wall_s"])
        assert h["episodes"] == stages > 0 and "rate" in h["stage_wall_s"]  # the rate stage's tournament among them
        assert h["metrics"]["rate"]["rate/episodes"] == elo[h["attempt_id"]]["episodes"] > 0
        assert h["figures"]["return_low"] <= h["figures"]["mean_return"] <= h["figures"]["return_high"]
    assert "teacher" in history[0]["stage_wall_s"] and "teacher" not in history[1]["stage_wall_s"]  # cached: not counted again
    rows = json.loads((repo / "plots/generations.json").read_text())
    assert [r["cumulative_episodes"] for r in rows] == [
        history[0]["episodes"],
        history[0]["episodes"] + history[1]["episodes"],
    ]
    assert [r["nash_conv"] for r in rows] == [h["metrics"]["train"]["train/nash_conv"] for h in history]
    env = {**os.environ, "DVC_NO_ANALYTICS": "1"}
    shown = subprocess.run([sys.executable, "-m", "dvc", "plots", "show", "--json"], cwd=repo, env=env, capture_output=True,
                           text=True, check=True)  # fmt: skip
    values = json.loads(shown.stdout)["data"]["generation_nash_conv"][0]["content"]["data"]["values"]
    assert [int(v["cumulative_episodes"]) for v in values] == [r["cumulative_episodes"] for r in rows]
    chips = json.loads(shown.stdout)["data"]["generation_chips"][0]["content"]["data"]["values"]
    assert chips
