"""The loop's state transitions (``ml.driver.transitions``) on the state alone: no DVC, no git, no files.

Checks: an accepted attempt advances the generation and, after a phase's generations, the
phase (recording its winner); a failed one queues a retry and blocks after
``loop.max_retries``; ``loop.max_generations``, a curriculum's end and Elo convergence make
the state ``done``; ``--force-retry`` unblocks the same generation, ``--skip-to-next-stage``
leaves it (and its phase, noting a gauntlet without a model, or ends the run after the last
phase); entering a phase queues its params and the base values to restore, a retry within
it remembers the base of each nudged key; leaving the curriculum gives back what differs;
``finished`` says why the run is over; the argument state is never changed.
"""

from __future__ import annotations

from typing import Any

import pytest

from ml.config.params import params_from_dict
from ml.driver.params_file import get_dotted, set_dotted
from ml.driver.state import AttemptLog, LoopState
from ml.driver.transitions import after_attempt, after_override, enter_phase, finished, leave_curriculum, status_after

CURRICULUM = [
    {"name": "warm", "generations": 2, "gated": False, "overrides": {"selfplay": {"ent_coef": 0.02}}},
    {
        "name": "gauntlet",
        "generations": 1,
        "opponent": "previous_phase",
        "overrides": {"selfplay": {"learner_decisions": 1200}},
    },
]


def _params(curriculum: bool = False, **loop: Any):
    raw: dict[str, Any] = {"loop": {"max_generations": 3, "max_retries": 1, **loop}}
    if curriculum:
        raw["curriculum"] = CURRICULUM
    return params_from_dict(raw)


def _converged_history() -> list[dict]:
    gain = {"new": "gen002", "old": "gen001", "elo": 1.0, "low": -2.0, "high": 3.0}
    return [{"table": [], "gain": gain}, {"table": [], "gain": gain}]


def test_accept_advances_and_retry_blocks():
    params, state = _params(), LoopState(generation=1, attempt=2, failures=1, status="running")
    accepted = after_attempt(state, 1, 2, True, params, [])
    assert (accepted.generation, accepted.attempt, accepted.failures, accepted.status) == (2, 1, 0, "running")
    assert (state.generation, state.attempt, state.failures) == (1, 2, 1), "the argument is never changed"
    retry = after_attempt(LoopState(generation=1, status="running"), 1, 1, False, params, [])
    assert (retry.generation, retry.attempt, retry.failures, retry.status) == (1, 2, 1, "running")
    blocked = after_attempt(retry, 1, 2, False, params, [])
    assert (blocked.attempt, blocked.failures, blocked.status, blocked.stop_reason) == (3, 2, "blocked", None)


@pytest.mark.parametrize(
    ("generation", "history", "status", "reason"),
    [
        (2, [], "done", "loop.max_generations (3) reached"),
        (0, _converged_history(), "done", "converged: Elo gain within +-10.0 for 2 generations"),
        (0, [], "running", None),
    ],
)
def test_done_by_count_or_convergence(generation: int, history: list[dict], status: str, reason: str | None):
    new = after_attempt(LoopState(generation=generation), generation, 1, True, _params(), history)
    assert (new.status, new.stop_reason) == (status, reason)


def test_phase_change_records_the_winner_and_ends_the_curriculum():
    params = _params(curriculum=True)
    state = after_attempt(LoopState(), 0, 1, True, params, [])
    assert (state.phase, state.phase_generations, state.phase_winners) == (0, 1, {})
    state = after_attempt(state, 1, 1, True, params, [])
    assert (state.phase, state.phase_generations, state.phase_winners) == (1, 0, {"warm": "gen001"})
    state = after_attempt(state, 2, 1, True, params, [])
    assert (state.phase, state.status, state.stop_reason) == (2, "done", "curriculum finished (2 phases)")
    assert finished(state, params, 99) == (
        "curriculum finished (2 phases)",
        " Append a phase to `curriculum` in params.yaml to go on.",
    )


