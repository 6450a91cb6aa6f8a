"""Pieces of the loop driver that need no pipeline run.

Checks: a bad params.yaml stops loop.py with one line naming the file, section and key, and
exit status 2; a NUL byte in it stops loop.py (a run, ``eval``, ``promote``) and a stage with
one line naming the file, line and column, nothing written. (The processes a killed loop left
running: tests/test_processes.py.)
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import git, make_project_copy, run_loop, tiny_params

pytestmark = pytest.mark.expensive  # loop.py and a stage run


def test_bad_params_one_line(tmp_path: Path):
    params = tiny_params()
    params["train"]["epochz"] = 3
    repo = make_project_copy(tmp_path / "repo", params)
    res = run_loop(repo)
    assert res.returncode == 2
    assert (
        "Traceback" not in res.stderr
        and "params.yaml:" in res.stderr
        and ": train.epochz: unknown key; did you mean 'epochs'?" in res.stderr
    )


def test_nul_in_params_one_line(tmp_path: Path):
    """Issue 24, item 4: PyYAML's ReaderError came out as a traceback naming no file or line."""
    repo = make_project_copy(tmp_path / "repo", tiny_params())
    text = (repo / "params.yaml").read_text()
    (repo / "params.yaml").write_text(text.replace("  epochs: 2\n", "  epochs: 2\0\n", 1))
    git(repo, "commit", "-qam", "a NUL")
    line = text[: text.index("  epochs: 2\n")].count("\n") + 1
    problem = f"params.yaml:{line}:12: a NUL byte (U+0000) is not allowed in YAML"
    for args in ((), ("eval",), ("promote", "x")):
        res = run_loop(repo, *args, timeout=120)
        assert res.returncode == 2 and res.stderr == f"loop.py: {repo / problem}\n", (args, res.stderr[-2000:])
    stage = [sys.executable, "-m", "stages.train", "--params", "params.yaml", "--teacher", "t", "--pool", "p",
             "--reuse", "r", "--out", "s.pt", "--metrics", "m.json"]  # fmt: skip
    res = subprocess.run(stage, cwd=repo, capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and res.stderr == f"error: {problem}\n", res.stderr[-2000:]
    assert git(repo, "status", "--porcelain", "--untracked-files=all") == "" and not (repo / "state").exists()


def test_an_emptied_params_file_is_refused_not_committed(tmp_path: Path):
    """An emptied params.yaml (a hand edit) was taken as a hand edit of every key, committed as
    ``params: base.seed 20261129 -> (unset) ...``, and every later run crashed; now one line, no commit."""
    repo = make_project_copy(tmp_path / "repo", tiny_params())
    head = git(repo, "rev-parse", "HEAD")
    (repo / "params.yaml").write_text("# emptied by mistake\n")
    res = run_loop(repo, timeout=120)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr[-2000:]
    p = repo / "params.yaml"
    assert (
        res.stderr == f"loop.py: {p}: no sections (the file is empty or holds only comments); restore it: git checkout {p}\n"
    )
    assert git(repo, "rev-parse", "HEAD") == head and (repo / "params.yaml").read_text() == "# emptied by mistake\n"
