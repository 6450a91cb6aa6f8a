"""DVC stage `merge`: the data the next generation starts from.

Writes ``<out>/pool`` (accepted PPO batches: the current pool, plus the candidate when
the gate accepted it), ``<out>/rejected`` (rejected batches, kept for audit, never
trained on), ``<out>/frozen`` (opponent checkpoints: plus this attempt's PPO agent when
accepted) and ``<out>/students`` (each accepted generation's student, rated in the
tournaments), and ``metrics/merge.json`` (``ml.merge``). ``loop.py`` promotes these folders
to ``data/<name>`` before the next attempt (a DVC pipeline cannot feed its own input).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ml.cli import stage_setup, write_metrics
from ml.io import read_json
from ml.merge import merge_generation


def _args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--gate", type=Path, required=True, help="gate metrics JSON (the verdict)")
    p.add_argument("--candidate", type=Path, required=True, help="folder holding the candidate batch")
    p.add_argument("--model", type=Path, required=True, help="PPO checkpoint of this attempt")
    p.add_argument("--student", type=Path, required=True, help="student checkpoint of this attempt")
    p.add_argument("--pool", type=Path, required=True, help="current pool of accepted PPO batches")
    p.add_argument("--rejected", type=Path, required=True, help="current folder of rejected batches")
    p.add_argument("--frozen", type=Path, required=True, help="current folder of frozen opponents")
    p.add_argument("--students", type=Path, required=True, help="current folder of accepted generations' students")
    p.add_argument("--out", type=Path, required=True, help="output folder (pool/, rejected/, frozen/, students/)")
    p.add_argument("--metrics", type=Path, required=True, help="metrics JSON to write")


def main(argv: list[str] | None = None) -> int:
    args, params = stage_setup("merge", __doc__, argv, _args)
    accepted = bool(read_json(args.gate)["gate/accepted"])
    current = {"pool": args.pool, "rejected": args.rejected, "frozen": args.frozen, "students": args.students}
    metrics = merge_generation(
        accepted, args.candidate, args.model, args.student, current, args.out, generation=params.run.generation
    )
    write_metrics(args.metrics, metrics, args, "merge")
    return 0


if __name__ == "__main__":
    sys.exit(main())
