"""Shared fixtures: tiny params and a throw-away copy of the project as its own git repo."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("DVC_NO_ANALYTICS", "1")

TINY = {
    "teacher": {"games": 24},
    "train": {"epochs": 2, "samples_per_epoch": 2000, "batch_size": 128, "hidden_sizes": [32]},
    "selfplay": {"total_steps": 600, "num_envs": 4, "rollout_steps": 300, "minibatch_size": 128, "update_epochs": 2},
    "export": {"games": 12, "only_wins": False},
    "gate": {"gated": False, "min_games": 8, "max_games": 40, "student_games": 16},
    "rating": {"games": 16, "report_games": 8},
    "loop": {"max_generations": 2, "max_retries": 1},
}


def tiny_params(overrides: dict | None = None) -> dict:
    """The repo's params.yaml with the TINY sizes (and ``overrides``) merged in."""
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    # a clone where the loop ran has its own run section: tests start from generation 0
    params["run"] = {"generation": 0, "attempt": 1, "seed": params["base"]["seed"]}
    for section, values in {**TINY, **(overrides or {})}.items():
        params.setdefault(section, {}).update(values)
    return params


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout


def make_project_copy(dest: Path, params: dict) -> Path:
    """Copy the project's files (tracked and untracked, not ignored) into a fresh git repo.

    Works on uncommitted work too, unlike ``git clone``. Returns ``dest``.
    """
    files = git(ROOT, "ls-files", "--cached", "--others", "--exclude-standard", "-z").split("\0")
    for rel in filter(None, files):
        src = ROOT / rel
        if src.is_file() and not rel.startswith(("data/", "metrics/", "state/")):
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    (dest / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    git(dest, "init", "-q", "-b", "main")
    git(dest, "config", "user.email", "test@example.com")
    git(dest, "config", "user.name", "test")
    git(dest, "add", "-A")
    git(dest, "commit", "-qm", "project")
    return dest


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return make_project_copy(tmp_path / "repo", tiny_params())


def run_loop(repo: Path, *args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    env = {**os.environ, "DVC_NO_ANALYTICS": "1", "PYTHONHASHSEED": "0"}
    return subprocess.run(
        [sys.executable, "loop.py", *args], cwd=repo, env=env, capture_output=True, text=True, timeout=timeout
    )
