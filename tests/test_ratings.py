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

from ml.judge.ratings import ELO_BASE, ELO_SCALE, fit_plackett_luce

TRUE_ELO = {"heuristic": 1500.0, "random": 1350.0, "gen000": 1420.0, "gen001": 1480.0, "gen002": 1560.0, "gen003": 1600.0}
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
        fit = fit_plackett_luce(simulate(rng), anchor="heuristic", prior_chain=GENS)
        for g in GENS:
            low, high = fit.elo_interval(g)
            covered += low <= TRUE_ELO[g] <= high
            total += 1
    print(f"coverage of 95% intervals: {covered / total:.3f} over {total}")
    assert covered / total >= 0.90


def test_order_of_games_does_not_matter():
    rng = np.random.default_rng(1)
    games = simulate(rng, games=300)
    a = fit_plackett_luce(games, anchor="heuristic", prior_chain=GENS)
    shuffled = [games[i] for i in rng.permutation(len(games))]
    b = fit_plackett_luce(shuffled, anchor="heuristic", prior_chain=GENS)
    for name in TRUE_ELO:
        assert a.elo(name) == pytest.approx(b.elo(name), abs=1e-6)
        assert a.elo_interval(name)[0] == pytest.approx(b.elo_interval(name)[0], abs=1e-6)


def test_anchor_gain_and_table():
    fit = fit_plackett_luce(simulate(np.random.default_rng(2)), anchor="heuristic", prior_chain=GENS)
    assert fit.elo("heuristic") == ELO_BASE and fit.elo_interval("heuristic") == (ELO_BASE, ELO_BASE)
    gain, low, high = fit.gain("gen003", "gen000")
    assert low < gain < high and low > 0  # 180 true Elo apart: clearly positive with 600 games
    rows = fit.table()
    assert rows[0]["elo"] >= rows[-1]["elo"] and {r["player"] for r in rows} == set(TRUE_ELO)
    assert sum(r["games"] for r in rows) == 600 * 4


def test_bad_input():
    with pytest.raises(ValueError, match="no games"):
        fit_plackett_luce([], anchor="heuristic")
    with pytest.raises(ValueError, match="anchor"):
        fit_plackett_luce([["a", "b"]], anchor="heuristic")
    with pytest.raises(ValueError, match="same length"):
        fit_plackett_luce([["a", "b"], ["a", "b", "c"]], anchor="a")


def test_rotated_seatings_put_the_agent_in_every_seat_and_draw_others_in_order():
    from ml.judge.ratings import tournament_seatings
    from ml.play.rollout import rotated_seatings

    calls: list[int] = []
    seatings = rotated_seatings(8, 4, "agent", lambda g: calls.append(g) or [f"o{g}"] * 3)
    assert calls == list(range(8)) and [s.index("agent") for s in seatings] == [0, 1, 2, 3] * 2
    assert seatings[5] == ["o5", "agent", "o5", "o5"]
    with pytest.raises(ValueError, match="2 other seats"):
        rotated_seatings(1, 4, "agent", lambda g: ["x", "y"])
    pods = tournament_seatings("gen001", ["heuristic", "random", "gen000"], 6, 4, np.random.default_rng(0))
    assert [p.index("gen001") for p in pods] == [0, 1, 2, 3, 0, 1]
    assert all(
        sorted(p[:i] + p[i + 1 :]) == ["gen000", "heuristic", "random"] for p, i in zip(pods, [0, 1, 2, 3, 0, 1], strict=True)
    )


def test_tournament_file_is_read_with_the_jsonl_reader(tmp_path):
    from ml.base.io import DataFileError
    from ml.judge.ratings import TOURNAMENT_FILE, load_tournament

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
