"""Transitions of the loop state: pure functions of a ``LoopState``, the params and the Elo history.

Each returns a new ``LoopState`` (the argument is never changed) and touches no file, DVC or
git; ``ml.driver.orchestrator`` and ``ml.driver.commands`` save and commit what they return.

* ``after_attempt``: an accepted attempt advances the generation (and the phase once it has
  run its generations); a failed one queues a retry, or blocks after ``loop.max_retries``.
* ``after_override``: ``--force-retry`` (unblock, same generation) or ``--skip-to-next-stage``.
* ``enter_phase`` / ``leave_curriculum``: the params a phase queues and the base values it
  must give back (``LoopState.phase_restore``).
* ``status_after``, ``finished``: running, blocked or done (max generations, convergence,
  curriculum over), and why.
"""

from __future__ import annotations

from ml.base.io import JSONObject
from ml.config.curriculum import opponent_fallback, phase_overrides
from ml.config.params import Params
from ml.driver.params_file import file_values, get_or_absent
from ml.driver.state import LoopState, LoopStatus
from ml.judge.elo import EloEntry, converged


def status_after(state: LoopState, params: Params, elo_history: list[EloEntry]) -> tuple[LoopStatus, str | None]:
    """The status (``running``, ``blocked``, ``done``) of ``state`` and, when done, why.

    Args:
        state: the state after a transition.
        params: the params (``loop`` section and curriculum).
        elo_history: the tournaments so far (``state/elo_history.json``), oldest first.
    """
    if params.curriculum and state.phase >= len(params.curriculum):
        return "done", f"curriculum finished ({len(params.curriculum)} phases)"
    if not params.curriculum and accepted_generations(state) >= params.loop.max_generations:
        return "done", f"loop.max_generations ({params.loop.max_generations}) reached"
    if state.failures > params.loop.max_retries:
        return "blocked", None
    if converged(elo_history, params.loop.convergence_elo, params.loop.convergence_window):
        return (
            "done",
            f"converged: Elo gain within +-{params.loop.convergence_elo} for {params.loop.convergence_window} "
            f"generation{'' if params.loop.convergence_window == 1 else 's'}",
        )
    return "running", None


def after_attempt(
    state: LoopState, generation: int, attempt: int, accepted: bool, params: Params, elo_history: list[EloEntry]
) -> LoopState:
    """The state after attempt (``generation``, ``attempt``) finished.

    Accepted: the next generation's first attempt, failures reset; the phase's winner is
    recorded (``genGGG``) and the next phase begins once the phase has run its generations.
    Not accepted (rejected or aborted): the next attempt of the generation, one failure more.
    The status follows (``status_after``).
    """
    new = state.model_copy(deep=True)
    if accepted:
        new.generation, new.attempt, new.failures = generation + 1, 1, 0
        new.phase_generations += 1
        phases = params.curriculum or []
        if phases and new.phase < len(phases) and new.phase_generations >= phases[new.phase].generations:
            new.phase_winners[phases[new.phase].name] = f"gen{generation:03d}"
            new.phase, new.phase_generations = new.phase + 1, 0
    else:
        new.attempt, new.failures = attempt + 1, new.failures + 1
    new.status, new.stop_reason = status_after(new, params, elo_history)
    return new


def accepted_generations(state: LoopState) -> int:
    """Generations accepted so far: ``state.generation`` less those given up by ``--skip-to-next-stage``."""
    return state.generation - sum(e.verdict == "override" and e.reasons[:1] == ["skip-to-next-stage"] for e in state.log)


def after_override(state: LoopState, params: Params, skip: bool, elo_history: list[EloEntry]) -> tuple[LoopState, str | None]:
    """The state after ``--force-retry`` (``skip`` False) or ``--skip-to-next-stage`` (``skip`` True)
    of a ``blocked`` loop (``ml.driver.commands.apply_override`` refuses any other).

    Both reset the failures. Skipping starts the next generation without the queued nudges
    (they were for the retry given up on) and, with a curriculum, leaves the blocked phase.

    Returns:
        The new state, and a note for the override's log entry: why the next phase plays the
        heuristic teacher (``ml.config.curriculum.opponent_fallback``), or None.
    """
    new = state.model_copy(deep=True)
    phases = params.curriculum
    if skip:
        if phases:
            new.phase, new.phase_generations = new.phase + 1, 0
        new.generation, new.attempt, new.nudges = new.generation + 1, 1, {}
    new.failures = 0
    new.status, new.stop_reason = status_after(new, params, elo_history) if phases else ("running", None)
    note = None
    if skip and phases and new.phase < len(phases):  # into a gauntlet with no model to play?
        before = phases[new.phase - 1].name
        note = opponent_fallback(phases[new.phase], before, new.phase_winners.get(before))
    elif skip and phases:
        new.stop_reason = f"{new.stop_reason}; the last phase, {state.phase_name!r}, left by --skip-to-next-stage"
    return new, note


