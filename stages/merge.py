"""DVC stage `merge`: the data the next generation starts from.

Writes ``<out>/pool`` (accepted PPO batches: the current pool, plus the candidate when
the gate accepted it), ``<out>/rejected`` (rejected batches, kept for audit, never
trained on), ``<out>/frozen`` (opponent checkpoints: plus this attempt's PPO agent when
accepted), ``<out>/students`` (each accepted generation's student, rated in the
tournaments) and ``<out>/next_student`` (the gate's candidate student when accepted: the
next train stage takes it when it would train on the same data), and ``metrics/merge.json``
(``ml.data.merge``; files are hard-linked, not copied). ``loop.py`` promotes these folders
to ``data/<name>`` before the next attempt (a DVC pipeline cannot feed its own input).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ml.runtime.cli import exit_stage, stage_main, stage_setup, write_metrics


def _args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--gate", type=Path, required=True, help="gate metrics JSON (the verdict)")
    p.add_argument("--candidate", type=Path, required=True, help="folder holding the candidate batch")
    p.add_argument("--model", type=Path, required=True, help="PPO checkpoint of this attempt")
    p.add_argument("--student", type=Path, required=True, help="student checkpoint of this attempt")
    p.add_argument("--pool", type=Path, required=True, help="current pool of accepted PPO batches")
    p.add_argument("--rejected", type=Path, required=True, help="current folder of rejected batches")
    p.add_argument("--frozen", type=Path, required=True, help="current folder of frozen opponents")
    p.add_argument("--students", type=Path, required=True, help="current folder of accepted generations' students")
    p.add_argument("--candidate-student", type=Path, help="the gate's candidate student (reused by the next train stage)")
    p.add_argument("--next-student", type=Path, help="current folder of the student the next train stage may reuse")
    p.add_argument("--out", type=Path, required=True, help="output folder (pool/, rejected/, frozen/, students/)")
    p.add_argument("--metrics", type=Path, required=True, help="metrics JSON to write")


@stage_main
def main(argv: list[str] | None = None) -> int:
    args, params = stage_setup("merge", __doc__, argv, _args, uses_torch=False)
    from ml.base.io import read_json
    from ml.data.merge import merge_generation

    accepted = bool(read_json(args.gate)["gate/accepted"])
    current = {"pool": args.pool, "rejected": args.rejected, "frozen": args.frozen, "students": args.students}
    if args.next_student is not None:
        current["next_student"] = args.next_student
    metrics = merge_generation(
        accepted, args.candidate, args.model, args.student, current, args.out, generation=params.run.generation,
        candidate_student=args.candidate_student,
    )  # fmt: skip
    write_metrics(args.metrics, metrics, args, "merge", episodes=0)  # moves files, plays no game
    return 0


if __name__ == "__main__":
    exit_stage(main())
