"""The gate's statistics on simulated candidates of known strength (no real games).

Checks: over 400 seeded runs of the whole gate with a Plackett-Luce game model, a
candidate equal to the reference is accepted at most 7% of the time and a candidate at
the target rate at least 90%; the same holds on game models where deals matter
(``tests/test_deals.py``); the SPRT stops early on clear cases; Wald's bounds and LLR
match hand-computed values; the McNemar check flags a real drop and not a tie; an
ungated verdict accepts but keeps the reasons.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from ml.judge.sequential import SPRT, sequential_test, student_non_inferiority
from ml.judge.stats import McNemarResult, mcnemar_regression
from ml.judge.verdict import BatchQuality, InChips, NashConvCheck, Summary, verdict

POD = 4
TARGET = 0.35
RUNS = 400


def pl_deals(strength: float, rng: np.random.Generator):
    """Duplicate deals of a Plackett-Luce game model: the candidate (strength ``strength``)
    against three references of strength 1 takes first place with probability s/(s+3)."""
    p_first = strength / (strength + POD - 1)
    while True:
        yield list(rng.random(POD) < p_first)


def _passing_checks():
    holdout = McNemarResult(
        regression=False, drop=0.0, p_value=1.0, only_current=0, only_candidate=0, accuracy_current=0.8, accuracy_candidate=0.8
    )
    student = student_non_inferiority(iter([[True, False, False, False]] * 200), POD, 0.05)
    none = Summary(None, None, None, None)
    return holdout, student, BatchQuality(10, 100, 1.0, {"attack": 100}, none, none)


def gate_accept_rate(p_first: float, seed: int) -> tuple[float, float]:
    """Share of RUNS whole-gate verdicts that accept, and mean games per decision."""
    strength = (POD - 1) * p_first / (1 - p_first)
    rng = np.random.default_rng(seed)
    test = SPRT(1 / POD, TARGET, 0.05, 0.05)
    holdout, student, batch = _passing_checks()
    accepted, games = 0, 0
    for _ in range(RUNS):
        strength_fig = sequential_test(pl_deals(strength, rng), test, min_games=40, max_games=1000)
        accepted += verdict(strength_fig, holdout, student, batch).accepted
        games += strength_fig.games
    return accepted / RUNS, games / RUNS


def test_false_accept_rate_at_parity():
    rate, mean_games = gate_accept_rate(0.25, seed=1)
    print(f"false-accept rate at parity: {rate:.3f} over {RUNS} gates, {mean_games:.0f} games per decision")
    assert rate <= 0.07


def test_power_at_target():
    rate, mean_games = gate_accept_rate(TARGET, seed=2)
    print(f"accept rate at the target {TARGET}: {rate:.3f} over {RUNS} gates, {mean_games:.0f} games per decision")
    assert rate >= 0.90


def test_sprt_bounds_and_llr_by_hand():
    t = SPRT(0.25, 0.35, 0.05, 0.05)
    assert t.upper == pytest.approx(math.log(19)) and t.lower == pytest.approx(-math.log(19))
    assert t.llr(3, 10) == pytest.approx(3 * math.log(0.35 / 0.25) + 7 * math.log(0.65 / 0.75))
    with pytest.raises(ValueError):
        SPRT(0.3, 0.25)


def test_sprt_stops_early_on_clear_cases():
    test = SPRT(0.25, 0.35)
    strong = sequential_test(iter([[True] * 4] * 100), test, min_games=8, max_games=400)
    assert strong.decision == "H1" and strong.decided_early and strong.games == 12
    weak = sequential_test(iter([[False] * 4] * 100), test, min_games=8, max_games=400)
    assert weak.decision == "H0" and weak.games < 30
    undecided = sequential_test(iter([[True, False, False, False]] * 100), test, min_games=8, max_games=40)
    assert undecided.games == 40 and undecided.decision == "H0" and not undecided.decided_early


def test_mcnemar_flags_only_a_real_drop():
    rng = np.random.default_rng(0)
    current = rng.random(4000) < 0.85
    same = current.copy()
    same[np.flatnonzero(current)[:100]] = False  # 100 decisions lost, 100 gained: a tie
    same[np.flatnonzero(~current)[:100]] = True
    assert not mcnemar_regression(current, same, margin=0.01).regression
    worse = current.copy()
    worse[np.flatnonzero(current)[:400]] = False  # 10 points lost
    r = mcnemar_regression(current, worse, margin=0.05)
    assert r.regression and r.drop == pytest.approx(0.1) and r.p_value < 1e-6
    assert (r.only_current, r.only_candidate, r.accuracy_current) == (400, 0, pytest.approx(current.mean()))
    assert not mcnemar_regression(current, worse, margin=0.15).regression  # inside the margin


def test_mcnemar_p_value_is_the_exact_binomial_tail():
    """McNemar's exact one-sided p-value on a sweep of discordant pairs (b only the current student
    right, c only the candidate), against the binomial tail ``P(X >= b), X ~ Binomial(b + c, 1/2)``
    summed by hand, no continuity correction; no discordant pair gives 1.0."""
    for b, c in [(0, 0), (0, 1), (1, 0), (1, 1), (3, 0), (0, 7), (5, 5), (9, 2), (2, 9), (30, 10), (60, 61), (200, 150)]:
        current = np.array([True] * b + [False] * c + [True] * 20)
        candidate = np.array([False] * b + [True] * c + [True] * 20)
        r = mcnemar_regression(current, candidate, margin=0.0)
        n = b + c
        tail = sum(math.comb(n, i) for i in range(b, n + 1)) / 2**n if n else 1.0
        assert r.p_value == pytest.approx(tail, rel=1e-12, abs=1e-300), (b, c)
        assert f"{r.p_value:.3g}" == f"{tail:.3g}"
        assert (r.only_current, r.only_candidate, r.drop) == (b, c, pytest.approx((b - c) / (n + 20)))
        assert r.regression == (b > c and tail < 0.05)


def test_verdict_metrics_read_back_as_the_drivers_gate_verdict():
    from ml.judge.verdict import GateVerdict

    holdout, student, batch = _passing_checks()
    weak = sequential_test(iter([[False] * 4] * 100), SPRT(0.25, 0.35), 8, 400)
    metrics = verdict(weak, holdout, student, batch).metrics()
    read = GateVerdict.from_metrics(metrics)
    assert (read.accepted, read.failed, read.eval_games, read.win_rate, read.sprt_decision) == (
        False, ["strength"], weak.games, weak.win_rate, "H0",
    )  # fmt: skip
    assert read.win_rate_low == weak.win_rate_low and read.holdout_accuracy_current == 0.8 and read.mean_return is None
    assert metrics["gate/batch"] == {
        "games": 10, "decisions": 100, "action_entropy_bits": 1.0, "action_counts": {"attack": 100},
        "reward": {"mean": None, "std": None, "min": None, "max": None},
        "episode_return": {"mean": None, "std": None, "min": None, "max": None},
    }  # fmt: skip


def test_ungated_verdict_accepts_but_reports():
    holdout, student, batch = _passing_checks()
    weak = sequential_test(iter([[False] * 4] * 100), SPRT(0.25, 0.35), 8, 400)
    gated = verdict(weak, holdout, student, batch).metrics()
    ungated = verdict(weak, holdout, student, batch, gated=False).metrics()
    assert not gated["gate/accepted"] and ungated["gate/accepted"]
    assert gated["gate/reasons"] == ungated["gate/reasons"] != []


def test_verdict_rejects_a_student_that_falls_back():
    holdout, student, batch = _passing_checks()
    strong = sequential_test(iter([[True] * 4] * 5), SPRT(0.25, 0.35), 8, 400)
    assert not student.regression and verdict(strong, holdout, student, batch).accepted
    fallen_back = student_non_inferiority(iter([[False] * 4] * 200), POD, 0.05)
    rejected = verdict(strong, holdout, fallen_back, batch).metrics()
    assert fallen_back.regression and rejected["gate/failed"] == ["student"] and not rejected["gate/accepted"]
    assert rejected["gate/reasons"][0].startswith("the student trained with the batch falls back: win rate 0.000")
    assert rejected["gate/student_sprt_llr"] <= rejected["gate/student_sprt_bounds"][0]


def _return_checks(strength_mean: float, student_mean: float) -> tuple[InChips, InChips]:
    """A return-SPRT strength figure and a return non-inferiority figure on constant deals (zero-sum game, two seats)."""
    from ml.judge.deals import FirstPlaces
    from ml.judge.mean_return import ReturnSPRT, return_non_inferiority, sequential_mean_test

    deals = [[strength_mean + 1.0, strength_mean - 1.0]] * 200
    strength = sequential_mean_test(iter(deals), ReturnSPRT(0.0, 0.5), 4, 200)
    student = return_non_inferiority(iter([[student_mean + 1.0, student_mean - 1.0]] * 200), 0.0, 0.25, min_deals=4)
    firsts = FirstPlaces().figures(0.95)
    return InChips(strength, firsts), InChips(student, firsts)


def test_verdict_in_chips():
    holdout, _, batch = _passing_checks()
    strength, student = _return_checks(1.0, 0.0)
    accepted = verdict(strength, holdout, student, batch).metrics()
    assert accepted["gate/accepted"] and accepted["gate/mean_return"] == pytest.approx(1.0)
    assert accepted["gate/student_mean_return"] == pytest.approx(0.0) and accepted["gate/eval_deals"] == strength.test.deals
    weak, fallen = _return_checks(0.0, -1.0)
    rejected = verdict(weak, holdout, fallen, batch).metrics()
    assert rejected["gate/failed"] == ["strength", "student"] and not rejected["gate/accepted"]
    assert rejected["gate/reasons"][0].startswith("strength: the SPRT on mean return accepted H0 (par), LLR")
    assert "mean return -1.000" in rejected["gate/reasons"][1] and "chips per game" in rejected["gate/reasons"][1]


def test_verdict_decided_by_nash_conv():
    """With decide_by nash_conv only the NashConv check (and an empty batch) decide; the others are reported."""
    holdout, _, batch = _passing_checks()
    weak, fallen = _return_checks(0.0, -1.0)
    better = verdict(weak, holdout, fallen, batch, nash_conv=NashConvCheck(0.50, 0.45, 0.0)).metrics()
    assert better["gate/accepted"] and better["gate/failed"] == ["strength", "student"] and better["gate/reasons"] == []
    assert len(better["gate/not_deciding"]) == 2 and better["gate/nash_conv_candidate"] == 0.45
    strong, equal = _return_checks(1.0, 0.0)
    worse = verdict(strong, holdout, equal, batch, nash_conv=NashConvCheck(0.50, 0.56, 0.05)).metrics()
    assert not worse["gate/accepted"] and worse["gate/failed"] == ["nash_conv"]
    assert worse["gate/reasons"] == [
        "NashConv: the student trained with the batch has 0.5600, the current one 0.5000; the rise exceeds the tolerance 0.05"
    ]
    inside = verdict(strong, holdout, equal, batch, nash_conv=NashConvCheck(0.50, 0.54, 0.05)).metrics()
    assert inside["gate/accepted"]


@pytest.mark.parametrize(
    ("game", "gate", "message"),
    [
        ("tic_tac_toe", {"decide_by": "nash_conv"}, "gate.decide_by: nash_conv: openspiel:tic_tac_toe: the game tree has more than 100000 states"),
        ("sheriff", {"decide_by": "nash_conv"}, "exact NashConv judges two-player zero-sum OpenSpiel games only"),
        ("commander", {"strength_test": "mean_return"}, "gate.strength_test: mean_return needs a two-player zero-sum game; commander is not one"),
    ],
)  # fmt: skip
def test_gate_refuses_a_test_the_game_cannot_take(tmp_path, game: str, gate: dict, message: str):
    from pathlib import Path

    from ml.config.sections import GateParams, TrainParams
    from ml.game.commander.spec import commander
    from ml.game.openspiel.spec import openspiel
    from ml.judge.gate import GateError, GateInputs, run_gate

    spec = commander() if game == "commander" else openspiel(game)
    missing = Path(tmp_path / "nothing")
    with pytest.raises(GateError, match=message.replace(".", r"\.").replace("(", r"\(")):
        run_gate(GateInputs(missing, missing, missing, missing, None, missing), GateParams(**gate), TrainParams(), spec)