def enter_phase(state: LoopState, params: Params) -> tuple[LoopState, str | None]:
    """The state before the next attempt of a phase of the curriculum (``state.phase`` < phases).

    Entering a phase (once per phase) queues in ``nudges`` the phase's params
    (``ml.config.curriculum.phase_overrides``) and the base value of every key the previous phase
    changed, by its overrides or by the suggester's nudges; suggester nudges still queued are
    dropped. Within a phase, the base value of each section key the suggester nudges for the
    first time goes to ``phase_restore``: nudges last until their phase ends. The base of a key
    params.yaml does not have is ``ml.driver.params_file.ABSENT`` (distinct from None: giving
    it back removes the key).

    Returns:
        The new state, and why the phase plays the heuristic teacher instead of the previous
        phase's model (``ml.config.curriculum.opponent_fallback``), or None.

    Raises:
        AssertionError: there is no curriculum, or it is over (see ``leave_curriculum``).
    """
    phases = params.curriculum
    assert phases and state.phase < len(phases), "enter_phase needs a phase of the curriculum to enter"
    new = state.model_copy(deep=True)
    current = file_values(params)  # a key params.yaml lacks has the base ABSENT: restoring it removes the key
    if new.entered_phase == new.phase:
        for key in new.nudges:  # the suggester's, for a retry: remember the phase's value of its section key
            section_key = ".".join(key.split(".")[:2])
            new.phase_restore.setdefault(section_key, get_or_absent(current, section_key))
        return new, None
    phase = phases[new.phase]
    before = phases[new.phase - 1].name if new.phase else None
    winner = new.phase_winners.get(before) if before else None
    note = opponent_fallback(phase, before, winner) if before else None
    wanted = {f"{sec}.{k}": v for sec, vals in phase_overrides(phase, winner).items() for k, v in vals.items()}
    base = {k: new.phase_restore.get(k, get_or_absent(current, k)) for k in wanted}
    if new.phase == 0:  # nothing to restore before the first phase; keep what --seed-checkpoint queued
        new.nudges = {**new.nudges, **wanted}
        base = {**new.phase_restore, **base}
    else:
        restore = {k: v for k, v in new.phase_restore.items() if k not in wanted and get_or_absent(current, k) != v}
        new.nudges = {**restore, **wanted}
    new.phase_restore, new.entered_phase, new.phase_name = base, new.phase, phase.name
    return new, note


def leave_curriculum(state: LoopState, current: JSONObject) -> tuple[LoopState, JSONObject]:
    """The state once the curriculum is over, and the base values to write back into params.yaml.

    Args:
        state: the state after the last phase.
        current: the params now in params.yaml (``ml.driver.params_file.file_values``).

    Returns:
        The state with no phase values to restore (``phase_restore`` empty, ``entered_phase``
        -1), and dotted key -> base value for each key whose value differs from its base
        (``ABSENT``: params.yaml did not have the key, and now has it).
    """
    restore = {k: v for k, v in state.phase_restore.items() if get_or_absent(current, k) != v}
    return state.model_copy(update={"phase_restore": {}, "entered_phase": -1}, deep=True), restore


def finished(state: LoopState, params: Params, max_generations: int) -> tuple[str, str] | None:
    """Whether the run is over before its next attempt: ``(reason, advice)``, or None to go on.

    Args:
        state: the state with no attempt in flight.
        params: the params (the curriculum).
        max_generations: accepted generations to stop at (``--max-generations`` or
            ``loop.max_generations``); ignored with a curriculum.
    """
    if params.curriculum:
        if state.phase < len(params.curriculum):
            return None
        reason = state.stop_reason or f"curriculum finished ({len(params.curriculum)} phases)"
        return reason, " Append a phase to `curriculum` in params.yaml to go on."
    if (n := accepted_generations(state)) >= max_generations:
        skipped = state.generation - n
        reason = f"{n} generation{'' if n == 1 else 's'} accepted (max {max_generations})"
        reason += f", {skipped} skipped by --skip-to-next-stage" if skipped else ""
        return reason, " Raise loop.max_generations (or --max-generations) to go on."
    if state.status == "done" and "converged" in (state.stop_reason or ""):
        return state.stop_reason or "", ""
    return None
