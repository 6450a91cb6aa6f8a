"""Benchmark: CPU time a newcomer waits for before the first line (``--help``, the "already running" refusal).

Runs each command as a child process of this interpreter and prints its CPU seconds (user +
system, ``os.wait4``'s rusage of that child: imports count, the machine's other load does not),
the best of ``--repeat`` runs, and the ratio against the reference ``python -c "import torch"``
measured in the same run (``python -c pass`` is the floor):

* ``loop.py --help``, ``loop.py eval --help``, ``python -m stages.train --help``;
* ``loop.py`` refused because another loop.py holds the one-instance lock: a ``git clone`` of
  this checkout in a temporary folder, its ``.dvc/tmp/loop.lock`` held by this process
  (``filelock``, as ``ml.driver.workspace.acquire_lock`` takes it);
* ``loop.py elo`` in that clone (no ratings yet): it imports what a run's start imports
  (``ml.driver.commands``, ``ml.driver.orchestrator``: no torch, numba or scipy.stats), so it is
  what every restart of ``loop.py`` pays before its first step (the kill tests restart it 48 times);
* a stage's imports (torch and the commander core) ended by ``sys.exit`` and by
  ``ml.runtime.cli.exit_stage``: the difference is the collections of the interpreter's
  finalization that ``exit_stage`` skips, paid by each of a generation's seven stage processes.

Usage: python bench/bench_startup.py [--repeat N]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from filelock import FileLock

ROOT = Path(__file__).resolve().parent.parent
STAGE_IMPORTS = "import torch, ml.game.commander.core; from ml.runtime.cli import exit_stage"


def cpu_s(cmd: list[str], expect: str | None = None) -> float:
    """CPU seconds (user + system) of ``cmd`` run in ``ROOT`` to its end.

    Raises:
        SystemExit: ``expect`` is given and not in its output, or it failed without ``expect``.
    """
    env = {**os.environ, "DVC_NO_ANALYTICS": "1"}
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        said = out.read().decode(errors="replace")
    if (expect is not None and expect not in said) or (expect is None and proc.returncode):
        raise SystemExit(f"{' '.join(cmd)}: exit {proc.returncode}, said:\n{said[-2000:]}")
    return usage.ru_utime + usage.ru_stime


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeat", type=int, default=3, help="runs of each command; the least CPU time is shown (default 3)")
    args = p.parse_args(argv)
    py = sys.executable
    with tempfile.TemporaryDirectory() as tmp:
        clone = Path(tmp) / "run"
        subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True)
        lock_path = clone / ".dvc" / "tmp" / "loop.lock"
        lock_path.parent.mkdir(parents=True, exist_ok=True)
        cases: list[tuple[str, list[str], str | None]] = [
            ("python -c pass (floor)", [py, "-c", "pass"], None),
            ('python -c "import torch" (reference)', [py, "-c", "import torch"], None),
            ("loop.py --help", [py, "loop.py", "--help"], None),
            ("loop.py eval --help", [py, "loop.py", "eval", "--help"], None),
            ("python -m stages.train --help", [py, "-m", "stages.train", "--help"], None),
            ("loop.py refused: already running", [py, "loop.py", "--repo", str(clone)], "is already running"),
            ("loop.py elo (a run's imports)", [py, "loop.py", "--repo", str(clone), "elo"], "no ratings yet"),
            ("a stage's imports, sys.exit", [py, "-c", f"{STAGE_IMPORTS}; import sys; sys.exit(0)"], None),
            ("a stage's imports, exit_stage", [py, "-c", f"{STAGE_IMPORTS}; exit_stage(0)"], None),
        ]
        with FileLock(str(lock_path)):
            best = {name: min(cpu_s(cmd, expect) for _ in range(args.repeat)) for name, cmd, expect in cases}
    ref = best['python -c "import torch" (reference)']
    print(f"CPU seconds (user+sys), best of {args.repeat}; ratio against `import torch` ({ref:.3f} s)")
    for name, sec in best.items():
        print(f"  {name:40s} {sec:6.3f} s  x{sec / ref:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
