"""DVC stage `selfplay`: PPO self-play started from the student or the newest accepted agent.

Opponents are drawn per seat from the pool (heuristic teacher, frozen agents of earlier
accepted generations found in ``--frozen``, the current policy, the league: those agents and
the accepted students in ``--students``, by PFSP weights). With ``selfplay.start: agent`` PPO
resumes the newest ``gen<G>.pt`` of ``--frozen`` with its optimizer state (the student while there
is none). Writes the PPO agent's checkpoint (with its optimizer state) and ``metrics/selfplay.json``
(with the opponent mix actually played, the league's estimates, the generation's entropy
bonus, ``selfplay.ent_coef * selfplay.ent_decay**generation``, and for small two-player zero-sum
games the agent's exact NashConv, ``selfplay/nash_conv``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ml.runtime.cli import exit_stage, stage_main, stage_setup, write_metrics


def newest_generation(paths: list[Path]) -> Path | None:
    """The ``gen<G>.pt`` of ``paths`` with the highest G (None: none is named so)."""
    numbered = [(int(p.stem[3:]), p) for p in paths if p.stem.startswith("gen") and p.stem[3:].isdigit()]
    return max(numbered)[1] if numbered else None


def _args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--student", type=Path, required=True, help="student checkpoint to start from")
    p.add_argument("--frozen", type=Path, required=True, help="folder of frozen earlier-generation checkpoints (*.pt)")
    p.add_argument("--students", type=Path, help="folder of accepted generations' students (league members; *.pt)")
    p.add_argument("--out", type=Path, required=True, help="PPO checkpoint to write")
    p.add_argument("--plots", type=Path, help="DVCLive folder of the learning curves (none: not logged)")
    p.add_argument("--metrics", type=Path, required=True, help="metrics JSON to write")


@stage_main
def main(argv: list[str] | None = None) -> int:
    args, params = stage_setup("selfplay", __doc__, argv, _args)
    from ml.game.registry import make_game
    from ml.learn.curves import open_curves
    from ml.learn.ppo import train_ppo
    from ml.learn.settings import Resume, RunSettings
    from ml.model.policy import CheckpointError, load_optimizer_state, load_policy, save_policy
    from ml.runtime.compute import open_executor
    from ml.runtime.executor import ComputeError

    curves = open_curves(args.plots)
    student, _ = load_policy(args.student)
    wanted = params.selfplay.frozen_names
    paths = sorted(args.frozen.glob("*.pt")) if args.frozen.is_dir() else []
    missing = sorted(set(wanted or []) - {p.stem for p in paths})
    if missing:
        print(f"error: {args.frozen}: selfplay.frozen_names names {missing}, not found", file=sys.stderr)
        return 2
    frozen = {f"frozen:{p.stem}": load_policy(p)[0] for p in paths if wanted is None or p.stem in wanted}
    if params.selfplay.opponent_mix.get("league", 0) > 0 and args.students is not None and args.students.is_dir():
        frozen.update({f"student:{p.stem}": load_policy(p)[0] for p in sorted(args.students.glob("*.pt"))})
    resume = Resume()
    newest = newest_generation(paths)
    if params.selfplay.start == "agent" and newest is not None:
        try:
            resume = Resume(load_policy(newest)[0], f"frozen:{newest.stem}", load_optimizer_state(newest) or {})
        except CheckpointError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
    ent_coef = params.selfplay.entropy_coefficient(params.run.generation)
    cfg = params.selfplay.model_copy(update={"ent_coef": ent_coef})
    run = RunSettings(params.stage_seed("selfplay"), params.base.torch_device, args.progress)
    try:
        game = make_game(params.game, params.teacher)
        with open_executor(params.compute, params.base.torch_threads) as executor:
            net, trained = train_ppo(
                student, frozen, cfg, game, run,
                on_update=curves.log if curves else None, executor=executor,
                resume=resume,
            )  # fmt: skip
    except (ComputeError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    metrics = {**trained, "selfplay/ent_coef": ent_coef, "selfplay/frozen_opponents": sorted(frozen)}
    if game.zero_sum:  # {} but for small two-player zero-sum games; pyspiel imported for those only
        from ml.judge.nashconv import nash_conv_metrics

        metrics.update(nash_conv_metrics(net, game, None, prefix="selfplay"))
    meta = {"role": "ppo", "generation": params.run.generation, "model_version": params.run.model_version}
    save_policy(net, args.out, meta, optimizer=resume.optimizer_state)
    if curves:
        curves.close()
    write_metrics(args.metrics, metrics, args, "selfplay", episodes=trained["selfplay/episodes"])
    return 0


if __name__ == "__main__":
    exit_stage(main())
