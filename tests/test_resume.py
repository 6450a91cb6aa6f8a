"""A resumed run keeps the limit it was started with (``Loop.run_attempts``), on the state alone.

The attempt's steps are stand-ins (no git, DVC or stage: each attempt is accepted at once), so what
is checked is the driver's own bookkeeping. Issue 42, item 4: after Ctrl-C, ``python loop.py`` (the
command the interrupt message gives) ran the attempt in flight under ``loop.max_generations``
instead of the ``--max-generations`` the run was started with, and ended past it
(``done: 4 generations accepted (max 2)``). Now a run keeps its ``--max-generations`` until it is
done (``ml.driver.state.RUN_FILE``), a start that resumes says in one line what it resumes (attempt,
generation, limit), and an attempt in flight past an explicitly lower limit is refused.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ml.config.params import params_from_dict
from ml.driver import transitions
from ml.driver.orchestrator import Loop
from ml.driver.state import RUN_FILE, AttemptLog, InFlight, LoopState
from ml.driver.steps import Repro
from ml.driver.workspace import LoopError
from tests.conftest import tiny_params, yaml_text

FIGURES = {"win_rate": 0.6, "win_rate_low": 0.5, "win_rate_high": 0.7, "eval_games": 40, "sprt_llr": 3.0,
           "holdout_accuracy": 0.6}  # fmt: skip


class _Run(Loop):
    """``Loop`` over a folder with params.yaml, its attempts' steps replaced: every attempt is accepted,
    and the attempt of ``interrupt_at`` (a generation) is interrupted (``KeyboardInterrupt``) once, in its stages."""

    def __init__(self, root: Path, interrupt_at: int | None = None) -> None:  # no git: no Workspace.__init__
        self.root, self.said, self.state = root, [], LoopState()
        self.echo = self.said.append
        self.interrupt_at = interrupt_at
        self.ran: list[int] = []

    def load_state(self) -> LoopState:
        return self.state.model_copy(deep=True)

    def save_state(self, state: LoopState) -> None:
        self.state = state.model_copy(deep=True)

    def commit_pending(self, state: LoopState) -> None:
        pass

    def write_status(self, status: str, flight: InFlight | None = None, **extra) -> None:
        pass

    def wait_while_paused(self, flight: InFlight | None) -> str | None:
        return None

    def begin(self, state: LoopState) -> InFlight:
        if state.in_flight is None:
            g, a = state.generation, state.attempt
            state.in_flight = InFlight(attempt_id=f"gen{g:03d}-a{a}", generation=g, attempt=a, params_sha256="", started_at="")
            self.save_state(state)
        return state.in_flight

    def ensure_data_dirs(self) -> None:
        pass

    def promote(self, flight: InFlight) -> None:
        pass

    def repro(self, flight: InFlight, resumed: bool = False) -> Repro:
        if flight.generation == self.interrupt_at:
            self.interrupt_at = None
            raise KeyboardInterrupt
        self.ran.append(flight.generation)
        return Repro({}, aborted=False)

    def finish(self, state, flight, wall_s, stage_wall_s, aborted=False) -> AttemptLog:
        entry = AttemptLog(attempt_id=flight.attempt_id, generation=flight.generation, attempt=flight.attempt,
                           verdict="accepted", figures=FIGURES, wall_s=wall_s)  # fmt: skip
        params = params_from_dict(tiny_params())
        state = transitions.after_attempt(state, flight.generation, flight.attempt, True, params, [])
        state.log.append(entry)
        state.in_flight = None
        self.save_state(state)
        return entry


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "params.yaml").write_text(yaml_text(tiny_params()))  # loop.max_generations: 2
    return tmp_path


def test_a_resumed_run_keeps_the_limit_it_was_started_with_and_says_what_it_resumes(root: Path):
    loop = _Run(root, interrupt_at=2)
    with pytest.raises(KeyboardInterrupt):
        loop.run_attempts(max_generations=4)  # python loop.py --max-generations 4, then Ctrl-C in gen 002
    assert loop.ran == [0, 1] and loop.state.in_flight is not None and loop.state.in_flight.generation == 2
    loop.said.clear()
    assert loop.run_attempts() == 0  # python loop.py, as the interrupt message says
    assert loop.said[0] == (
        "resuming attempt gen002-a1 (gen 002 attempt 1), until 4 generations are accepted "
        "(--max-generations 4 of the run it resumes)"
    )
    assert loop.ran == [0, 1, 2, 3] and loop.said[-1].startswith("done: 4 generations accepted (max 4).")
    assert not (root / RUN_FILE).exists()  # the run is done: the next one starts from loop.max_generations
    loop.said.clear()
    assert loop.run_attempts() == 0 and loop.said == [
        "done: 4 generations accepted (max 2). Raise loop.max_generations (or --max-generations) to go on."
    ]


def test_a_run_stopped_between_attempts_resumes_with_its_limit(root: Path):
    loop = _Run(root)
    assert loop.run_attempts(max_generations=3, max_attempts=1) == 0 and loop.ran == [0]
    loop.said.clear()
    assert loop.run_attempts() == 0 and loop.ran == [0, 1, 2]
    assert loop.said[0] == "resuming the run at gen 001 attempt 1, until 3 generations are accepted " + (
        "(--max-generations 3 of the run it resumes)"
    )


def test_an_attempt_in_flight_past_a_lower_limit_is_refused_and_the_run_keeps_its_own(root: Path):
    loop = _Run(root, interrupt_at=2)
    with pytest.raises(KeyboardInterrupt):
        loop.run_attempts(max_generations=4)
    with pytest.raises(LoopError) as refused:
        loop.run_attempts(max_generations=2)
    assert str(refused.value) == (
        "attempt gen002-a1 is in flight, but 2 generations are accepted already and the limit is 2 "
        "(--max-generations 2); to finish it: python loop.py --max-generations 3"
    )
    assert loop.ran == [0, 1] and loop.state.in_flight is not None  # nothing run
    loop.said.clear()
    assert loop.run_attempts() == 0 and loop.ran == [0, 1, 2, 3]  # the refused limit was not kept
    assert "(--max-generations 4 of the run it resumes)" in loop.said[0]
