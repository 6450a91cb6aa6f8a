"""DVC stage `merge`: the data the next generation starts from.

Writes ``<out>/pool`` (accepted PPO batches: the current pool, plus the candidate when
the gate accepted it), ``<out>/rejected`` (rejected batches, kept for audit, never
trained on), ``<out>/frozen`` (opponent checkpoints: plus this attempt's PPO agent when
accepted) and ``<out>/students`` (each accepted generation's student, rated in the
tournaments). ``loop.py`` promotes these folders to ``data/<name>`` before the next
attempt (a DVC pipeline cannot feed its own input).
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from ml.cli import stage_setup, write_metrics
from ml.io import read_json
from ml.records import scan_batches


def _args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--gate", type=Path, required=True, help="gate metrics JSON (the verdict)")
    p.add_argument("--candidate", type=Path, required=True, help="folder holding the candidate batch")
    p.add_argument("--model", type=Path, required=True, help="PPO checkpoint of this attempt")
    p.add_argument("--student", type=Path, required=True, help="student checkpoint of this attempt")
    p.add_argument("--pool", type=Path, required=True, help="current pool of accepted PPO batches")
    p.add_argument("--rejected", type=Path, required=True, help="current folder of rejected batches")
    p.add_argument("--frozen", type=Path, required=True, help="current folder of frozen opponents")
    p.add_argument("--students", type=Path, required=True, help="current folder of accepted generations' students")
    p.add_argument("--out", type=Path, required=True, help="output folder (pool/, rejected/, frozen/)")
    p.add_argument("--metrics", type=Path, required=True, help="metrics JSON to write")


def _copy_tree(src: Path, dst: Path) -> None:
    dst.mkdir(parents=True, exist_ok=True)
    if src.is_dir():
        for f in sorted(src.iterdir()):
            if f.is_file() and not f.name.endswith(".tmp"):
                shutil.copy2(f, dst / f.name)


def main(argv: list[str] | None = None) -> int:
    args, params = stage_setup("merge", __doc__, argv, _args)
    accepted = bool(read_json(args.gate)["gate/accepted"])
    (candidate,) = scan_batches(args.candidate, sources=("ppo",))
    tmp = args.out.with_name(args.out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    for name, src in (("pool", args.pool), ("rejected", args.rejected), ("frozen", args.frozen), ("students", args.students)):
        _copy_tree(src, tmp / name)
    if accepted:
        shutil.copy2(candidate, tmp / "pool" / candidate.name)
        shutil.copy2(args.model, tmp / "frozen" / f"gen{params.run.generation:03d}.pt")
        shutil.copy2(args.student, tmp / "students" / f"gen{params.run.generation:03d}.pt")
    else:
        shutil.copy2(candidate, tmp / "rejected" / candidate.name)
    shutil.rmtree(args.out, ignore_errors=True)
    tmp.rename(args.out)
    metrics = {
        "merge/accepted": accepted,
        "merge/pool_batches": len(scan_batches(args.out / "pool", sources=("ppo",))),
        "merge/rejected_batches": len(scan_batches(args.out / "rejected", sources=("ppo",))),
        "merge/frozen_opponents": len(list((args.out / "frozen").glob("*.pt"))),
        "merge/students": len(list((args.out / "students").glob("*.pt"))),
    }
    write_metrics(args.metrics, metrics, args, "merge")
    return 0


if __name__ == "__main__":
    sys.exit(main())
