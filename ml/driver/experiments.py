"""What ``dvc exp run`` leaves in the work tree, set aside so that ``loop.py`` runs on.

``dvc exp run -S key=value`` writes the value into params.yaml, runs the pipeline and leaves its
outputs (``dvc.lock``, metrics, plots, data) in the work tree; DVC keeps the experiment itself
under ``refs/exps`` (``dvc exp show``, ``dvc exp apply NAME``). Before a run,
:func:`set_aside_experiment` moves those outputs into a git stash (``git stash push
--include-untracked``: nothing is deleted) and restores HEAD's DVC-tracked data (``dvc checkout
--force``). params.yaml keeps the experiment's value, which the loop then commits as a hand edit
(``ml.driver.params_edit.commit_params_edit``) before the next attempt.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from ml.driver.state import LoopState
from ml.driver.workspace import DVC

EXPERIMENT_REFS = "refs/exps/"
"""Where DVC keeps its experiments (and ``exec/EXEC_HEAD``, the baseline of the last ``dvc exp run``)."""


class ExperimentRepo(Protocol):
    """What setting an experiment's outputs aside needs of the loop's repository (``ml.driver.orchestrator.Loop``)."""

    def git(self, *args: str) -> str: ...
    def run(self, cmd: list[str], stream: bool = False, label: str | None = None) -> str: ...
    def path(self, rel: Path | str) -> Path: ...
    def head_bytes(self, rel: str) -> bytes | None: ...
    def uncommitted_log(self, state: LoopState) -> bool: ...
    def tree_changes(self) -> tuple[list[str], list[str]]: ...

    echo: Callable[[str], None]


def experiment_leftovers(loop: ExperimentRepo, state: LoopState) -> list[str]:
    """The changed and untracked paths to set aside: every change in the loop's paths but params.yaml,
    when ``dvc exp run`` ran in this repository (a ref under ``refs/exps/``), nothing else is changed
    and no attempt is in flight or uncommitted; else ``[]`` (the loop's other checks decide)."""
    if state.in_flight is not None or loop.uncommitted_log(state):
        return []
    foreign, owned = loop.tree_changes()
    leftovers = [p for p in owned if p != "params.yaml"]
    if foreign or not leftovers or not loop.git("for-each-ref", "--count=1", EXPERIMENT_REFS).strip():
        return []
    return leftovers


def set_aside_experiment(loop: ExperimentRepo, state: LoopState) -> list[str]:
    """Stash what ``dvc exp run`` left (:func:`experiment_leftovers`) and restore HEAD's DVC-tracked
    data; say so in one line. Returns the paths set aside (``[]``: nothing to do).

    Raises:
        git.GitCommandError: ``git stash`` failed (the work tree is as it was).
        ml.driver.workspace.LoopError: ``dvc checkout`` failed (DVC's message; the outputs are in the stash).
    """
    leftovers = experiment_leftovers(loop, state)
    if not leftovers:
        return []
    loop.git("stash", "push", "--include-untracked", "--quiet", "-m", "loop.py: outputs left by dvc exp run", "--", *leftovers)
    if loop.head_bytes("dvc.lock") is not None:
        loop.run([*DVC, "checkout", "--force", "--quiet"], label="experiment.dvc_checkout")
    kept = "; params.yaml keeps its value" if "params.yaml" in loop.tree_changes()[1] else ""
    loop.echo(
        f"set aside what `dvc exp run` left in the work tree ({len(leftovers)} files: `git stash show --include-untracked`; "
        f"the experiment: `dvc exp show`){kept}"
    )
    return leftovers
