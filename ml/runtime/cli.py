"""What every stage entry point shares: argument parsing, params, logging, seeding, metrics.

A stage is ``main(argv) -> int`` (wrapped in ``stage_main``): it calls ``stage_setup`` once,
then one ``ml`` function, then ``write_metrics``. Paths come from ``dvc.yaml`` through argv. A stage
imports that function (torch and the rest) inside ``main``, after ``stage_setup``, and this module
imports torch there too: ``--help`` answers with argparse and ``ml.config.params`` alone (bench/bench_startup.py).
"""

from __future__ import annotations

import argparse
import functools
import gc
import logging
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import NoReturn, ParamSpec

import psutil

from ml.base.determinism import cpu_capability, deterministic_torch
from ml.base.faults import seam
from ml.base.io import JSONValue, WriteError, atomic_write_json
from ml.config.params import DEFAULT_PARAMS_PATH, Params, load_params
from ml.config.yaml_file import ParamsError

logger = logging.getLogger("distill")
_P = ParamSpec("_P")


def git_sha() -> str:
    """HEAD commit of the working directory's repo, or ``unknown`` outside git."""
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True, timeout=10)
        return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def environment(sha: str) -> dict[str, str]:
    """The versions a stage ran on: ``python``, ``torch``, ``dvc``, ``numpy``, ``git_sha`` (``sha``) and,
    in a process that imported torch, ``cpu_capability``, the vector unit torch's CPU kernels use
    (``AVX2`` on x86-64, ``ml.base.determinism``).

    Recorded as ``<stage>/env`` in every stage's metrics (``write_metrics``); the driver warns
    when an attempt's differ from the previous attempt's (``ml.driver.generations``).
    """
    import numpy as np

    versions = {"python": platform.python_version()}
    for package in ("torch", "dvc"):
        try:
            versions[package] = version(package)
        except PackageNotFoundError:
            versions[package] = "absent"
    return {
        **versions,
        "numpy": np.__version__,
        "git_sha": sha,
        **({"cpu_capability": cpu_capability()} if "torch" in sys.modules else {}),
    }


def process_cpu_s() -> float:
    """CPU seconds (user + system) of this process and of its children that ended (``psutil``)."""
    t = psutil.Process().cpu_times()
    return float(t.user + t.system + t.children_user + t.children_system)


def stage_main(main: Callable[_P, int]) -> Callable[_P, int]:
    """A stage's ``main`` that reports a failed write (``ml.base.io.WriteError``) as one line,
    ``error: cannot write <file> (<step> <path>): <reason>``, and a params value that fails only in
    play (``ml.config.yaml_file.ParamsError``: a user's teacher answering no legal action) as
    ``error: <param>: <what>``; both return 2 (no traceback)."""

    @functools.wraps(main)
    def run(*args: _P.args, **kwargs: _P.kwargs) -> int:
        try:
            return main(*args, **kwargs)
        except (WriteError, ParamsError) as e:
            print(f"error: {e}", file=sys.stderr)
            return 2

    return run


def exit_stage(code: int) -> NoReturn:
    """End a stage process with exit status ``code`` (a stage's ``if __name__ == "__main__"``).

    ``gc.freeze()`` first: the objects alive at the end (torch's and numba's modules, the
    networks) are left out of the collections of the interpreter's finalization
    (``bench/bench_startup.py`` measures the difference). Atexit handlers and the closing of
    files by reference count run as usual.
    """
    gc.freeze()
    sys.exit(code)


def stage_setup(
    name: str,
    description: str,
    argv: list[str] | None,
    add_args: Callable[[argparse.ArgumentParser], None],
    uses_torch: bool = True,
) -> tuple[argparse.Namespace, Params]:
    """Parse argv, load params, configure logging and torch; exits with status 2 on bad params.

    Args:
        name: stage name (used for logging).
        description: ``--help`` text.
        argv: arguments (None: ``sys.argv[1:]``).
        add_args: adds the stage's own arguments to the parser.
        uses_torch: False for a stage that runs no network: torch is then neither imported (about
            a second) nor configured.

    Returns:
        ``(args, params)``.
    """
    parser = argparse.ArgumentParser(prog=f"stages/{name}.py", description=description)
    parser.add_argument("--params", type=Path, default=DEFAULT_PARAMS_PATH, help="params file (default: %(default)s)")
    parser.add_argument(
        "--no-progress",
        action="store_true",
        help="hide progress bars; a plain progress line is logged instead every $DISTILL_PROGRESS_EVERY_S seconds "
        "(default 30, 0: none), as when stderr is not a terminal",
    )
    add_args(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=os.environ.get("DISTILL_LOG_LEVEL", "INFO"),
        format=f"%(asctime)s {name} %(levelname)s %(message)s",
        stream=sys.stderr,
    )
    try:
        from ml.game.checks import check_params  # the game is checked where it is made

        params = load_params(args.params, check=check_params)
    except ParamsError as e:
        parser.exit(2, f"error: {e}\n")
    if uses_torch:
        import torch

        torch.set_num_threads(params.base.torch_threads)
        # cuBLAS needs a fixed workspace for deterministic results on a GPU (PyTorch "Reproducibility" notes)
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        deterministic_torch()
    # loop.py pipes stage output through; it sets DISTILL_PROGRESS=1 when its own stdout is a terminal
    args.progress = not args.no_progress and (sys.stderr.isatty() or os.environ.get("DISTILL_PROGRESS") == "1")
    args.started = time.perf_counter()
    args.generation = params.run.generation
    args.git_sha = git_sha()
    seam(f"g{params.run.generation:03d}.stage.{name}")
    logger.info(
        "%s: %s (git %s, generation %d attempt %d)",
        name,
        " ".join(sys.argv),
        args.git_sha,
        params.run.generation,
        params.run.attempt,
    )
    return args, params


def write_metrics(
    path: Path, metrics: Mapping[str, JSONValue], args: argparse.Namespace, stage: str, *, episodes: int
) -> None:
    """Write the stage's metrics JSON atomically, adding ``<stage>/episodes``, ``<stage>/wall_s``,
    ``<stage>/cpu_s`` and ``<stage>/env`` (``environment``).

    Args:
        path: the metrics file (``metrics/<stage>.json``, from ``dvc.yaml``).
        metrics: ``<stage>/…`` keys to JSON-serialisable values.
        args: the namespace of :func:`stage_setup` (``started``, ``generation``, ``git_sha``).
        stage: the stage name; ``<stage>/wall_s`` is the stage's wall time in seconds, ``<stage>/cpu_s``
            the CPU seconds (user + system) of the stage's process since it started, imports included,
            and of its worker processes that ended (``psutil``; Ray workers elsewhere are not counted).
        episodes: the games (episodes) the stage played, every seat's controller counted once
            per game (0 for a stage that plays none); the loop sums them per attempt
            (``ml.driver.history.attempt_episodes``), the x axis of NashConv in the papers.

    Raises:
        TypeError: a value JSON cannot serialise (nothing is written).
    """
    metrics = {
        **metrics,
        f"{stage}/episodes": int(episodes),
        f"{stage}/wall_s": round(time.perf_counter() - args.started, 3),
        f"{stage}/cpu_s": round(process_cpu_s(), 3),
        f"{stage}/env": environment(getattr(args, "git_sha", "unknown")),
    }
    seam(f"g{args.generation:03d}.stage.{stage}.metrics")  # outputs written, metrics and dvc.lock not yet
    atomic_write_json(path, metrics)
    logger.info("%s metrics -> %s", stage, path)
