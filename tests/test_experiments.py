"""``dvc exp run -S key=value`` and then ``python loop.py`` (ml/driver/experiments.py): the loop sets
the experiment's outputs aside in a git stash, commits the value as a hand edit of params.yaml and runs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import git, make_project_copy, run_loop, tiny_params


def _exp_run(repo: Path, setting: str) -> None:
    subprocess.run(
        [sys.executable, "-m", "dvc", "exp", "run", "-S", setting],
        cwd=repo, capture_output=True, text=True, timeout=600,
        env={**os.environ, "DVC_NO_ANALYTICS": "1", "PYTHONHASHSEED": "0",  # the stages' `python`: this venv's, as activated
             "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])},
    )  # fmt: skip


def _changed(repo: Path) -> set[str]:
    return {line[3:] for line in git(repo, "status", "--porcelain", "--untracked-files=all").splitlines()}


def _stashed(repo: Path) -> set[str]:
    return set(git(repo, "stash", "show", "--include-untracked", "--name-only", "stash@{0}").split())


@pytest.mark.expensive
def test_dvc_exp_run_on_a_fresh_clone_then_the_loop_runs_with_its_value(tmp_path: Path):
    """A fresh clone: the experiment stops at the first stage that needs the loop's data pools,
    leaving outputs behind; the loop stashes them and commits the value before its attempt."""
    epochs = tiny_params()["train"]["epochs"]
    repo = make_project_copy(tmp_path / "repo", tiny_params())
    _exp_run(repo, f"train.epochs={epochs + 1}")
    left = _changed(repo)
    assert "params.yaml" in left and len(left) > 1
    res = run_loop(repo, "--max-generations", "1")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert "set aside what `dvc exp run` left in the work tree" in res.stdout
    assert _stashed(repo) == left - {"params.yaml"}  # nothing lost
    subjects = git(repo, "log", "--format=%s").splitlines()
    assert subjects[-2] == f"params: train.epochs {epochs} -> {epochs + 1}" and subjects[0].startswith("gen 000 attempt 1:")
    assert _changed(repo) == set()


@pytest.mark.expensive
def test_dvc_exp_run_after_a_run_then_the_loop_runs_with_its_value(reference_run):
    """After a run (the two-generation reference run): the experiment runs the whole pipeline and
    leaves its dvc.lock, metrics and plots; the loop stashes them and goes on with the value."""
    repo = reference_run[0]  # this test's copy
    epochs = tiny_params()["train"]["epochs"]
    _exp_run(repo, f"train.epochs={epochs + 2}")
    left = _changed(repo)
    assert {"params.yaml", "dvc.lock", "metrics/train.json"} <= left
    res = run_loop(repo, "--max-generations", "3")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert _stashed(repo) == left - {"params.yaml"}
    subjects = git(repo, "log", "--format=%s").splitlines()
    assert subjects[1] == f"params: train.epochs {epochs} -> {epochs + 2}" and subjects[0].startswith("gen 002 attempt 1:")
    assert _changed(repo) == set() and "epochs: " + str(epochs + 2) in (repo / "params.yaml").read_text()
