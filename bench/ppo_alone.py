"""Research: PPO alone from one checkpoint, its strength against the teachers by learner decisions.

Continues a policy (a student or agent checkpoint) with ``ml.learn.ppo.train_ppo`` in segments,
each resuming the last with its Adam state (``ml.learn.settings.Resume``), and after each segment
plays the agent greedily against ``pod_size - 1`` teachers in seat-rotated duplicate deals
(``ml.judge.deals.pod_win_rate``, the deals of ``loop.py eval``'s seed). The selfplay knobs are
the ``selfplay`` section of ``--params`` (default: this checkout's params.yaml with its ``full``
profile) with ``--set KEY=JSON`` overrides. Prints one JSON line per segment: cumulative learner
decisions, seconds of wall, the win rate and its 95% interval by deal.

This is the equal-compute baseline of the loop measured by hand (plain PPO at the same number of
learner decisions), and the fast way to compare PPO knobs by strength rather than by speed.

Usage: python bench/ppo_alone.py --start CKPT [--segments 500000,1000000,2000000] [--set update_epochs=4 ...]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from ml.config.params import load_params
from ml.config.sections import SelfplayParams
from ml.game.registry import make_game
from ml.judge.deals import pod_win_rate
from ml.learn.ppo import train_ppo
from ml.learn.settings import Resume, RunSettings
from ml.model.policy import load_policy
from ml.play.controller import Controller

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--start", type=Path, required=True, help="checkpoint to continue (student or agent)")
    parser.add_argument("--params", type=Path, default=ROOT / "params.yaml", help="params file (default: params.yaml)")
    parser.add_argument("--profile", default="full", help="profile of --params applied first ('' for none; default full)")
    parser.add_argument("--segments", default="500000,1000000,2000000", help="cumulative learner decisions to measure at")
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=JSON", help="a selfplay override, e.g. update_epochs=4"
    )
    parser.add_argument("--games", type=int, default=2000, help="evaluation games per segment (default 2000)")
    parser.add_argument("--seed", type=int, default=0, help="added to the self-play seed of every segment")
    parser.add_argument("--label", default="", help="a name printed on every line")
    args = parser.parse_args()
    params = load_params(args.params)
    if args.profile:
        params = params.overridden(params.profiles[args.profile])
    raw = params.selfplay.model_dump()
    for item in args.set:
        key, _, value = item.partition("=")
        if key not in raw:
            parser.error(f"--set {item}: selfplay has no key {key!r}")
        raw[key] = json.loads(value)
    try:
        ends = [int(x) for x in args.segments.split(",")]
    except ValueError:
        parser.error(f"--segments {args.segments!r}: comma-separated integers")
    game = make_game(params.game, params.teacher)
    student, _ = load_policy(args.start)
    resume, done, wall = Resume(student, "start"), 0, 0.0
    for i, end in enumerate(ends):
        cfg = SelfplayParams(**{**raw, "learner_decisions": max(1, end - done)})
        t = time.perf_counter()
        agent, m = train_ppo(
            student, {}, cfg, game, RunSettings(params.stage_seed("selfplay") + 1000 * i + args.seed), resume=resume
        )
        wall += time.perf_counter() - t
        done += m["selfplay/decisions"]
        resume = Resume(agent, f"segment {i}", resume.optimizer_state)
        rate = pod_win_rate(Controller("net", agent, greedy=True), Controller("teacher"), games=args.games, game=game,
                            num_envs=raw["num_envs"], seed=params.stage_seed("eval"))  # fmt: skip
        line = {"label": args.label, "decisions": done, "wall_s": round(wall, 1), "win_rate": round(rate.win_rate, 4),
                "low": round(rate.low, 4), "high": round(rate.high, 4), "games": rate.games}  # fmt: skip
        print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
