"""The commands of ``loop.py`` that read no model: the attempts (``Loop.run_attempts``), overrides,
profiles and the Elo table. Those that load or play a model (the seed checkpoint, the final report,
``promote``) are ``ml.driver.model_commands``; ``eval`` is ``ml.driver.evaluate``.

Each takes the ``Loop`` of the repository and prints for a person; the state changes are the
pure functions of ``ml.driver.transitions``, the attempt loop and its steps ``ml.driver.orchestrator.Loop``'s.
"""

from __future__ import annotations

import time

from ml.config.params import load_params
from ml.driver import history, transitions
from ml.driver.orchestrator import Loop
from ml.driver.state import AttemptLog, bot_checkpoints
from ml.driver.workspace import LoopError
from ml.judge.elo import format_table


def run_attempts(loop: Loop, max_generations: int | None = None, max_attempts: int | None = None) -> int:
    """``loop.py`` (no command): ``Loop.run_attempts``, with the final report (``ml.driver.model_commands.report``) once done;
    returns the exit status (0 done, stopped or ``max_attempts`` reached; 3 blocked).

    Raises:
        LoopError: a step failed (the attempt stays in flight; the next run resumes it).
        ParamsError: params.yaml does not validate.
    """
    return loop.run_attempts(max_generations, max_attempts, on_done=lambda: _report(loop))


def _report(loop: Loop) -> None:
    """``model_commands.report`` when a run is done and bots were promoted (it loads torch, about a
    second; a run's start does not)."""
    if not bot_checkpoints(loop.root):
        return
    from ml.driver.model_commands import report

    report(loop)


def apply_override(loop: Loop, skip: bool) -> None:
    """Record a human override (``--force-retry``, or ``--skip-to-next-stage`` when ``skip``) in the state and commit it.

    Raises:
        LoopError: an attempt is in flight, or the loop is not blocked.
        ParamsError: params.yaml does not validate.
    """
    state = loop.load_state()
    if state.in_flight is not None:
        raise LoopError(f"attempt {state.in_flight.attempt_id} is in flight; let it finish (run loop.py) before an override")
    kind = "skip-to-next-stage" if skip else "force-retry"
    if state.status != "blocked":
        now = f"done ({state.stop_reason})" if state.status == "done" else state.status
        raise LoopError(
            f"--{kind} unblocks a BLOCKED loop; this one is {now}, so nothing was changed. "
            "Run `python loop.py` to go on (with --max-generations N to run further)."
        )
    entry = AttemptLog(
        attempt_id=f"{time.strftime('%Y%m%d-%H%M%S')}-override-{kind}",
        generation=state.generation,
        attempt=state.attempt,
        verdict="override",
        reasons=[kind],
        phase=state.phase_name,
    )
    params = load_params(loop.path("params.yaml"))
    state, note = transitions.after_override(state, params, skip, history.elo_history(loop.root))
    if note:
        entry.reasons.append(note)
    state.log.append(entry)
    loop.save_state(state)
    loop.journal.commit_last(state)  # the message: ml.driver.messages.override_message, from the state alone
    after = f"next is gen {state.generation:03d} attempt {state.attempt}"
    after = f"done, {state.stop_reason}" if state.status == "done" else after
    print("\n".join([f"override {kind} recorded: {after}", *entry.reasons[1:]]))


def apply_profile(loop: Loop, name: str) -> None:
    """Write the named profile's overrides into params.yaml and commit them (no-op if applied,
    also while an attempt is in flight: rerunning ``loop.py --profile NAME`` resumes).

    Raises:
        LoopError: an attempt is in flight, or params.yaml has no such profile.
        ParamsError: params.yaml, or it with the profile's overrides, does not validate.
    """
    params = load_params(loop.path("params.yaml"))
    if name not in params.profiles:
        raise LoopError(f"params.yaml has no profile {name!r} (profiles: {', '.join(sorted(params.profiles)) or 'none'})")
    overrides = params.profiles[name]
    current = params.model_dump(mode="json")
    if all(current[sec].get(k) == v for sec, values in overrides.items() for k, v in values.items()):
        return  # applied already: the same command line resumes a killed run
    state = loop.load_state()
    if state.in_flight is not None:
        raise LoopError(f"attempt {state.in_flight.attempt_id} is in flight; let it finish before changing params")
    loop.set_params(
        overrides,
        f"params: profile {name}\n\n" + "\n".join(f"{s}.{k} = {v}" for s, vals in overrides.items() for k, v in vals.items()),
    )
    print(f"profile {name} applied to params.yaml and committed")


def print_elo(loop: Loop) -> int:
    """``loop.py elo``: print the latest Elo table (``state/elo_history.json``); returns the exit status 0.

    Raises:
        ml.base.io.DataFileError: the Elo history is not JSON.
    """
    elo = history.elo_history(loop.root)
    if not elo or not elo[-1]["table"]:
        print("no ratings yet: they are fitted after each accepted generation")
        return 0
    print(format_table(elo[-1]))
    return 0
