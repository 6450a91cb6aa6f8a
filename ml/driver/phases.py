"""The curriculum's side effects: before each attempt, params.yaml in step with the phase.

The state changes are ``ml.driver.transitions.enter_phase`` and ``leave_curriculum`` (pure);
here the notes are said (once: not again when the override that led into the phase said it)
and, once the curriculum is over, params.yaml gets its base values back in one journalled
commit (``ml.driver.journal.Journal.committing``): a key params.yaml did not have before the curriculum is
taken out again, so the file equals the one before it apart from the ``run`` section.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Protocol

from ml.base.io import atomic_write_text
from ml.config.params import Params
from ml.driver import transitions
from ml.driver.params_file import attempt_params_text, check_text, file_values, get_or_absent
from ml.driver.state import LoopState


class CurriculumRepo(Protocol):
    """What the curriculum's side effects need of the loop's repository (``ml.driver.orchestrator.Loop`` has it)."""

    def path(self, rel: Path | str) -> Path: ...
    def save_state(self, state: LoopState) -> None: ...
    def committing(
        self, message: str, paths: list[str], dvc_add: tuple[str, ...] = ()
    ) -> AbstractContextManager[dict[str, str]]: ...

    echo: Callable[[str], None]


def enter_phase(loop: CurriculumRepo, state: LoopState, params: Params) -> LoopState:
    """Keep params.yaml in step with the curriculum before the next attempt (no-op without one).

    Within the curriculum, the state of ``ml.driver.transitions.enter_phase`` (the phase's
    params queued in ``nudges``, the base values to restore in ``phase_restore``), not
    saved here: ``Loop.begin`` saves it with the in-flight attempt. Once the
    curriculum is over, ``end_curriculum`` puts the base values back and commits.

    Returns:
        The state to go on with (``state`` itself without a curriculum).

    Raises:
        ParamsError: (after the last phase) the restored params.yaml does not validate.
    """
    phases = params.curriculum
    if not phases:
        return state
    if state.phase >= len(phases):
        return end_curriculum(loop, state, params)
    state, note = transitions.enter_phase(state, params)
    said = state.log and state.log[-1].verdict == "override" and note in state.log[-1].reasons
    if note and not said:  # --skip-to-next-stage printed it as it recorded the override
        loop.echo(note)
    return state


def queue_seed_checkpoint(state: LoopState, params: Params, checkpoint: str) -> None:
    """Queue ``train.init_checkpoint`` = ``checkpoint`` (repo-relative) for the first phase, in
    place, and its base value (``ABSENT`` when params.yaml has no such key) for the phase's end."""
    state.nudges["train.init_checkpoint"] = checkpoint
    state.phase_restore["train.init_checkpoint"] = get_or_absent(file_values(params), "train.init_checkpoint")


def end_curriculum(loop: CurriculumRepo, state: LoopState, params: Params) -> LoopState:
    """Write the base values of what the last phase changed back into params.yaml and commit
    it with the state, once (``state.phase_restore`` is then empty), so params.yaml after the
    curriculum equals params.yaml before it (the ``run`` section apart).

    Raises:
        ParamsError: the restored params.yaml does not validate (nothing is written).
    """
    if not state.phase_restore:
        return state
    current = file_values(params)
    state, restore = transitions.leave_curriculum(state, current)
    path = loop.path("params.yaml")
    text = attempt_params_text(path, params.run.generation, params.run.attempt, restore) if restore else None
    if text is not None:
        check_text(path, text)
    changes = "\n".join(f"- {k}: {get_or_absent(current, k)} -> {v}" for k, v in restore.items()) or "- nothing differed"
    with loop.committing(f"curriculum finished: params.yaml back to its base values\n\n{changes}\n", ["params.yaml", "state"]):
        if text is not None:
            atomic_write_text(path, text)
        loop.save_state(state)
    loop.echo(f"curriculum finished: params.yaml back to its base values ({', '.join(restore) or 'nothing differed'})")
    return state
