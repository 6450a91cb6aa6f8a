"""DVC stage `gate`: may this attempt's PPO batch join the training data?

(a) an SPRT on the PPO agent's first-place rate in fresh seat-rotated duplicate deals
against heuristic teachers; (b) an exact McNemar test with a margin between the student
trained with the batch and the current student on the teacher holdout; (c) the candidate
student against the current student in pods (block only on a clear regression); (d)
data-quality figures of the batch. Writes the verdict and every figure to
``metrics/gate.json``.
"""

from __future__ import annotations

import argparse
import sys
from itertools import islice
from pathlib import Path

from ml.cli import stage_setup, write_metrics
from ml.game.registry import make_game
from ml.gate import (
    SPRT,
    batch_quality,
    duplicate_deal_outcomes,
    mcnemar_regression,
    sequential_test,
    student_non_regression,
    verdict,
)
from ml.policy import load_policy, save_policy
from ml.records import scan_batches
from ml.rollout import Controller
from ml.supervised import predict
from stages.train import build_and_train


def _args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", type=Path, required=True, help="PPO checkpoint")
    p.add_argument("--student", type=Path, required=True, help="current student checkpoint (trained without the batch)")
    p.add_argument("--teacher", type=Path, required=True, help="folder of teacher batches (holds the holdout)")
    p.add_argument("--forge", type=Path, help="folder of imported Forge files (teacher data, data/forge)")
    p.add_argument("--pool", type=Path, required=True, help="folder of accepted PPO batches")
    p.add_argument("--candidate", type=Path, required=True, help="folder holding the candidate batch")
    p.add_argument("--out-student", type=Path, required=True, help="checkpoint of the student trained with the batch")
    p.add_argument("--metrics", type=Path, required=True, help="metrics JSON to write (the verdict)")


def main(argv: list[str] | None = None) -> int:
    args, params = stage_setup("gate", __doc__, argv, _args)
    g, game = params.gate, params.game
    batches = scan_batches(args.candidate, sources=("ppo",))
    if len(batches) != 1:
        print(f"error: {args.candidate}: expected exactly one PPO batch, found {len(batches)}", file=sys.stderr)
        return 2
    agent, _ = load_policy(args.model)
    current, _ = load_policy(args.student)
    spec = make_game(game, params.teacher)
    pods = {"pod_size": game.pod_size, "max_turns": game.max_turns, "num_envs": params.selfplay.num_envs, "game": spec}
    sprt = SPRT(1.0 / game.pod_size, g.target_win_rate, g.alpha, g.beta)
    deals = duplicate_deal_outcomes(Controller("net", agent), Controller(g.opponent), seed=params.stage_seed("gate"), **pods)
    strength = sequential_test(deals, sprt, g.min_games, g.max_games, g.confidence)
    candidate_student, train_metrics, holdout = build_and_train(
        params, args.teacher, args.forge, [args.pool, args.candidate], args.progress
    )
    save_policy(candidate_student, args.out_student, {"role": "candidate_student", "generation": params.run.generation})
    correct_current = holdout.correct(predict(current, holdout))  # a partial label: any allowed action is right
    correct_candidate = holdout.correct(predict(candidate_student, holdout))
    paired = mcnemar_regression(correct_current, correct_candidate, g.max_accuracy_drop, g.alpha)
    paired.update(accuracy_current=float(correct_current.mean()), accuracy_candidate=float(correct_candidate.mean()))
    student_deals = duplicate_deal_outcomes(
        Controller("net", candidate_student, greedy=True),
        Controller("net", current, greedy=True),
        seed=params.stage_seed("gate") + 1,
        **pods,
    )
    n_deals = max(1, g.student_games // game.pod_size)
    outcomes = [x for deal in islice(student_deals, n_deals) for x in deal]
    student = student_non_regression(outcomes, game.pod_size, g.student_margin, g.confidence)
    metrics = verdict(strength, paired, student, batch_quality(batches[0]), gated=g.gated)
    metrics["gate/candidate_batch"] = batches[0].name
    metrics["gate/candidate_sampled_share"] = train_metrics["train/sampled_share"]
    write_metrics(args.metrics, metrics, args, "gate")
    return 0


if __name__ == "__main__":
    sys.exit(main())
