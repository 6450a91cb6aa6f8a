"""The first answers come before the heavy imports: ``--help`` of loop.py, of each of its
subcommands and of each stage CLI, and loop.py's refusal while another loop.py runs, load
none of torch, numpy, scipy, DVC, Ray, OpenSpiel, pandas, FastAPI or ONNX (they cost seconds
of CPU; bench/bench_startup.py measures it). Each command runs in a fresh interpreter, which
then lists the heavy modules it loaded."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from filelock import FileLock

from tests.conftest import ROOT

pytestmark = pytest.mark.expensive  # each case starts an interpreter

HEAVY = ("torch", "numpy", "scipy", "dvc", "ray", "pyspiel", "pandas", "fastapi", "onnx", "onnxruntime")
SUBCOMMANDS = ("elo", "eval", "compare", "promote", "import-forge", "onnx")
STAGES = ("teacher", "train", "selfplay", "export", "gate", "merge")

PROBE = """
import runpy, sys
HEAVY = {HEAVY}
kind, target, *argv = sys.argv[1:]
sys.argv = [target, *argv]
try:
    runpy.run_module(target, run_name="__main__", alter_sys=True) if kind == "module" else runpy.run_path(target, run_name="__main__")
except SystemExit as e:
    code = e.code
else:
    code = 0
heavy = sorted({m.split(".")[0] for m in sys.modules} & HEAVY)
print(f"EXIT {code} HEAVY=[{','.join(heavy)}]", file=sys.stderr)
""".replace("{HEAVY}", repr(set(HEAVY)))


def probe(kind: str, target: str, *argv: str) -> tuple[str, list[str]]:
    """Run ``target`` (``script`` path or ``module`` name) with ``argv`` in ROOT; (its stderr, heavy modules loaded)."""
    res = subprocess.run(
        [sys.executable, "-c", PROBE, kind, target, *argv], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    last = (res.stderr.strip().splitlines() or [""])[-1]
    assert last.startswith("EXIT ") and last.endswith("]"), res.stderr[-2000:]
    heavy = last.partition("HEAVY=[")[2][:-1]
    return res.stdout + res.stderr, heavy.split(",") if heavy else []


@pytest.mark.parametrize("sub", [None, *SUBCOMMANDS])
def test_loop_help_imports_nothing_heavy(sub: str | None):
    out, heavy = probe("script", "loop.py", *([sub] if sub else []), "--help")
    assert "EXIT 0" in out and "usage: loop.py" in out, out[-2000:]
    assert heavy == [], f"loop.py {sub or ''} --help imported {heavy}"


@pytest.mark.parametrize("stage", STAGES)
def test_stage_help_imports_nothing_heavy(stage: str):
    out, heavy = probe("module", f"stages.{stage}", "--help")
    assert "EXIT 0" in out and f"usage: stages/{stage}.py" in out, out[-2000:]
    assert heavy == [], f"stages.{stage} --help imported {heavy}"


def test_second_loop_is_refused_before_the_heavy_imports(project: Path):
    with FileLock(str(project / ".dvc/tmp/loop.lock")):
        out, heavy = probe("script", "loop.py", "--repo", str(project))
    assert "EXIT 2" in out and "another loop.py is already running" in out, out[-2000:]
    assert heavy == [], f"the refusal imported {heavy}"
