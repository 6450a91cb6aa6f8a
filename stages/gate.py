"""DVC stage `gate`: may this attempt's PPO batch join the training data?

(a) the PPO agent's win rate on fresh pods against heuristic teachers (Wilson lower bound
vs ``gate.min_win_rate``); (b) a student trained with the candidate batch against the
current student on the teacher holdout (``gate.max_accuracy_drop``); (c) data-quality
figures of the batch. Writes the verdict and every figure to ``metrics/gate.json``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ml.cli import stage_setup, write_metrics
from ml.encoding import RecordEncoder
from ml.gate import batch_quality, evaluate_vs_heuristics, verdict
from ml.policy import load_policy, save_policy
from ml.records import scan_batches
from ml.supervised import accuracy
from stages.train import build_and_train


def _args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", type=Path, required=True, help="PPO checkpoint")
    p.add_argument("--student", type=Path, required=True, help="current student checkpoint (trained without the batch)")
    p.add_argument("--teacher", type=Path, required=True, help="folder of teacher batches (holds the holdout)")
    p.add_argument("--pool", type=Path, required=True, help="folder of accepted PPO batches")
    p.add_argument("--candidate", type=Path, required=True, help="folder holding the candidate batch")
    p.add_argument("--out-student", type=Path, required=True, help="checkpoint of the student trained with the batch")
    p.add_argument("--metrics", type=Path, required=True, help="metrics JSON to write (the verdict)")


def main(argv: list[str] | None = None) -> int:
    args, params = stage_setup("gate", __doc__, argv, _args)
    batches = scan_batches(args.candidate, sources=("ppo",))
    if len(batches) != 1:
        print(f"error: {args.candidate}: expected exactly one PPO batch, found {len(batches)}", file=sys.stderr)
        return 2
    agent, _ = load_policy(args.model)
    current, _ = load_policy(args.student)
    win = evaluate_vs_heuristics(
        agent, games=params.gate.eval_games, pod_size=params.game.pod_size, max_turns=params.game.max_turns,
        num_envs=params.selfplay.num_envs, seed=params.stage_seed("gate"), encoder=RecordEncoder(), progress=args.progress,
    )  # fmt: skip
    candidate_student, train_metrics, holdout = build_and_train(
        params, args.teacher, [args.pool, args.candidate], args.progress
    )
    save_policy(candidate_student, args.out_student, {"role": "candidate_student", "generation": params.run.generation})
    metrics = verdict(
        win, accuracy(current, holdout), accuracy(candidate_student, holdout), batch_quality(batches[0]),
        min_win_rate=params.gate.min_win_rate, max_accuracy_drop=params.gate.max_accuracy_drop, confidence=params.gate.confidence,
    )  # fmt: skip
    metrics["gate/candidate_batch"] = batches[0].name
    metrics["gate/candidate_sampled_share"] = train_metrics["train/sampled_share"]
    write_metrics(args.metrics, metrics, args, "gate")
    return 0


if __name__ == "__main__":
    sys.exit(main())
