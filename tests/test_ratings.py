"""Plackett-Luce Elo: recovery of known strengths, interval coverage, order independence.

Checks: over 50 repetitions of simulated 4-player tournaments with known strengths,
the 95% intervals of the generations cover the true Elo in at least 90% of cases;
shuffling the order of the games leaves every rating unchanged to 1e-6; the anchor sits
at 1500; gains between generations carry an interval; bad input raises; seat rotation puts
the newest player in every seat; the tournament file is read by the JSONL reader.
"""

from __future__ import annotations

import numpy as np
import pytest

from ml.judge.plackett_luce import ELO_BASE, ELO_SCALE, fit_plackett_luce

TRUE_ELO = {"teacher": 1500.0, "random": 1350.0, "gen000": 1420.0, "gen001": 1480.0, "gen002": 1560.0, "gen003": 1600.0}
GENS = ["gen000", "gen001", "gen002", "gen003"]


def simulate(rng: np.random.Generator, games: int = 600, pod: int = 4) -> list[list[str]]:
    """PL rankings by the Gumbel trick: sorting theta + Gumbel noise gives a PL sample."""
    names = list(TRUE_ELO)
    theta = np.asarray([(TRUE_ELO[n] - ELO_BASE) / ELO_SCALE for n in names])
    out = []
    for _ in range(games):
        seats = rng.choice(len(names), size=pod, replace=False)
        order = np.argsort(-(theta[seats] + rng.gumbel(size=pod)))
        out.append([names[seats[i]] for i in order])
    return out


def test_intervals_cover_truth():
    rng = np.random.default_rng(0)
    covered = total = 0
    for _ in range(50):
        fit = fit_plackett_luce(simulate(rng), anchor="teacher", prior_chain=GENS)
        for g in GENS:
            low, high = fit.elo_interval(g)
            covered += low <= TRUE_ELO[g] <= high
            total += 1
    print(f"coverage of 95% intervals: {covered / total:.3f} over {total}")
    assert covered / total >= 0.90


def test_order_of_games_does_not_matter():
    rng = np.random.default_rng(1)
    games = simulate(rng, games=300)
    a = fit_plackett_luce(games, anchor="teacher", prior_chain=GENS)
    shuffled = [games[i] for i in rng.permutation(len(games))]
    b = fit_plackett_luce(shuffled, anchor="teacher", prior_chain=GENS)
    for name in TRUE_ELO:
        assert a.elo(name) == pytest.approx(b.elo(name), abs=1e-6)
        assert a.elo_interval(name)[0] == pytest.approx(b.elo_interval(name)[0], abs=1e-6)


def test_anchor_gain_and_table():
    fit = fit_plackett_luce(simulate(np.random.default_rng(2)), anchor="teacher", prior_chain=GENS)
    assert fit.elo("teacher") == ELO_BASE and fit.elo_interval("teacher") == (ELO_BASE, ELO_BASE)
    gain, low, high = fit.gain("gen003", "gen000")
    assert low < gain < high and low > 0  # 180 true Elo apart: clearly positive with 600 games
    rows = fit.table()
    assert rows[0]["elo"] >= rows[-1]["elo"] and {r["player"] for r in rows} == set(TRUE_ELO)
    assert sum(r["games"] for r in rows) == 600 * 4


def test_bad_input():
    with pytest.raises(ValueError, match="no games"):
        fit_plackett_luce([], anchor="teacher")
    with pytest.raises(ValueError, match="anchor"):
        fit_plackett_luce([["a", "b"]], anchor="teacher")
    with pytest.raises(ValueError, match="same length"):
        fit_plackett_luce([["a", "b"], ["a", "b", "c"]], anchor="a")


def test_rotated_seatings_put_the_agent_in_every_seat_and_draw_others_in_order():
    from ml.judge.tournament import tournament_seatings
    from ml.play.seating import rotated_seatings

    calls: list[int] = []
    seatings = rotated_seatings(8, 4, "agent", lambda g: calls.append(g) or [f"o{g}"] * 3)
    assert calls == list(range(8)) and [s.index("agent") for s in seatings] == [0, 1, 2, 3] * 2
    assert seatings[5] == ["o5", "agent", "o5", "o5"]
    with pytest.raises(ValueError, match="2 other seats"):
        rotated_seatings(1, 4, "agent", lambda g: ["x", "y"])
    pods = tournament_seatings("gen001", ["teacher", "random", "gen000"], 6, 4, np.random.default_rng(0))
    assert [p.index("gen001") for p in pods] == [0, 1, 2, 3, 0, 1]
    assert all(
        sorted(p[:i] + p[i + 1 :]) == ["gen000", "random", "teacher"] for p, i in zip(pods, [0, 1, 2, 3, 0, 1], strict=True)
    )