def test_overrides():
    params = _params()
    blocked = LoopState(generation=1, attempt=3, failures=2, status="blocked", nudges={"selfplay.lr": 1e-4})
    retry, note = after_override(blocked, params, False, [])
    assert (retry.generation, retry.attempt, retry.failures, retry.status, retry.nudges, note) == (
        1, 3, 0, "running", {"selfplay.lr": 1e-4}, None,
    )  # fmt: skip
    skipped, _ = after_override(blocked, params, True, [])
    assert (skipped.generation, skipped.attempt, skipped.failures, skipped.nudges) == (2, 1, 0, {})
    # with a curriculum: out of the first phase into a gauntlet whose previous phase passed no model
    params = _params(curriculum=True)
    into, note = after_override(LoopState(status="blocked", failures=2, phase_name="warm"), params, True, [])
    assert into.phase == 1 and into.status == "running" and "phase 'warm' passed none" in (note or "")
    last, note = after_override(into.model_copy(update={"phase_name": "gauntlet"}), params, True, [])
    assert last.status == "done" and note is None
    assert last.stop_reason == "curriculum finished (2 phases); the last phase, 'gauntlet', left by --skip-to-next-stage"


def test_enter_phase_queues_and_restores():
    params = _params(curriculum=True)
    state, note = enter_phase(LoopState(nudges={"train.init_checkpoint": "data/seed/seed.pt"}), params)
    assert note is None and (state.entered_phase, state.phase_name) == (0, "warm")
    assert state.nudges["selfplay.ent_coef"] == 0.02 and state.nudges["gate.gated"] is False
    assert state.nudges["train.init_checkpoint"] == "data/seed/seed.pt"  # a seed checkpoint stays queued
    assert state.phase_restore["selfplay.ent_coef"] == 0.01  # the base value
    state.nudges = {"train.source_weights.ppo": 5.6}  # the suggester, for a retry within the phase
    retry, _ = enter_phase(state, params)
    assert retry.phase_restore["train.source_weights"] == {"sim": 1.0, "ppo": 8.0} and retry.nudges == state.nudges
    # the next phase: its own params, and the warm phase's ent_coef back (it is in params.yaml now)
    raw = params.model_dump(mode="json")
    set_dotted(raw, "selfplay.ent_coef", 0.02)
    gauntlet, note = enter_phase(retry.model_copy(update={"phase": 1}), params_from_dict(raw))
    assert note and gauntlet.nudges["selfplay.ent_coef"] == 0.01 and gauntlet.nudges["selfplay.learner_decisions"] == 1200
    assert gauntlet.phase_restore["selfplay.learner_decisions"] == params.selfplay.learner_decisions
    done, restore = leave_curriculum(gauntlet, {**raw, "selfplay": {**raw["selfplay"], "learner_decisions": 1200}})
    assert restore == {"selfplay.learner_decisions": params.selfplay.learner_decisions} and done.phase_restore == {}
    assert done.entered_phase == -1 and gauntlet.entered_phase == 1


def test_finished_without_curriculum():
    params = _params()
    assert finished(LoopState(generation=1), params, 3) is None
    assert finished(LoopState(generation=3), params, 3) == (
        "3 generations accepted (max 3)", " Raise loop.max_generations (or --max-generations) to go on.",
    )  # fmt: skip
    assert finished(LoopState(generation=1), params, 1)[0] == "1 generation accepted (max 1)"
    skip = AttemptLog(attempt_id="x-override-skip-to-next-stage", generation=1, attempt=3, verdict="override",
                      reasons=["skip-to-next-stage"])  # fmt: skip
    retry = skip.model_copy(update={"reasons": ["force-retry"]})
    assert finished(LoopState(generation=3, log=[retry, skip]), params, 3) is None  # 2 accepted, 1 given up
    assert (
        finished(LoopState(generation=4, log=[skip]), params, 3)[0]
        == "3 generations accepted (max 3), 1 skipped by --skip-to-next-stage"
    )
    assert status_after(LoopState(generation=3, log=[skip]), params, [])[0] == "running"
    converged = LoopState(generation=1, status="done", stop_reason="converged: Elo gain within +-10.0 for 2 generations")
    assert finished(converged, params, 3) == (converged.stop_reason, "")
    assert status_after(LoopState(failures=2), params, []) == ("blocked", None)


def test_dotted_paths():
    raw = {"train": {"source_weights": {"ppo": 0.5}}}
    set_dotted(raw, "train.source_weights.ppo", 0.35)
    assert get_dotted(raw, "train.source_weights.ppo") == 0.35
    with pytest.raises(KeyError):
        get_dotted(raw, "train.epochs")
