"""The commands of ``loop.py`` that load or play a model: ``--seed-checkpoint``, the final report
after a run, ``promote``. Each takes the ``Loop`` of the repository and prints for a person.
"""

from __future__ import annotations

from pathlib import Path

from ml.config.curriculum import phase_overrides
from ml.config.params import load_params
from ml.driver.bots import final_report, load_bots, promote
from ml.driver.evaluate import accepted_students
from ml.driver.orchestrator import Loop
from ml.driver.phases import queue_seed_checkpoint
from ml.driver.state import BOTS_DIR
from ml.driver.workspace import LoopError
from ml.game.registry import make_game
from ml.model.policy import CheckpointError, check_shape, load_policy, save_policy
from ml.runtime.compute import open_executor


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
