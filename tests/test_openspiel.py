"""OpenSpiel games through the loop's interfaces (``game.name: openspiel:<game>``).

Checks: the AEC adapter passes ``api_test`` and ``seed_test`` (kuhn_poker, tic_tac_toe,
4-player crazy_eights); rewards of zero-sum games are the scaled returns; outcomes and
rankings follow the returns (ties are draws); params name a bad game, a bad parameter or a
player-count mismatch; an OpenSpiel record round-trips through ``BatchWriter``,
``read_records`` and the dataset builder (observation and label back exactly, no game engine)
and a bad one is reported as ``file:line: field``; the MCTS teacher beats the uniform player
at kuhn_poker; every stage runs end to end on kuhn_poker in process, with NashConv of the
student, the empirical teacher and the uniform policy in ``metrics/train.json``; a tournament
and its Plackett-Luce fit work on it.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from pettingzoo.test import api_test, seed_test

from ml.config.params import ParamsError, params_from_dict
from ml.data.batch_files import BatchWriter, RecordError, read_records, scan_batches
from ml.data.dataset import load_teacher
from ml.game.openspiel.env import outcome_of
from ml.game.openspiel.spec import openspiel
from ml.game.record import OpenSpielRecord
from ml.game.registry import make_game
from ml.judge.elo import format_table, return_table
from ml.judge.plackett_luce import fit_plackett_luce
from ml.judge.tournament import TournamentPlay, play_tournament
from ml.model.policy import PolicyNet
from ml.play.controller import Controller
from ml.play.runner import Keep, Pods, play_games
from ml.play.seating import game_seeds
from tests.conftest import Pipeline, yaml_text


@pytest.mark.parametrize(("name", "params"), [("kuhn_poker", {}), ("tic_tac_toe", {}), ("crazy_eights", {"players": 4})])
def test_api(name: str, params: dict) -> None:
    api_test(openspiel(name, params).make_env(), num_cycles=200)


def test_seed() -> None:
    seed_test(lambda: openspiel("leduc_poker").make_env(), num_cycles=100)


def test_rewards_outcome_and_ranking() -> None:
    env = openspiel("kuhn_poker").make_env()
    for seed in range(20):
        env.reset(seed=seed)
        totals = dict.fromkeys(env.possible_agents, 0.0)
        for agent in env.agent_iter():
            obs, reward, term, trunc, _ = env.last()
            totals[agent] += reward
            env.step(None if term or trunc else int(np.flatnonzero(obs["action_mask"])[0]))
        returns = env.state.returns()
        assert [totals[a] for a in env.possible_agents] == pytest.approx([r / 2 for r in returns])  # kuhn: max |utility| 2
        game_id, outcome, winner, ranking = env.game_result()
        assert outcome == f"win_seat_{int(np.argmax(returns))}" and ranking[0] == winner and game_id.endswith(f"-{seed}")
    assert outcome_of([1.0, 1.0, -2.0]) == ("draw", None, [0, 1, 2])
    assert outcome_of([0.0, -5.0, 0.0, -9.0])[0] == "draw"


def test_params_errors() -> None:
    from ml.game.checks import check_params

    with pytest.raises(ParamsError, match=r"game\.pod_size is 4 but openspiel:kuhn_poker has 2 players"):
        params_from_dict(check=check_params, raw={"game": {"name": "openspiel:kuhn_poker"}})
    with pytest.raises(ParamsError, match="no such OpenSpiel game"):
        params_from_dict(
            check=check_params, raw={"game": {"name": "openspiel:nope", "pod_size": 2}, "gate": {"target_win_rate": 0.6}}
        )
    with pytest.raises(ParamsError, match="Unknown parameter 'colour'"):
        params_from_dict(
            check=check_params,
            raw={
                "game": {"name": "openspiel:kuhn_poker", "pod_size": 2, "openspiel_params": {"colour": 1}},
                "gate": {"target_win_rate": 0.6},
            },
        )
    with pytest.raises(ParamsError, match=r"game\.name must be"):
        params_from_dict(check=check_params, raw={"game": {"name": "chess"}})
    p = params_from_dict({"game": {"name": "openspiel:crazy_eights", "pod_size": 4, "openspiel_params": {"players": 4}}})
    spec = make_game(p.game, p.teacher)
    assert (spec.num_players, spec.num_actions, spec.obs_dim) == (4, 58, 319)


def _teacher_games(tmp: Path, n: int = 30) -> Path:
    game = openspiel("leduc_poker", mcts_simulations=10)
    with BatchWriter(tmp, "sim", "t") as writer:
        for r in play_games(
            Pods([["teacher", "random"]] * n, game_seeds(1, n)), {"teacher": Controller("teacher"), "random": Controller("random")},
            num_envs=4, generator=torch.Generator().manual_seed(0), keep=Keep(log_seats=lambda s: [0, 1]), game=game,
        ):  # fmt: skip
            writer.write_game(r.records, r.outcome)
    return writer.path


def test_record_round_trip_through_the_dataset(tmp_path: Path) -> None:
    path = _teacher_games(tmp_path)
    records = list(read_records(path))
    assert all(isinstance(r, OpenSpielRecord) and r.source == "sim" and r.game == "openspiel:leduc_poker" for r in records)
    line = json.loads(path.read_text().splitlines()[0])
    assert list(line)[:6] == ["game_id", "turn", "phase", "active_seat", "game_outcome", "game"]
    encoder = make_game(
        params_from_dict({"game": {"name": "openspiel:leduc_poker", "pod_size": 2}, "gate": {"target_win_rate": 0.6}}).game
    ).encoder()
    train_set, holdout, stats = load_teacher([tmp_path], 0.12, encoder)
    assert stats["teacher_decisions"] == len(records) == len(train_set) + len(holdout)
    both = np.concatenate([train_set.obs, holdout.obs])
    by_obs = {tuple(r.observation): r.action.action_idx for r in records}
    for obs, label in zip(both, np.concatenate([train_set.label, holdout.label]), strict=True):
        assert tuple(float(x) for x in obs) in by_obs and train_set.obs.shape[1] == 16
        assert train_set.action_mask.shape[1] == 3 and 0 <= label < 3
    assert set(np.unique(train_set.value_target)) <= {-1.0, 0.0, 1.0}


def test_bad_openspiel_record_names_file_line_field(tmp_path: Path) -> None:
    path = _teacher_games(tmp_path, n=2)
    lines = path.read_text().splitlines()
    bad = json.loads(lines[1])
    bad["action_mask"] = [0] * len(bad["action_mask"])
    lines[1] = json.dumps(bad)
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(RecordError, match=r":2: action\.action_idx: action_idx \d is masked out"):
        list(read_records(path))


def test_mcts_teacher_beats_uniform() -> None:
    game = openspiel("kuhn_poker", mcts_simulations=50)
    n = 200
    seatings = [["teacher", "random"] if g % 2 == 0 else ["random", "teacher"] for g in range(n)]
    results = play_games(
        Pods(seatings, game_seeds(3, n)), {"teacher": Controller("teacher"), "random": Controller("random")},
        num_envs=8, generator=torch.Generator().manual_seed(0), game=game,
    )  # fmt: skip
    teacher_return = sum(r.returns[r.seats.index("teacher")] for r in results)
    assert teacher_return > 0  # chips (scaled by 1/2) won by the teacher over 200 games


@pytest.mark.parametrize("pipeline", ["kuhn_poker"], indirect=True)
def test_kuhn_stages_end_to_end(pipeline: Pipeline) -> None:
    d = pipeline.dirs
    metrics = {p.stem: json.loads(p.read_text()) for p in d["m"].glob("*.json")}
    assert metrics["teacher"]["teacher/games"] == 60 and metrics["teacher"]["teacher/kind"] == "MCTS(20 simulations)"
    tr = metrics["train"]
    assert tr["train/nash_conv_uniform"] == pytest.approx(11 / 12)
    # the student imitates the teacher: its NashConv is near the empirical teacher's (measured 0.99 and 1.06)
    assert tr["train/nash_conv"] > 0 and abs(tr["train/nash_conv"] - tr["train/nash_conv_teacher_empirical"]) < 0.25
    assert 6 <= tr["train/teacher_infostates_covered"] <= 12  # of Kuhn's 12: at least each card's opening decision
    assert metrics["selfplay"]["selfplay/decisions"] >= 300
    assert metrics["gate"]["gate/eval_games"] % 2 == 0 and metrics["gate"]["gate/accepted"] is True
    (batch,) = scan_batches(d["candidate"], sources=("ppo",))
    recs = list(read_records(batch))
    assert recs and all(
        r.source == "ppo" and r.model_version == "gen-000-a1" and r.action_mask[r.action.action_idx] for r in recs
    )
    assert [p.name for p in (d["merged"] / "pool").iterdir()] == [batch.name]


@pytest.mark.parametrize("pipeline", ["kuhn_poker"], indirect=True)
def test_kuhn_tournament_and_ratings(pipeline: Pipeline) -> None:
    tmp = pipeline.root
    from ml.model.policy import load_policy

    student, _ = load_policy(tmp / "student.pt")
    assert isinstance(student, PolicyNet) and (student.obs_dim, student.num_actions) == (7, 2)
    game = openspiel("kuhn_poker", mcts_simulations=20)
    games = play_tournament({"gen000": student}, "gen000", TournamentPlay(games=40, num_envs=4, seed=5), game)
    rankings = [g["ranking"] for g in games]
    assert len(rankings) == 40 and all(len(r) == 2 and "gen000" in r for r in rankings)
    # zero-sum: each game's chips, the winner's first; kuhn's pots are 1 or 2 chips
    assert all(g["returns"][0] == -g["returns"][1] and g["returns"][0] in (1.0, 2.0) for g in games)
    table = {r["player"]: r for r in return_table(games)}
    gen = [g["returns"][g["ranking"].index("gen000")] for g in games]
    assert table["gen000"]["games"] == 40 and table["gen000"]["mean_return"] == pytest.approx(np.mean(gen), abs=1e-4)
    assert table["gen000"]["low"] < table["gen000"]["mean_return"] < table["gen000"]["high"]
    assert "chips/game" in format_table(
        {
            "attempt_id": "a",
            "generation": 0,
            "games": 40,
            "episodes": 40,
            "table": [],
            "gain": None,
            "returns": return_table(games),
        }
    )
    fit = fit_plackett_luce(rankings, anchor="teacher", prior_chain=["gen000"])
    assert {r["player"] for r in fit.table()} == {"teacher", "random", "gen000"}


@pytest.mark.parametrize(
    ("name", "params", "zero_sum"),
    [("kuhn_poker", {}, True), ("leduc_poker", {}, True), ("tic_tac_toe", {}, True),
     ("crazy_eights", {"players": 4}, False), ("crazy_eights", {"players": 2}, False), ("sheriff", {}, False)],
)  # fmt: skip
def test_zero_sum_detection(name: str, params: dict, zero_sum: bool) -> None:
    """Two-player zero-sum (or constant-sum) OpenSpiel games are judged by mean return; general-sum ones are not."""
    game = openspiel(name, params)
    assert game.zero_sum is zero_sum
    if zero_sum:
        assert game.par_return == 0.0
    else:
        with pytest.raises(ValueError, match="not a two-player zero-sum game"):
            _ = game.par_return


def test_commander_is_not_zero_sum() -> None:
    from ml.game.commander.spec import commander

    assert commander().zero_sum is False and commander().reward_scale == 1.0
    assert openspiel("leduc_poker").reward_scale == 13.0 and openspiel("kuhn_poker").reward_scale == 2.0


@pytest.mark.parametrize("pipeline", ["kuhn_poker"], indirect=True)
def test_kuhn_gate_decided_by_nash_conv(pipeline: Pipeline, tmp_path: Path) -> None:
    """gate.decide_by nash_conv: the two students' exact NashConv are in the verdict, and it decides alone."""
    from ml.config.yaml_file import safe_yaml
    from ml.judge.nashconv import nash_conv
    from ml.model.policy import load_policy
    from stages import gate

    raw = safe_yaml().load((pipeline.root / "params.yaml").read_text())
    raw["gate"].update(
        gated=True, decide_by="nash_conv", nash_conv_tolerance=10.0, target_return=1.9
    )  # an unreachable strength target
    (tmp_path / "params.yaml").write_text(yaml_text(raw))
    out = [a if a != str(pipeline.root / "cand.pt") else str(tmp_path / "cand.pt") for a in pipeline.gate_args]
    assert (
        gate.main(["--params", str(tmp_path / "params.yaml"), "--no-progress", *out, "--metrics", str(tmp_path / "gate.json")])
        == 0
    )
    g = json.loads((tmp_path / "gate.json").read_text())
    game = openspiel("kuhn_poker")
    assert g["gate/nash_conv_current"] == pytest.approx(nash_conv(load_policy(pipeline.root / "student.pt")[0], game))
    assert g["gate/nash_conv_candidate"] == pytest.approx(nash_conv(load_policy(tmp_path / "cand.pt")[0], game))
    assert "strength" in g["gate/failed"] and g["gate/accepted"] is True  # a NashConv rise of < 10 is inside the tolerance
    assert g["gate/not_deciding"] and g["gate/reasons"] == []