def test_tournament_file_is_read_with_the_jsonl_reader(tmp_path):
    from ml.base.io import DataFileError
    from ml.judge.elo import TOURNAMENT_FILE, load_tournament

    assert load_tournament(tmp_path) == []
    path = tmp_path / TOURNAMENT_FILE
    path.parent.mkdir(parents=True)
    path.write_text('{"attempt_id": "a", "ranking": ["x", "y"]}\n{"attempt_id": "b", "ranking": ["y", "x"]}\n')
    assert [g["attempt_id"] for g in load_tournament(tmp_path)] == ["a", "b"]
    path.write_text('{"attempt_id": "a", "ranking": ["x", "y"]}\n\n{"attempt_id": "b", "ranking": ["y", "x"]}\n')
    with pytest.raises(DataFileError, match=r"tournament.jsonl:2: empty line"):  # as every JSONL reader
        load_tournament(tmp_path)
    path.write_text('{"attempt_id": "a", "ranking": ["x", "y"]}\n{"attempt_id": "b", "rank')
    with pytest.raises(DataFileError, match=r"tournament.jsonl:2"):
        load_tournament(tmp_path)


def test_record_tournament_appends_the_games_once_and_refits_every_generation(tmp_path):
    import json

    from ml.judge.elo import ELO_FILE, TOURNAMENT_FILE, PlayedTournament, record_tournament

    g0 = [{"ranking": ["gen000", "random"]}, {"ranking": ["teacher", "gen000"]}, {"ranking": ["gen000", "teacher"]}]
    g1 = [{"ranking": ["gen001", "gen000"]}, {"ranking": ["teacher", "gen001"]}, {"ranking": ["gen001", "random"]}]
    first = record_tournament(tmp_path, "a0", PlayedTournament(generation=0, accepted=True, students=["gen000"], games=g0))
    assert (first["games"], first["episodes"], first["gain"]) == (3, 3, None)
    second = record_tournament(
        tmp_path, "a1", PlayedTournament(generation=1, accepted=True, students=["gen000", "gen001"], games=g1), 200.0
    )
    lines = (tmp_path / TOURNAMENT_FILE).read_text().splitlines()
    assert lines[0] == '{"attempt_id": "a0", "ranking": ["gen000", "random"]}' and len(lines) == 6
    fit = fit_plackett_luce([g["ranking"] for g in g0 + g1], anchor="teacher", prior_chain=["gen000", "gen001"],
                            prior_sigma_elo=200.0)  # fmt: skip
    assert second["table"] == fit.table() and (second["games"], second["episodes"]) == (6, 3)
    gain = fit.gain("gen001", "gen000")
    assert second["gain"] == {"new": "gen001", "old": "gen000", "elo": round(gain[0], 1), "low": round(gain[1], 1),
                              "high": round(gain[2], 1)}  # fmt: skip
    again = record_tournament(tmp_path, "a1", PlayedTournament(generation=1, accepted=True, students=[], games=[]))
    assert again == second and len((tmp_path / TOURNAMENT_FILE).read_text().splitlines()) == 6  # keyed by attempt
    assert [e["attempt_id"] for e in json.loads((tmp_path / ELO_FILE).read_text())] == ["a0", "a1"]
    # generation 2 loses to generation 0 but beats generation 1: its gain is over the strongest earlier one, gen000
    g2 = (
        [{"ranking": ["gen000", "gen002"]}] * 6
        + [{"ranking": ["gen002", "gen001"]}] * 6
        + [{"ranking": ["gen000", "gen001"]}] * 6
    )
    third = record_tournament(
        tmp_path, "a2", PlayedTournament(generation=2, accepted=True, students=["gen000", "gen001", "gen002"], games=g2), 200.0
    )
    elo = {r["player"]: r["elo"] for r in third["table"]}
    assert elo["gen000"] > elo["gen001"] and third["gain"] is not None
    assert third["gain"]["old"] == "gen000" and third["gain"]["elo"] == pytest.approx(elo["gen002"] - elo["gen000"], abs=0.2)


