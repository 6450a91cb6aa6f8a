"""DVC's status of the pipeline, asked in the loop's process.

The loop imports DVC for its data guard (``ml.driver.dataguard``), so ``dvc.repo.Repo.status``
answers without starting an interpreter for ``dvc status --json`` (about 0.6 CPU s against 1.0-1.4
on a tiny run; docs/measurements.md). A resumed attempt asks it once for every stage
(``ml.driver.steps.AttemptSteps.up_to_date_prefix``).
"""

from __future__ import annotations

from pathlib import Path

from ml.driver.workspace import LoopError


def pipeline_status(root: Path) -> dict[str, object]:
    """Each changed stage (or tracked file) of the repository at ``root`` and its changes, as
    ``dvc status --json`` run in the repository prints them; empty when all is up to date.

    DVC names a stage by its ``dvc.yaml`` relative to the working directory (``../run/dvc.yaml:train``):
    the keys are the repository's (``train``, ``data/pool.dvc``) whatever the working directory.

    Raises:
        LoopError: DVC could not read the pipeline (its own message).
    """
    from dvc.exceptions import DvcException
    from dvc.repo import Repo

    try:
        with Repo(str(root)) as repo:
            changed = repo.status()
    except DvcException as e:
        raise LoopError(f"dvc status failed: {e}") from e
    here, top = Path.cwd(), root.resolve()

    def key(name: str) -> str:
        _, stage_of, stage = name.rpartition(":")  # "dvc.yaml:train" from elsewhere; a .dvc file has no ':'
        return stage if stage_of else (here / name).resolve().relative_to(top).as_posix()

    return {key(name): change for name, change in changed.items()}
