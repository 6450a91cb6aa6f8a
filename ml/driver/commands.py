"""The commands of ``loop.py`` other than ``eval``: the attempts (``Loop.run_attempts``), overrides,
profiles, the seed checkpoint, the Elo table and the final report.

Each takes the ``Loop`` of the repository and prints for a person; the state changes are the
pure functions of ``ml.driver.transitions``, the attempt loop and its steps ``ml.driver.orchestrator.Loop``'s.
"""

from __future__ import annotations

import time
from pathlib import Path

from ml.config.curriculum import phase_overrides
from ml.config.params import load_params
from ml.driver import history, transitions
from ml.driver.bots import BOTS_DIR, final_report, load_bots, promote
from ml.driver.evaluate import accepted_students
from ml.driver.orchestrator import Loop
from ml.driver.phases import queue_seed_checkpoint
from ml.driver.state import AttemptLog
from ml.driver.workspace import LoopError
from ml.game.registry import make_game
from ml.judge.ratings import format_table
from ml.model.policy import CheckpointError, check_shape, load_policy, save_policy
from ml.runtime.compute import open_executor


def run_attempts(loop: Loop, max_generations: int | None = None, max_attempts: int | None = None) -> int:
    """``loop.py`` (no command): ``Loop.run_attempts``, with the final report (``report``) once done;
    returns the exit status (0 done, stopped or ``max_attempts`` reached; 3 blocked).

    Raises:
        LoopError: a step failed (the attempt stays in flight; the next run resumes it).
        ParamsError: params.yaml does not validate.
    """
    return loop.run_attempts(max_generations, max_attempts, on_done=lambda: report(loop))


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


def seed_checkpoint(loop: Loop, path: Path) -> None:
    """Copy a checkpoint to data/seed/seed.pt (DVC-tracked) and have the current phase's
    students start from it (restored when the phase ends).

    Raises:
        LoopError: the run has begun, or the checkpoint cannot be read or does not fit the
            first phase's game and ``train.hidden_sizes`` (nothing is written).
        ParamsError: params.yaml does not validate.
    """
    state = loop.load_state()
    if state.in_flight is not None or state.log:
        raise LoopError("--seed-checkpoint starts the first phase: use it on a fresh run (no attempt yet)")
    params = load_params(loop.path("params.yaml"))
    first = params.overridden(phase_overrides(params.curriculum[0], None)) if params.curriculum else params
    game = make_game(first.game, first.teacher)
    try:
        net, _ = load_policy(path)
    except CheckpointError as e:
        raise LoopError(_unreadable_seed(path, e)) from e
    try:
        check_shape(net, game.obs_dim, game.num_actions, f"--seed-checkpoint {path}")
    except CheckpointError as e:
        raise LoopError(str(e)) from e
    if tuple(net.hidden_sizes) != tuple(first.train.hidden_sizes):  # refused before anything is written or committed
        raise LoopError(
            f"--seed-checkpoint {path} has hidden sizes {list(net.hidden_sizes)}, but the first phase's students "
            f"have train.hidden_sizes {list(first.train.hidden_sizes)}"
        )
    queue_seed_checkpoint(state, params, "data/seed/seed.pt")
    with loop.committing(f"seed checkpoint: students start from {path.name}", ["data", "state"], dvc_add=("data/seed",)):
        loop.ensure_data_dirs()  # inside the journal: a kill here is completed by the next start
        save_policy(net, loop.path("data/seed/seed.pt"), {"role": "seed", "source": str(path)})
        loop.save_state(state)
    print(f"seed checkpoint {path} -> data/seed/seed.pt; the first phase's students start from it")


def _unreadable_seed(path: Path, e: CheckpointError) -> str:
    """One line for a seed checkpoint ``load_policy`` refused: torch's advice to load with
    ``weights_only=False`` is for files one trusts, never for a text file given by mistake."""
    if not path.is_file():
        return str(e)
    cause = e.__cause__
    lines = [line.strip() for line in str(cause or e).splitlines() if line.strip()]
    why = [line for line in lines if "weights_only" not in line and "Weights only" not in line] or lines or [repr(cause)]
    reason = why[-1].split(". ")[0][:200]  # the first sentence
    reason = f"{type(cause).__name__}: {reason}" if cause is not None else reason
    return f"--seed-checkpoint {path}: not a checkpoint written by this project ({reason})"


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


def report(loop: Loop) -> None:
    """The final, informational report: the final student against every promoted bot
    (``rating.report_games`` games each; nothing without bots, students or games)."""
    params = load_params(loop.path("params.yaml"))
    bots = load_bots(loop.root)
    students = accepted_students(loop)
    if not bots or not students or not params.rating.report_games:
        return
    student, _ = load_policy(students[-1])
    with open_executor(params.compute, params.base.torch_threads) as executor:
        rows = final_report(
            student, bots, games=params.rating.report_games, game=make_game(params.game, params.teacher),
            num_envs=params.selfplay.num_envs, seed=params.stage_seed("report"), executor=executor,
        )  # fmt: skip
    print(f"final report: student {students[-1].stem} in pods against {params.game.pod_size - 1} copies of each promoted bot")
    for r in rows:
        chips = (  # zero-sum games (ml.judge.deals.pod_win_rate): the chips too
            f", chips {r['mean_return']:+.3f} [{r['return_low']:+.3f}, {r['return_high']:+.3f}]"
            if r.get("return_low") is not None
            else ""
        )
        print(f"  vs {r['bot']:30s} win {r['win_rate']:.3f} [{r['low']:.3f}, {r['high']:.3f}]{chips} over {r['games']} games")


def promote_command(loop: Loop, attempt: str, name: str | None) -> int:
    """``loop.py promote``: keep an attempt's student as a bot (``bots/promoted/<name>.pt``) and commit it.

    Returns:
        The exit status, 0.

    Raises:
        PromoteError: no single attempt matches ``attempt``, or it has no student.
        LoopError: ``dvc add`` or the commit failed.
    """
    with loop.committing(f"promote: {name or attempt} from attempt {attempt}", ["bots"], dvc_add=(str(BOTS_DIR),)):
        path = promote(loop.root, loop.git, attempt, name)
    print(f"promoted {path.relative_to(loop.root)}")
    return 0