@pytest.mark.expensive  # GitPython (the driver) starts git
def test_kuhn_eval_reports_chips(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``loop.py eval`` of a zero-sum game: chips against the teacher and against the previous student, by deal."""
    from ml.driver.evaluate import evaluate
    from ml.driver.orchestrator import Loop
    from ml.model.policy import save_policy
    from tests.conftest import KUHN_TINY, make_project_copy, tiny_params

    repo = make_project_copy(tmp_path / "repo", tiny_params(KUHN_TINY))
    game = openspiel("kuhn_poker")
    torch.manual_seed(0)
    for name in ("gen000", "gen001"):
        save_policy(PolicyNet(game.obs_dim, (8,), game.num_actions), repo / "data/merged/students" / f"{name}.pt")
    assert evaluate(Loop(repo, echo=lambda *_: None), 40, tmp_path / "eval.json") == 0
    rows = json.loads((tmp_path / "eval.json").read_text())
    assert [r["deals"] for r in rows] == [20, 20]
    for r in rows:
        assert r["return_low"] <= r["mean_return"] <= r["return_high"] and -2 <= r["mean_return"] <= 2
    assert rows[0]["previous_return"] is None  # the first student has no previous one
    assert rows[1]["previous_low"] <= rows[1]["previous_return"] <= rows[1]["previous_high"]
    out = capsys.readouterr().out
    assert "chips per game, par 0" in out and "chips vs previous [95%]" in out
    assert f"{rows[1]['previous_return']:+.3f} [{rows[1]['previous_low']:+.3f}, {rows[1]['previous_high']:+.3f}]" in out


def test_nash_conv_metrics_for_any_small_zero_sum_game() -> None:
    """train/nash_conv is not a list of poker games: any two-player zero-sum game under the state limit gets it."""
    from ml.game.checks import NASH_CONV_MAX_STATES, nash_conv_refusal
    from ml.game.openspiel.players import count_histories
    from ml.judge.nashconv import nash_conv_metrics

    small = openspiel("liars_dice", {"numdice": 1, "dice_sides": 3})
    assert nash_conv_refusal(small) is None and count_histories(small.openspiel_game(), NASH_CONV_MAX_STATES) == 1147
    got = nash_conv_metrics(PolicyNet(small.obs_dim, (8,), small.num_actions), small, None)
    assert set(got) == {"train/nash_conv", "train/nash_conv_uniform"} and got["train/nash_conv"] > 0
    assert nash_conv_metrics(PolicyNet(9 * 3, (8,), 9), openspiel("tic_tac_toe"), None) == {}  # over the limit
    assert nash_conv_refusal(small, limit=1000) is not None  # the limit decides