def test_played_tournament_file_names_a_bad_field(tmp_path):
    from ml.base.io import DataFileError
    from ml.judge.elo import PlayedTournament

    played = PlayedTournament(generation=2, accepted=True, students=["gen000"], games=[{"ranking": ["gen002", "random"]}])
    played.write(tmp_path / "t.json")
    assert PlayedTournament.read(tmp_path / "t.json") == played and played.newest == "gen002"
    (tmp_path / "t.json").write_text('{"generation": 2, "accepted": true, "students": [], "games": [{"rank": []}]}')
    with pytest.raises(DataFileError, match=r"t\.json: games\.0\.ranking: Field required"):
        PlayedTournament.read(tmp_path / "t.json")


def test_rate_stage_plays_the_tournament_of_an_accepted_gate_only(tmp_path):
    """``stages.rate`` plays what ``play_tournament`` plays with the params' seed and sizes, and nothing when rejected."""
    import json

    from ml.base.io import read_json
    from ml.config.params import load_params
    from ml.config.yaml_file import safe_yaml
    from ml.game.commander.encoding import OBS_DIM
    from ml.game.registry import make_game
    from ml.judge.elo import PlayedTournament
    from ml.judge.tournament import TournamentPlay, play_tournament
    from ml.model.policy import PolicyNet, save_policy
    from stages.rate import main
    from tests.conftest import tiny_params

    (tmp_path / "students").mkdir()
    net = PolicyNet(OBS_DIM, (16,))
    save_policy(net, tmp_path / "students/gen000.pt")
    params = tiny_params({"rating": {"games": 8}})
    safe_yaml().dump(params, tmp_path / "params.yaml")
    argv = ["--params", str(tmp_path / "params.yaml"), "--gate", str(tmp_path / "gate.json"), "--students",
            str(tmp_path / "students"), "--out", str(tmp_path / "t.json"), "--metrics", str(tmp_path / "rate.json")]  # fmt: skip
    (tmp_path / "gate.json").write_text(json.dumps({"gate/accepted": False}))
    assert main(argv) == 0
    assert PlayedTournament.read(tmp_path / "t.json").games == [] and read_json(tmp_path / "rate.json")["rate/episodes"] == 0
    (tmp_path / "gate.json").write_text(json.dumps({"gate/accepted": True}))
    assert main(argv) == 0
    played = PlayedTournament.read(tmp_path / "t.json")
    p = load_params(tmp_path / "params.yaml")
    play = TournamentPlay(8, p.selfplay.num_envs, p.stage_seed("rating"), p.compute.chunk_games)
    want = play_tournament({"gen000": net}, "gen000", play, make_game(p.game, p.teacher), progress=False)
    assert played.students == ["gen000"] and played.games == want and len(want) == 8
    assert read_json(tmp_path / "rate.json")["rate/episodes"] == 8


@pytest.mark.parametrize(
    ("gate", "students", "said"),
    [
        (None, ["gen000"], "gate.json: not found"),
        ("{bad", ["gen000"], "gate.json:1: invalid JSON"),
        ('{"gate/batch": "x"}', ["gen000"], "gate.json: gate/accepted: missing or not true/false"),
        ('{"gate/accepted": true}', [], "students: no gen000.pt, the accepted student the merge stage puts there"),
        ('{"gate/accepted": true}', ["gen000!"], "gen000.pt"),
    ],
)
def test_rate_stage_refuses_bad_inputs_in_one_line(tmp_path, capsys, gate: str | None, students: list[str], said: str):
    """A missing or foreign verdict file, or no checkpoint of the accepted student: one line, exit 2, nothing written."""
    from ml.config.yaml_file import safe_yaml
    from ml.game.commander.encoding import OBS_DIM
    from ml.model.policy import PolicyNet, save_policy
    from stages.rate import main
    from tests.conftest import tiny_params

    (tmp_path / "students").mkdir()
    for name in students:
        path = tmp_path / "students" / f"{name.rstrip('!')}.pt"
        if name.endswith("!"):
            path.write_bytes(b"not a checkpoint")
        else:
            save_policy(PolicyNet(OBS_DIM, (16,)), path)
    if gate is not None:
        (tmp_path / "gate.json").write_text(gate)
    safe_yaml().dump(tiny_params({"rating": {"games": 8}}), tmp_path / "params.yaml")
    argv = ["--params", str(tmp_path / "params.yaml"), "--gate", str(tmp_path / "gate.json"), "--students",
            str(tmp_path / "students"), "--out", str(tmp_path / "t.json"), "--metrics", str(tmp_path / "rate.json")]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and said in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "t.json").exists() and not (tmp_path / "rate.json").exists()
